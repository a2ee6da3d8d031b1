/**
 * The privilege inventory (docs/schema.md, "Privilege inventory") against the live catalog of a
 * migrated database: every privilege the jobfence roles hold and every SECURITY DEFINER function
 * has its entry, every entry still exists, says why, and names a cross-consumer test that exists
 * in test/. A consumer's real login (core.provision_login) holds nothing the inventory does not
 * list for PUBLIC, jobfence_consumer or its consumer's role.
 *
 * After a migration that adds or drops a function, grant, policy or membership: run
 * `npm run inventory`, fill in the why and the test of each new entry, and commit docs/schema.md.
 */
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signatureSql } from "../../shared/db/catalog-reach.ts";
import {
  extensionObject,
  type InventoryEntry,
  type InventoryKey,
  keyOf,
  OWNER_ONLY,
  parseInventorySection,
  readExtraPrivileges,
  readInventory,
  SHARED_INVENTORY_ROLES,
  UNFILLED,
} from "../../shared/db/privilege-inventory.ts";
import { consumerRoleName, provisionLogin } from "../../shared/db/queries/provision-login.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

const ROOT = join(import.meta.dirname, "..", "..");
const HOW =
  "run `npm run inventory` (it rewrites the section of docs/schema.md), fill in the why and the cross-consumer test of each new entry, and commit it";

let db: TestDatabase;
let live: InventoryKey[];
let documented: InventoryEntry[];

beforeAll(async () => {
  db = await createTestDatabase();
  live = await db.withClient(readInventory);
  documented = parseInventorySection(readFileSync(join(ROOT, "docs", "schema.md"), "utf8"));
});
afterAll(async () => {
  await db?.drop();
});

/** Every test file's text, to find the titles the entries name. */
function testSources(dir = join(ROOT, "test")): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? testSources(join(dir, e.name))
      : e.name.endsWith(".ts")
        ? [readFileSync(join(dir, e.name), "utf8")]
        : [],
  );
}

/** Holders whose privileges a consumer's login has: each needs a cross-consumer test. */
function consumerReachable(heldBy: string): boolean {
  return heldBy === "PUBLIC" || heldBy === OWNER_ONLY || heldBy.startsWith("jobfence_consumer");
}

describe("the privilege inventory in docs/schema.md", () => {
  it("lists every privilege and definer function of the live catalog, and nothing that no longer exists", () => {
    const documentedKeys = new Set(documented.map(keyOf));
    const liveKeys = new Set(live.map(keyOf));
    const missing = live.filter((k) => !documentedKeys.has(keyOf(k))).map(keyOf);
    const stale = documented.filter((e) => !liveKeys.has(keyOf(e))).map(keyOf);
    const problems = [
      ...missing.map((k) => `missing entry: ${k}`),
      ...stale.map((k) => `entry for something that no longer exists: ${k}`),
    ];
    expect(problems, `the inventory is out of date; ${HOW}`).toEqual([]);
  });

  it("says why each entry is held and names the cross-consumer test that covers it", () => {
    const sources = testSources();
    const titled = (title: string) =>
      ['"', "'", "`"].some((q) => sources.some((s) => s.includes(`${q}${title}${q}`)));
    const problems: string[] = [];
    for (const e of documented) {
      if (e.why === UNFILLED || e.why.trim() === "") problems.push(`no why: ${keyOf(e)}`);
      if (e.test === UNFILLED || e.test.trim() === "") problems.push(`no cross-consumer test: ${keyOf(e)}`);
      else if (e.test === "—") {
        if (consumerReachable(e.heldBy))
          problems.push(`a consumer's login holds this, so it needs a test: ${keyOf(e)}`);
      } else if (!titled(e.test)) {
        problems.push(`names a test no file in test/ has (match its title exactly): ${keyOf(e)} → ${e.test}`);
      }
    }
    expect(problems, HOW).toEqual([]);
  });

  it("a consumer's real login may execute, read or write nothing the inventory does not list for it", async () => {
    const consumer = "award-points";
    const username = `jft_inv_${randomBytes(4).toString("hex")}`;
    await db.withClient((c) => provisionLogin(c, { username, password: "pw-inventory-1", consumer }));
    try {
      const holders = new Set(["PUBLIC", "jobfence_consumer", consumerRoleName(consumer)]);
      const listed = new Set(
        live
          .filter((k) => holders.has(k.heldBy))
          .map((k) => `${k.object} | ${k.privilege.replace(" · SECURITY DEFINER", "")}`),
      );
      const held = await db.withClient(async (c) => {
        const extra = await readExtraPrivileges(c);
        const { rows } = await c.query<{ object: string; privilege: string }>(
          `SELECT ${signatureSql("p", "n")} AS object, 'EXECUTE' AS privilege
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
              AND has_function_privilege($1, p.oid, 'EXECUTE')
           UNION ALL
           SELECT n.nspname || '.' || c.relname, t.privilege
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
                  unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS t(privilege)
            WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema' AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
              AND has_table_privilege($1, c.oid, t.privilege)
           UNION ALL
           SELECT 'schema ' || n.nspname, t.privilege
             FROM pg_namespace n, unnest(ARRAY['USAGE', 'CREATE']) AS t(privilege)
            WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema' AND has_schema_privilege($1, n.oid, t.privilege)`,
          [username],
        );
        return rows.map((r) => ({
          ...r,
          object: extra.extensionFunctions.has(r.object)
            ? extensionObject(extra.extensionFunctions.get(r.object) as string)
            : r.object,
        }));
      });
      const unlisted = held.map((h) => `${h.object} | ${h.privilege}`).filter((k) => !listed.has(k));
      expect([...new Set(unlisted)], `the login holds privileges with no entry; ${HOW}`).toEqual([]);
    } finally {
      await db.withClient((c) => c.query(`DROP ROLE ${username}`));
    }
  });

  it("covers the roles every deployment creates", () => {
    for (const role of SHARED_INVENTORY_ROLES)
      expect(
        live.some((k) => k.heldBy === role),
        role,
      ).toBe(true);
  });
});
