/**
 * Schema drift check: the schema the migrations produce must equal the committed, reviewed
 * description (shared/db/core-catalog.txt), which is also what the doctor checks a live database
 * against; and each registered consumer's own schema must equal its committed description
 * (functions/<consumer>/schema.txt, shared/db/consumer-catalog.ts). After an intended schema
 * change (a new migration), refresh both with `npm run schema:snapshot` and review the diff. A new
 * consumer's schema.txt is written by its first run, except with CI set: there its absence fails,
 * naming the file to snapshot, review and commit.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CONSUMERS } from "../../functions/consumers.ts";
import { consumerPaths } from "../../functions/registry.ts";
import { readCatalog } from "../../shared/db/catalog.ts";
import { describeCore, renderCatalogDescription } from "../../shared/db/catalog-description.ts";
import { consumerSchemas, consumerSchemaText } from "../../shared/db/consumer-catalog.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { expectSchemaSnapshot } from "../support/schema-snapshot.ts";

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

it("the migrated schema matches the committed snapshot", async () => {
  const described = renderCatalogDescription(describeCore(await db.withClient(readCatalog)));
  await expect(described).toMatchFileSnapshot("../../shared/db/core-catalog.txt");
});

describe.each(CONSUMERS.map((c) => c.definition.name))("consumer %s", (consumer) => {
  it("its migrated schema matches the committed snapshot", async () => {
    const described = await db.withClient((c) => consumerSchemaText(c, consumer));
    await expectSchemaSnapshot(described, consumerPaths(consumer).schema);
  });

  it("its description shows a column added to one of its tables and a grant to its role elsewhere", async () => {
    await db.withClient(async (c) => {
      const clean = await consumerSchemaText(c, consumer);
      const schemas = consumerSchemas(await readCatalog(c), consumer);
      expect(schemas.length).toBeGreaterThan(0);
      const { rows } = await c.query<{ name: string }>(
        `SELECT c.oid::regclass::text AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = ANY ($1) AND c.relkind = 'r' ORDER BY 1 LIMIT 1`,
        [schemas],
      );
      const table = rows[0]?.name;
      if (table === undefined) throw new Error(`consumer ${consumer}'s schemas hold no table`);
      await c.query("BEGIN");
      try {
        await c.query(`ALTER TABLE ${table} ADD COLUMN drift_probe integer`);
        await c.query(`GRANT SELECT ON core.dead_letters TO ${consumerRoleName(consumer)}`);
        const drifted = (await consumerSchemaText(c, consumer)).split("\n");
        const before = new Set(clean.split("\n"));
        expect(drifted.filter((line) => !before.has(line)).sort()).toEqual(
          [
            `${table}.drift_probe integer`,
            `core.dead_letters SELECT TO ${consumerRoleName(consumer)}`,
          ].sort(),
        );
      } finally {
        await c.query("ROLLBACK");
      }
    });
  });
});
