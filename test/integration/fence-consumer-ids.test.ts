/**
 * The fence names its consumer by the registry's smallint id (migration 0016): the insert takes
 * the id from core.consumer_roles by name and fails loudly for a consumer the registry lacks,
 * row-level security pins the id to the session's consumer, the cleanup still finds the pending
 * dead letters (which keep the name) of a fence's job, the registry's ids never change, and the
 * migration carries every existing fence over under its consumer's id.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { runMigrations } from "../../shared/db/migrate.ts";
import { coreMigrationSet, type MigrationSet } from "../../shared/db/migrations.ts";
import { beginWithFences, fenceFingerprints } from "../../shared/db/queries/begin-with-fences.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { jobFingerprint } from "../../shared/envelope/fingerprint.ts";
import { MigrationError } from "../../shared/errors/migration.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { expectRefused, SQLSTATE } from "../support/expect-pg.ts";
import { commitFences } from "../support/fences.ts";
import { insertDeadLetter, insertFence } from "../support/fixtures.ts";

/** SQLSTATE of core.consumer_id for a consumer the registry does not have. */
const NOT_REGISTERED = "23503";
/** SQLSTATE of the registry's identity guard. */
const RESTRICT_VIOLATION = "23001";

/** Every test database has both (the deployment's sets register them). */
const A = "award-points";
const B = "notify-user";

const fences = (consumer: string, jobIds: readonly string[]) => ({
  consumer,
  ttlSeconds: 3600,
  jobs: jobIds.map((jobId) => ({
    jobId,
    tenantId: "t",
    fingerprint: jobFingerprint("t", { jobId, consumer }),
  })),
});

let db: TestDatabase;
let client: pg.Client;
beforeAll(async () => {
  db = await createTestDatabase();
  client = new pg.Client({ connectionString: db.url });
  await client.connect();
});
afterAll(async () => {
  await client?.end();
  await db?.drop();
});

const fenceCount = async (jobId: string): Promise<number> =>
  (
    await client.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM core.processed_jobs WHERE job_id = $1",
      [jobId],
    )
  ).rows[0]?.n ?? -1;

describe("the fence insert", () => {
  it("fails loudly for a consumer the registry does not have, never as a duplicate", async () => {
    // Before 0016 the migrator (which row-level security does not restrict) wrote this fence and
    // the job ran; with no id to write, an insert that returned no row would have made the job a
    // "duplicate" and acked it unapplied.
    const attempt = beginWithFences(
      client,
      fences("never-registered", ["ids:unregistered-1", "ids:unregistered-2"]),
    );
    await expect(attempt).rejects.toMatchObject({
      code: NOT_REGISTERED,
      message: expect.stringMatching(/consumer never-registered is not registered/),
    });
    await client.query("ROLLBACK");
    expect(await fenceCount("ids:unregistered-1")).toBe(0);
  });

  it("looks the consumer's id up once per statement, not once per fence", async () => {
    await client.query("SET track_functions = 'pl'");
    try {
      const jobIds = Array.from({ length: 25 }, (_, i) => `ids:one-probe-${i}`);
      const inserted = await beginWithFences(client, fences(A, jobIds));
      try {
        expect(inserted.fresh.size).toBe(25);
        const { rows } = await client.query<{ calls: number }>(
          `SELECT calls::int FROM pg_stat_xact_user_functions
            WHERE schemaname = 'core' AND funcname = 'consumer_id'`,
        );
        expect(rows).toEqual([{ calls: 1 }]);
      } finally {
        await client.query("ROLLBACK");
      }
    } finally {
      await client.query("RESET track_functions");
    }
  });

  it("a fence of consumer A does not hold the same job id for consumer B", async () => {
    await commitFences(client, await beginWithFences(client, fences(A, ["ids:shared-1"])));
    const forB = await beginWithFences(client, fences(B, ["ids:shared-1"]));
    expect(forB.fresh).toEqual(new Set(["ids:shared-1"]));
    await commitFences(client, forB);
    // Each consumer's fence is its own, with its own fingerprint.
    expect(await fenceFingerprints(client, A, ["ids:shared-1"])).toEqual(
      new Map([["ids:shared-1", jobFingerprint("t", { jobId: "ids:shared-1", consumer: A })]]),
    );
    expect(await fenceFingerprints(client, B, ["ids:shared-1"])).toEqual(
      new Map([["ids:shared-1", jobFingerprint("t", { jobId: "ids:shared-1", consumer: B })]]),
    );
    // A second delivery to A is A's duplicate, and B's fence did not make it one earlier.
    expect((await beginWithFences(client, fences(A, ["ids:shared-1"]))).fresh).toEqual(new Set());
    await client.query("ROLLBACK");
    expect(await fenceCount("ids:shared-1")).toBe(2);
  });
});

