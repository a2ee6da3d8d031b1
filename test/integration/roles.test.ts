/**
 * SPEC §9: each role may do what its function needs and nothing else; no role but the migrator
 * owns objects or runs DDL. Every statement runs as the role (SET ROLE) in a transaction that is
 * rolled back, so the matrix leaves the database as it found it.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { expectRefused, SQLSTATE } from "../support/expect-pg.ts";
import { insertDeadLetter, insertFence } from "../support/fixtures.ts";

const ROLES = ["jobfence_consumer", "jobfence_ops", "jobfence_cleanup"] as const;
type Role = (typeof ROLES)[number];

let db: TestDatabase;
let client: pg.Client;
let pendingId: string;

beforeAll(async () => {
  db = await createTestDatabase();
  client = new pg.Client({ connectionString: db.url });
  await client.connect();
  // Committed fixtures the roles act on: one pending dead letter, one live and one expired fence.
  pendingId = await insertDeadLetter(client, { job_id: "award:fixture" });
  await insertFence(client, "award:live");
  await client.query(
    `INSERT INTO core.processed_jobs (job_id, consumer, tenant_id, processed_at, expires_at)
     VALUES ('award:expired', 'award-points', 't_42', now() - interval '8 days', now() - interval '1 day')`,
  );
});

afterAll(async () => {
  await client?.end();
  await db?.drop();
});

/** Runs `sql` as `role` inside a rolled-back transaction. */
async function asRole(role: Role, sql: string, params: unknown[] = []): Promise<pg.QueryResult> {
  await client.query("BEGIN");
  try {
    await client.query(`SET LOCAL ROLE ${role}`);
    return await client.query(sql, params);
  } finally {
    await client.query("ROLLBACK");
  }
}

const DEAD_LETTER_INSERT = `INSERT INTO core.dead_letters
  (job_id, consumer, queue, payload, attempts, error_kind, last_error, correlation_id, body_form, body)
  VALUES ('award:new', 'award-points', 'q', NULL, 1, 'poison', '{"class":"PoisonMessageError","message":"bad"}', 'c', 'text', 'x')`;

