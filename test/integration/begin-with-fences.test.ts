/**
 * The fence insert rides on BEGIN as literal SQL (shared/db/queries/begin-with-fences.ts): any job
 * id a valid envelope can carry must come back exactly as sent, and nothing else may happen.
 */
import fc from "fast-check";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  beginWithFences,
  FENCE_SCOPE,
  type FencesInserted,
  fenceFingerprints,
} from "../../shared/db/queries/begin-with-fences.ts";
import { envelopeSchema } from "../../shared/envelope/envelope.ts";
import { jobFingerprint } from "../../shared/envelope/fingerprint.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { registerConsumers } from "../support/fixtures.ts";

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  // A fence names its consumer by the registry's id: these consumers are registered, as migrating
  // their sets would (test/integration/fence-consumer-ids.test.ts has what an unregistered one gets).
  await db.withClient((c) => registerConsumers(c, ["fence-literals", "fence-dups", "fence-commits"]));
});
afterAll(async () => {
  await db?.drop();
});

const HOSTILE = [
  "'); DROP TABLE core.processed_jobs; --",
  "\\'; SELECT pg_sleep(10); --",
  "back\\slash",
  "$$dollar$$",
  "E'x'",
  "quote''s",
  "semi;colon",
  "new\nline\r\ttab",
  "😀 emoji and ünïcödé",
  "  ",
];

/** Ids the envelope accepts (the only ones that can reach the fence). */
const storableId = fc
  .oneof(
    fc.string({ unit: "binary", maxLength: 80 }),
    fc.constantFrom(...HOSTILE),
    fc.string({ maxLength: 255 }),
  )
  .filter((id) => envelopeSchema.shape.job_id.safeParse(id).success);