describe("row-level security on the consumer's id", () => {
  const login = `jft_ids_${randomBytes(4).toString("hex")}`;
  const password = randomBytes(12).toString("hex");
  let asA: pg.Client;
  let idOfB: number;

  beforeAll(async () => {
    await client.query(`CREATE ROLE ${login} LOGIN PASSWORD '${password}'`);
    await client.query(`GRANT ${consumerRoleName(A)} TO ${login}`);
    const url = new URL(db.url);
    url.username = login;
    url.password = password;
    asA = new pg.Client({ connectionString: url.toString() });
    await asA.connect();
    await insertFence(client, "ids:rls-b", { consumer: B });
    await insertFence(client, "ids:rls-a", { consumer: A });
    idOfB = (await client.query<{ id: number }>("SELECT core.consumer_id($1) AS id", [B])).rows[0]?.id ?? 0;
  });
  afterAll(async () => {
    await asA?.end();
    await client.query(`DROP ROLE IF EXISTS ${login}`);
  });

  it("A's login may not insert a fence under B's id, by name or by number", async () => {
    await expectRefused(
      asA.query(
        "INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at) VALUES ('ids:forged', core.consumer_id($1), 't', now() + interval '1 day')",
        [B],
      ),
      SQLSTATE.insufficientPrivilege,
    );
    await expectRefused(
      asA.query(
        "INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at) VALUES ('ids:forged', $1, 't', now() + interval '1 day')",
        [idOfB],
      ),
      SQLSTATE.insufficientPrivilege,
    );
    // The harness's own insert, pointed at the other consumer.
    await expectRefused(beginWithFences(asA, fences(B, ["ids:forged"])), SQLSTATE.insufficientPrivilege);
    await asA.query("ROLLBACK");
    expect(await fenceCount("ids:forged")).toBe(0);
  });

  it("A's login reads its own fences and none of B's", async () => {
    const { rows } = await asA.query<{ job_id: string }>(
      "SELECT job_id FROM core.processed_jobs WHERE job_id LIKE 'ids:rls-%' ORDER BY job_id",
    );
    expect(rows.map((r) => r.job_id)).toEqual(["ids:rls-a"]);
    const byId = await asA.query("SELECT 1 FROM core.processed_jobs WHERE consumer_id = $1", [idOfB]);
    expect(byId.rowCount).toBe(0);
    expect(await fenceFingerprints(asA, B, ["ids:rls-b"])).toEqual(new Map());
    expect((await asA.query("SELECT * FROM core.hold_fence('ids:rls-b', $1)", [B])).rowCount).toBe(0);
    expect((await asA.query("SELECT * FROM core.hold_fence('ids:rls-a', $1)", [A])).rowCount).toBe(1);
  });

  it("A's login may not move its own fence to B's id", async () => {
    // No UPDATE is granted at all; the policy would refuse it too.
    await expectRefused(
      asA.query("UPDATE core.processed_jobs SET consumer_id = $1 WHERE job_id = 'ids:rls-a'", [idOfB]),
      SQLSTATE.insufficientPrivilege,
    );
  });
});

describe("the cleanup matches fences to pending dead letters by consumer", () => {
  it("a pending dead letter of B holds B's expired fence of the job, not A's", async () => {
    for (const consumer of [A, B]) {
      await client.query(
        `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, processed_at, expires_at)
         VALUES ('ids:held', core.consumer_id($1), 't', now() - interval '8 days', now() - interval '1 day')`,
        [consumer],
      );
    }
    await insertDeadLetter(client, { job_id: "ids:held", consumer: B });
    await client.query("BEGIN");
    try {
      await client.query("SET LOCAL ROLE jobfence_cleanup");
      const { rows } = await client.query(
        "SELECT core.held_fence_count(100) AS held, core.expired_fence_backlog(100) AS backlog",
      );
      expect(rows[0]).toEqual({ held: 1, backlog: 1 });
      expect((await client.query("SELECT core.delete_expired_fences(100) AS n")).rows[0]?.n).toBe(1);
      await client.query("RESET ROLE");
      const left = await client.query<{ consumer: string }>(
        `SELECT c.consumer FROM core.processed_jobs AS p JOIN core.consumer_roles AS c ON c.id = p.consumer_id
          WHERE p.job_id = 'ids:held'`,
      );
      expect(left.rows).toEqual([{ consumer: B }]);
    } finally {
      await client.query("ROLLBACK");
    }
  });
});