/** Every operation of the matrix, and the roles allowed to perform it. */
const OPERATIONS: Array<{ what: string; sql: string; params?: (id: string) => unknown[]; allowed: Role[] }> =
  [
    {
      what: "insert a fence",
      sql: "INSERT INTO core.processed_jobs (job_id, consumer, tenant_id, expires_at) VALUES ('award:x', 'award-points', 't', now() + interval '7 days') ON CONFLICT DO NOTHING RETURNING 1",
      allowed: ["jobfence_consumer"],
    },
    {
      what: "read fences",
      sql: "SELECT * FROM core.processed_jobs WHERE job_id = 'award:live' AND consumer = 'award-points'",
      allowed: ["jobfence_consumer", "jobfence_ops"],
    },
    {
      what: "find expired fences",
      sql: "SELECT job_id, consumer FROM core.processed_jobs WHERE expires_at < now() LIMIT 100",
      allowed: ["jobfence_consumer", "jobfence_ops"],
    },
    {
      what: "delete fences directly, even expired ones",
      sql: "DELETE FROM core.processed_jobs WHERE expires_at < now()",
      allowed: [],
    },
    {
      what: "delete expired fences through the cleanup function",
      sql: "SELECT core.delete_expired_fences(100) AS deleted",
      allowed: ["jobfence_cleanup"],
    },
    {
      what: "count the expired-fence backlog",
      sql: "SELECT core.expired_fence_backlog(1000) AS backlog",
      allowed: ["jobfence_cleanup"],
    },
    {
      what: "update a fence",
      sql: "UPDATE core.processed_jobs SET expires_at = now() + interval '1 year' WHERE job_id = 'award:live'",
      allowed: [],
    },
    { what: "truncate fences", sql: "TRUNCATE core.processed_jobs", allowed: [] },
    { what: "insert a dead letter", sql: DEAD_LETTER_INSERT, allowed: ["jobfence_consumer"] },
    {
      what: "insert a dead letter idempotently and read back its id",
      sql: `${DEAD_LETTER_INSERT} ON CONFLICT (consumer, job_id, body_fingerprint) WHERE status = 'pending_review' DO NOTHING RETURNING id`,
      allowed: ["jobfence_consumer"],
    },
    {
      what: "find the pending dead letter of a job",
      sql: "SELECT id FROM core.dead_letters WHERE consumer = 'award-points' AND job_id = 'award:fixture' AND status = 'pending_review'",
      allowed: ["jobfence_consumer", "jobfence_ops"],
    },
    {
      what: "find the pending dead letter of a body",
      sql: "SELECT id, error_kind FROM core.dead_letters WHERE consumer = 'award-points' AND job_id = 'award:fixture' AND body_fingerprint = sha256('x') AND status = 'pending_review'",
      allowed: ["jobfence_consumer", "jobfence_ops"],
    },
    {
      what: "read dead letter payloads and errors",
      sql: "SELECT payload, last_error, discard_reason FROM core.dead_letters",
      allowed: ["jobfence_ops"],
    },
    {
      what: "read dead letter bodies",
      sql: "SELECT body, body_utf16 FROM core.dead_letters",
      allowed: ["jobfence_ops"],
    },
    {
      what: "check the fence transaction at COMMIT",
      sql: "SELECT core.assert_fence_transaction(pg_current_xact_id())",
      allowed: ["jobfence_consumer"],
    },
    {
      what: "resolve a dead letter",
      sql: "UPDATE core.dead_letters SET status = 'discarded', discard_reason = 'test', resolved_at = now(), resolved_by = 'ops' WHERE id = $1",
      params: (id) => [id],
      allowed: ["jobfence_ops"],
    },
    {
      what: "rewrite a dead letter's payload",
      sql: `UPDATE core.dead_letters SET payload = '{}' WHERE id = $1`,
      params: (id) => [id],
      allowed: [],
    },
    {
      what: "delete a dead letter",
      sql: "DELETE FROM core.dead_letters WHERE id = $1",
      params: (id) => [id],
      allowed: [],
    },
    { what: "read the migration history", sql: "SELECT * FROM core.schema_migrations", allowed: [] },
    {
      what: "read dead-letter counts",
      sql: "SELECT consumer, status, error_kind, count FROM core.dead_letter_counts",
      allowed: ["jobfence_ops"],
    },
    {
      what: "change dead-letter counts",
      sql: "UPDATE core.dead_letter_counts SET count = 0",
      allowed: [],
    },
    {
      what: "insert dead-letter counts",
      sql: "INSERT INTO core.dead_letter_counts VALUES ('x', 'pending_review', 'poison', 1)",
      allowed: [],
    },
    {
      what: "read failure groups",
      sql: "SELECT consumer, fingerprint, pending FROM core.dead_letter_groups",
      allowed: ["jobfence_ops"],
    },
    { what: "change failure groups", sql: "UPDATE core.dead_letter_groups SET pending = 0", allowed: [] },
    {
      what: "read bulk operations and their skips",
      sql: "SELECT o.id, s.detail FROM core.bulk_operations o LEFT JOIN core.bulk_operation_skips s ON s.operation_id = o.id",
      allowed: ["jobfence_ops"],
    },
    {
      what: "start a bulk operation",
      sql: `INSERT INTO core.bulk_operations (kind, filter, reason, rate_per_second, planned, submitted_by)
            VALUES ('discard', '{}', 'role test', 10, 1, 'role-test')`,
      allowed: ["jobfence_ops"],
    },
    {
      what: "backdate a bulk operation's audit",
      sql: "UPDATE core.bulk_operations SET submitted_by = 'someone else', submitted_at = now() - interval '1 day'",
      allowed: [],
    },
    { what: "delete a bulk operation", sql: "DELETE FROM core.bulk_operations", allowed: [] },
    { what: "create a table in core", sql: "CREATE TABLE core.sneaky (id int)", allowed: [] },
    { what: "create a table in public", sql: "CREATE TABLE public.sneaky (id int)", allowed: [] },
    { what: "create a schema", sql: "CREATE SCHEMA sneaky", allowed: [] },
    {
      what: "alter the dead-letter table",
      sql: "ALTER TABLE core.dead_letters DISABLE TRIGGER USER",
      allowed: [],
    },
    { what: "drop the fence table", sql: "DROP TABLE core.processed_jobs", allowed: [] },
    { what: "create an index", sql: "CREATE INDEX sneaky ON core.processed_jobs (tenant_id)", allowed: [] },
    {
      what: "replace a guard function",
      sql: "CREATE OR REPLACE FUNCTION core.dead_letters_refuse_delete() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN OLD; END'",
      allowed: [],
    },
  ];