describe("beginWithFences", () => {
  it("inserts every id exactly as sent, hostile or not, and runs nothing else", async () => {
    await db.withClient(async (client) => {
      await fc.assert(
        fc.asyncProperty(
          fc.uniqueArray(storableId, { minLength: 1, maxLength: 12 }),
          fc.string(),
          async (ids, tenant) => {
            const tenantId = tenant.replaceAll("\u0000", "") || "t";
            if (!tenantId.isWellFormed()) return;
            const fresh = await beginWithFences(client, {
              consumer: "fence-literals",
              ttlSeconds: 60,
              jobs: ids.map((jobId) => ({ jobId, tenantId, fingerprint: jobFingerprint(tenantId, jobId) })),
            });
            try {
              expect([...fresh.fresh].sort()).toEqual([...ids].sort());
              const { rows } = await client.query<{ job_id: string; tenant_id: string; fingerprint: Buffer }>(
                "SELECT job_id, tenant_id, uuid_send(fingerprint) AS fingerprint FROM core.processed_jobs WHERE consumer_id = core.consumer_id('fence-literals')",
              );
              expect(rows.map((r) => r.job_id).sort()).toEqual([...ids].sort());
              for (const row of rows) {
                expect(row.tenant_id).toBe(tenantId);
                expect(row.fingerprint.equals(jobFingerprint(tenantId, row.job_id))).toBe(true);
              }
              // The transaction id the insert returns is the open transaction's.
              const { rows: xid } = await client.query<{ xid: string }>(
                "SELECT pg_current_xact_id()::text AS xid",
              );
              expect(fresh.xid).toBe(xid[0]?.xid);
            } finally {
              await client.query("ROLLBACK");
            }
          },
        ),
        { numRuns: 150 },
      );
      const { rows } = await client.query("SELECT to_regclass('core.processed_jobs') IS NOT NULL AS present");
      expect(rows[0]).toEqual({ present: true });
    });
  });

  it("reports a fence that exists as a duplicate, and a repeated id once", async () => {
    await db.withClient(async (client) => {
      const set = (jobs: string[]) => ({
        consumer: "fence-dups",
        ttlSeconds: 60,
        jobs: jobs.map((jobId) => ({ jobId, tenantId: "t", fingerprint: jobFingerprint("t", jobId) })),
      });
      const first = await beginWithFences(client, set(["d-1"]));
      expect(first.fresh).toEqual(new Set(["d-1"]));
      await client.query(checkedCommit(first));
      expect((await beginWithFences(client, set(["d-1", "d-2", "d-2"]))).fresh).toEqual(new Set(["d-2"]));
      expect(await fenceFingerprints(client, "fence-dups", ["d-1", "d-9"])).toEqual(
        new Map([["d-1", jobFingerprint("t", "d-1")]]),
      );
      await client.query("ROLLBACK");
      // Every fence existing: nothing inserted, no transaction id to check.
      expect((await beginWithFences(client, set(["d-1"]))).xid).toBeNull();
      await client.query("ROLLBACK");
    });
  });

  it("a fence transaction commits only through the harness's check (migration 0023)", async () => {
    await db.withClient(async (client) => {
      const set = (jobId: string) => ({
        consumer: "fence-commits",
        ttlSeconds: 60,
        jobs: [{ jobId, tenantId: "t", fingerprint: jobFingerprint("t", jobId) }],
      });
      const count = async () =>
        (
          await client.query(
            "SELECT job_id FROM core.processed_jobs WHERE consumer_id = core.consumer_id('fence-commits') ORDER BY 1",
          )
        ).rows.map((r) => r.job_id);
      // A plain COMMIT: the deferred trigger refuses it, and the fence is rolled back.
      await beginWithFences(client, set("c-plain"));
      await expect(client.query("COMMIT")).rejects.toMatchObject({ code: "JF002" });
      expect(client.getTransactionStatus()).toBe("I");
      // The check, with another transaction's id: JF001, nothing committed.
      const other = await beginWithFences(client, set("c-foreign"));
      await expect(
        client.query(checkedCommit({ ...other, xid: String(BigInt(other.xid ?? 0) + 1n) })),
      ).rejects.toMatchObject({ code: "JF001" });
      await client.query("ROLLBACK");
      // The check, with the role or search_path changed since BEGIN: JF003, nothing committed.
      const moved = await beginWithFences(client, set("c-scope"));
      await client.query("SET LOCAL search_path = pg_catalog");
      await expect(client.query(checkedCommit(moved))).rejects.toMatchObject({ code: "JF003" });
      await client.query("ROLLBACK");
      // The check with the scope BEGIN read, after a RESET ALL (which resets the marker): commits.
      const checked = await beginWithFences(client, set("c-checked"));
      await client.query("RESET ALL");
      const results = (await client.query(checkedCommit(checked))) as unknown as pg.QueryResult[];
      expect(results.map((r) => r.command)).toEqual(["SELECT", "COMMIT"]);
      // A fence inserted without the marker (a fixture, a seed) is not checked.
      await client.query(
        "INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at) VALUES ('c-unmarked', core.consumer_id('fence-commits'), 't', now() + interval '1 day')",
      );
      expect(await count()).toEqual(["c-checked", "c-unmarked"]);
    });
  });

  it("refuses an empty set and a TTL that is not a positive whole number", async () => {
    await db.withClient(async (client) => {
      const jobs = [{ jobId: "x", tenantId: "t", fingerprint: jobFingerprint("t", {}) }];
      await expect(beginWithFences(client, { consumer: "c", ttlSeconds: 60, jobs: [] })).rejects.toThrow(
        RangeError,
      );
      for (const ttlSeconds of [0, -1, 1.5, Number.NaN, 2 ** 60]) {
        await expect(beginWithFences(client, { consumer: "c", ttlSeconds, jobs })).rejects.toThrow(
          RangeError,
        );
      }
      await expect(
        beginWithFences(client, {
          consumer: "c",
          ttlSeconds: 60,
          jobs: [{ jobId: "x", tenantId: "t", fingerprint: Buffer.alloc(15) }],
        }),
      ).rejects.toThrow(RangeError);
      const { rows } = await client.query("SELECT now() = statement_timestamp() AS outside");
      expect(rows[0]).toEqual({ outside: true }); // no transaction was left open
    });
  });
});

/** The harness's COMMIT of what `beginWithFences` opened (shared/fence/fence-transaction.ts). */
function checkedCommit({ xid, scope }: FencesInserted): string {
  return `SELECT core.fence_commit_check('${xid}'::xid8, ${pg.escapeLiteral(scope)}, ${FENCE_SCOPE});\nCOMMIT`;
}