describe("the registry's ids", () => {
  it("are never changed, reused or wasted", async () => {
    const before = await client.query<{ consumer: string; id: number }>(
      "SELECT consumer, id FROM core.consumer_roles ORDER BY id",
    );
    expect(new Set(before.rows.map((r) => r.id)).size).toBe(before.rows.length);
    await client.query("BEGIN");
    try {
      await client.query("SAVEPOINT s");
      for (const change of [
        `DELETE FROM core.consumer_roles WHERE consumer = '${B}'`,
        `UPDATE core.consumer_roles SET consumer = 'renamed' WHERE consumer = '${B}'`,
        `UPDATE core.consumer_roles SET id = DEFAULT WHERE consumer = '${B}'`,
        "TRUNCATE core.consumer_roles CASCADE",
      ]) {
        await expectRefused(client.query(change), RESTRICT_VIOLATION);
        await client.query("ROLLBACK TO SAVEPOINT s");
      }
      await expectRefused(
        client.query(`UPDATE core.consumer_roles SET id = 999 WHERE consumer = '${B}'`),
        SQLSTATE.generatedAlways,
      );
      await client.query("ROLLBACK TO SAVEPOINT s");
      // Its queues change freely.
      await client.query(`UPDATE core.consumer_roles SET queues = '{http://q/x}' WHERE consumer = '${B}'`);
      // Registering again (the runner does on every run) draws no id.
      const sequence = "SELECT last_value::int AS v FROM core.consumer_roles_id_seq";
      const drawn = (await client.query<{ v: number }>(sequence)).rows[0]?.v;
      await client.query("SELECT core.ensure_consumer_role($1), core.ensure_consumer_role($2)", [A, B]);
      expect((await client.query<{ v: number }>(sequence)).rows[0]?.v).toBe(drawn);
    } finally {
      await client.query("ROLLBACK");
    }
    const after = await client.query("SELECT consumer, id FROM core.consumer_roles ORDER BY id");
    expect(after.rows).toEqual(before.rows);
  });
});