describe.each(ROLES)("role %s", (role) => {
  for (const op of OPERATIONS) {
    const allowed = op.allowed.includes(role);
    it(`${allowed ? "may" : "may not"} ${op.what}`, async () => {
      const run = asRole(role, op.sql, op.params?.(pendingId) ?? []);
      if (allowed) await expect(run).resolves.toBeDefined();
      else await expectRefused(run, SQLSTATE.insufficientPrivilege);
    });
  }
});

describe("the cleanup role's function deletes only what has expired", () => {
  it("deletes the expired fence and keeps the live one", async () => {
    await client.query("BEGIN");
    try {
      await client.query("SET LOCAL ROLE jobfence_cleanup");
      const { rows: result } = await client.query("SELECT core.delete_expired_fences(100) AS deleted");
      expect(result[0].deleted).toBe(1);
      await client.query("RESET ROLE");
      const { rows } = await client.query("SELECT job_id FROM core.processed_jobs ORDER BY job_id");
      expect(rows.map((r) => r.job_id)).toEqual(["award:live"]);
    } finally {
      await client.query("ROLLBACK");
    }
  });

  it("refuses a batch size outside 1–100000", async () => {
    await expectRefused(asRole("jobfence_cleanup", "SELECT core.delete_expired_fences(0)"), "22023");
    await expectRefused(asRole("jobfence_cleanup", "SELECT core.delete_expired_fences(100001)"), "22023");
  });
});

describe("ownership and attributes", () => {
  it("every object in core is owned by the migrator, none by a jobfence role", async () => {
    const { rows } = await client.query<{ owner: string; n: number }>(`
      SELECT pg_get_userbyid(owner) AS owner, count(*)::int AS n FROM (
        SELECT relowner AS owner FROM pg_class WHERE relnamespace = 'core'::regnamespace
        UNION ALL SELECT proowner FROM pg_proc WHERE pronamespace = 'core'::regnamespace
        UNION ALL SELECT nspowner FROM pg_namespace WHERE nspname = 'core'
      ) o GROUP BY 1`);
    const { rows: me } = await client.query<{ u: string }>("SELECT current_user AS u");
    expect(rows.map((r) => r.owner)).toEqual([me[0]?.u]);
    expect(rows[0]?.n).toBeGreaterThan(10);
  });

  it("the roles cannot log in, create databases or roles, or bypass anything", async () => {
    const { rows } = await client.query(
      `SELECT rolname, rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls,
              has_database_privilege(rolname, current_database(), 'CREATE') AS can_create_schema
         FROM pg_roles WHERE rolname = ANY($1) ORDER BY rolname`,
      [ROLES],
    );
    expect(rows).toHaveLength(ROLES.length);
    for (const row of rows) {
      expect(row).toMatchObject({
        rolcanlogin: false,
        rolsuper: false,
        rolcreatedb: false,
        rolcreaterole: false,
        rolreplication: false,
        rolbypassrls: false,
        can_create_schema: false,
      });
    }
  });
});