describe("migration 0016", () => {
  const shipped = coreMigrationSet().migrations;
  const upTo = (version: number): MigrationSet[] => [
    { name: "core", migrations: shipped.filter((m) => m.version <= version) },
  ];
  const created: TestDatabase[] = [];
  const roles: string[] = [];
  afterEach(async () => {
    await Promise.all(created.splice(0).map((d) => d.drop()));
    for (const role of roles.splice(0)) await client.query(`DROP ROLE IF EXISTS ${role}`);
  });

  /** An empty database migrated to 0015, with `fences` written as that schema took them. */
  async function before0016(
    rows: ReadonlyArray<{ job: string; consumer: string; fingerprint: string | null; expired: boolean }>,
  ): Promise<TestDatabase> {
    const fresh = await createTestDatabase({ empty: true });
    created.push(fresh);
    await runMigrations({ connectionString: fresh.url, sets: upTo(15) });
    await fresh.withClient(async (c) => {
      // Registered at 0015, as the runner registers a migrated consumer.
      await c.query("SELECT core.ensure_consumer_role($1)", [A]);
      for (const r of rows) {
        await c.query(
          `INSERT INTO core.processed_jobs (job_id, consumer, tenant_id, fingerprint, processed_at, expires_at)
           VALUES ($1, $2, 'tenant-' || $1, $3::uuid,
                   now() - interval '8 days', now() + CASE WHEN $4 THEN interval '-1 day' ELSE interval '1 day' END)`,
          [r.job, r.consumer, r.fingerprint, r.expired],
        );
      }
    });
    return fresh;
  }

  it("carries every fence over under its consumer's id, registering a consumer that had fences only", async () => {
    const retired = `retired-${randomBytes(3).toString("hex")}`;
    roles.push(consumerRoleName(retired));
    const rows = [
      { job: "m-1", consumer: A, fingerprint: "00112233445566778899aabbccddeeff", expired: false },
      { job: "m-2", consumer: A, fingerprint: null, expired: true },
      { job: "m-1", consumer: retired, fingerprint: "ffeeddccbbaa99887766554433221100", expired: false },
      { job: "m-3", consumer: retired, fingerprint: null, expired: false },
    ];
    const fresh = await before0016(rows);
    const old = await fresh.withClient((c) =>
      c.query(
        `SELECT job_id, consumer, tenant_id, encode(uuid_send(fingerprint), 'hex') AS fingerprint, processed_at, expires_at
           FROM core.processed_jobs ORDER BY job_id, consumer`,
      ),
    );

    const report = await runMigrations({ connectionString: fresh.url, sets: upTo(16) });
    expect(report.applied.map((m) => m.version)).toEqual([16]);

    await fresh.withClient(async (c) => {
      const registry = await c.query<{ consumer: string; id: number; role_name: string }>(
        "SELECT consumer, id, role_name FROM core.consumer_roles ORDER BY id",
      );
      expect(registry.rows).toEqual([
        { consumer: A, id: 1, role_name: consumerRoleName(A) },
        { consumer: retired, id: 2, role_name: consumerRoleName(retired) },
      ]);
      const carried = await c.query(
        `SELECT p.job_id, c.consumer, p.tenant_id, encode(uuid_send(p.fingerprint), 'hex') AS fingerprint,
                p.processed_at, p.expires_at
           FROM core.processed_jobs AS p JOIN core.consumer_roles AS c ON c.id = p.consumer_id
          ORDER BY p.job_id, c.consumer`,
      );
      expect(carried.rows).toEqual(old.rows);
      const ids = await c.query(
        "SELECT job_id, consumer_id FROM core.processed_jobs ORDER BY job_id, consumer_id",
      );
      expect(ids.rows).toEqual([
        { job_id: "m-1", consumer_id: 1 },
        { job_id: "m-1", consumer_id: 2 },
        { job_id: "m-2", consumer_id: 1 },
        { job_id: "m-3", consumer_id: 2 },
      ]);
      // The row's order: fixed-width columns first, so none of its bytes is padding.
      const columns = await c.query<{ column_name: string }>(
        `SELECT column_name FROM information_schema.columns
          WHERE table_schema = 'core' AND table_name = 'processed_jobs' ORDER BY ordinal_position`,
      );
      expect(columns.rows.map((r) => r.column_name)).toEqual([
        "processed_at",
        "expires_at",
        "consumer_id",
        "fingerprint",
        "job_id",
        "tenant_id",
      ]);
      // The carried fences still decide: a repeat of each is a duplicate, under its own consumer.
      await c.query("SELECT core.ensure_consumer_role($1)", [B]);
      expect((await beginWithFences(c, fences(A, ["m-1", "m-2", "m-3"]))).fresh).toEqual(new Set(["m-3"]));
      await c.query("ROLLBACK");
      expect((await beginWithFences(c, fences(retired, ["m-1", "m-2", "m-3"]))).fresh).toEqual(
        new Set(["m-2"]),
      );
      await c.query("ROLLBACK");
      // The expired one is the cleanup's, as before.
      expect((await c.query("SELECT core.delete_expired_fences(10) AS n")).rows[0]?.n).toBe(1);
    });
  });

  it("refuses, changing nothing, when fences name a consumer that cannot be registered", async () => {
    const fresh = await before0016([
      { job: "u-1", consumer: A, fingerprint: null, expired: false },
      { job: "u-1", consumer: "Legacy Consumer", fingerprint: null, expired: false },
    ]);
    const attempt = runMigrations({ connectionString: fresh.url, sets: upTo(16) });
    await expect(attempt).rejects.toBeInstanceOf(MigrationError);
    await expect(attempt).rejects.toThrow(/cannot be registered.*Legacy Consumer/);
    await fresh.withClient(async (c) => {
      const { rows } = await c.query("SELECT job_id, consumer FROM core.processed_jobs ORDER BY consumer");
      expect(rows).toEqual([
        { job_id: "u-1", consumer: "Legacy Consumer" },
        { job_id: "u-1", consumer: A },
      ]);
      const versions = await c.query("SELECT max(version)::int AS v FROM core.schema_migrations");
      expect(versions.rows[0]).toEqual({ v: 15 });
    });
  });
});
