/**
 * Database roles (docs/design.md §9): each role may do what its function needs and nothing else; no role but the migrator
 * owns objects or runs DDL. Every statement runs as the role (SET ROLE) in a transaction that is
 * rolled back, so the matrix leaves the database as it found it.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { consumerRoleName, ensureConsumerRole } from "../../shared/db/queries/provision-login.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { expectRefused, SQLSTATE } from "../support/expect-pg.ts";
import { insertDeadLetter, insertFence } from "../support/fixtures.ts";

/** award-points' own group role (every test database has it: the migrations ensure it). */
const AWARD = consumerRoleName("award-points");
const ROLES = [AWARD, "jobfence_ops", "jobfence_cleanup"] as const;
type Role = (typeof ROLES)[number] | string;

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
    `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, processed_at, expires_at)
     VALUES ('award:expired', core.consumer_id('award-points'), 't_42', now() - interval '8 days', now() - interval '1 day')`,
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
      sql: "INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at) VALUES ('award:x', (SELECT id FROM core.consumer_roles WHERE consumer = 'award-points'), 't', now() + interval '7 days') ON CONFLICT DO NOTHING RETURNING 1",
      allowed: [AWARD],
    },
    {
      what: "read fences",
      sql: "SELECT * FROM core.processed_jobs WHERE job_id = 'award:live' AND consumer_id = (SELECT id FROM core.consumer_roles WHERE consumer = 'award-points')",
      allowed: [AWARD, "jobfence_ops"],
    },
    {
      what: "find expired fences",
      sql: "SELECT job_id, consumer_id FROM core.processed_jobs WHERE expires_at < now() LIMIT 100",
      allowed: [AWARD, "jobfence_ops"],
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
    { what: "insert a dead letter", sql: DEAD_LETTER_INSERT, allowed: [AWARD] },
    {
      what: "insert a dead letter idempotently and read back its id",
      sql: `${DEAD_LETTER_INSERT} ON CONFLICT (consumer, job_id, body_fingerprint) WHERE status = 'pending_review' DO NOTHING RETURNING id`,
      allowed: [AWARD],
    },
    {
      what: "find the pending dead letter of a job",
      sql: "SELECT id FROM core.dead_letters WHERE consumer = 'award-points' AND job_id = 'award:fixture' AND status = 'pending_review'",
      allowed: [AWARD, "jobfence_ops"],
    },
    {
      what: "find the pending dead letter of a body",
      sql: "SELECT id, error_kind FROM core.dead_letters WHERE consumer = 'award-points' AND job_id = 'award:fixture' AND body_fingerprint = sha256('x') AND status = 'pending_review'",
      allowed: [AWARD, "jobfence_ops"],
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
      // The view runs with its owner's rights, past row-level security: a consumer's role reading
      // it would see every consumer's dead letters.
      what: "read every dead letter through the ops view (migration 0018)",
      sql: "SELECT id, consumer, body FROM core.ops_dead_letters",
      allowed: ["jobfence_ops"],
    },
    {
      what: "check the fence transaction at COMMIT",
      sql: "SELECT core.assert_fence_transaction(pg_current_xact_id())",
      allowed: [AWARD],
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
    const allowed = (op.allowed as readonly string[]).includes(role);
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

/**
 * One group role per consumer: the database pins `consumer` to the role for fences, dead letters
 * and the attempt ledger (row-level security), keeps each consumer's tables its own, and leaves
 * the identity and resolution of a dead letter to the database. Both ways round: each consumer is
 * refused the other's rows.
 */
describe("a consumer's role writes only its own consumer's rows", () => {
  const PAYMENTS = "record-payment";
  let paymentsRole: string;

  beforeAll(async () => {
    paymentsRole = await ensureConsumerRole(client, PAYMENTS);
    await insertFence(client, "pay:live", { consumer: PAYMENTS });
    await insertDeadLetter(client, { job_id: "pay:fixture", consumer: PAYMENTS });
    await client.query(
      `INSERT INTO core.message_attempts (consumer, message_id, job_id, failures) VALUES
         ('award-points', 'm-award', 'award:fixture', 1), ($1, 'm-pay', 'pay:fixture', 1)`,
      [PAYMENTS],
    );
  });

  const fenceFor = (consumer: string) =>
    `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at)
     VALUES ('cross:1', core.consumer_id('${consumer}'), 't', now() + interval '7 days') ON CONFLICT DO NOTHING RETURNING 1`;
  const deadLetterFor = (consumer: string, extra = "", extraValue = "") =>
    `INSERT INTO core.dead_letters
       (job_id, consumer, queue, payload, attempts, error_kind, last_error, correlation_id, body_form, body${extra})
     VALUES ('cross:1', '${consumer}', 'q', NULL, 1, 'poison', '{"class":"PoisonMessageError","message":"bad"}', 'c', 'text', 'x'${extraValue})`;
  const attemptFor = (consumer: string) =>
    `INSERT INTO core.message_attempts (consumer, message_id, job_id, started) VALUES ('${consumer}', 'm-cross', 'cross:1', 1)`;

  const pairs = () => [
    {
      name: "record-payment acting on award-points",
      role: paymentsRole,
      own: PAYMENTS,
      other: "award-points",
    },
    { name: "award-points acting on record-payment", role: AWARD, own: "award-points", other: PAYMENTS },
  ];

  for (const index of [0, 1]) {
    describe(
      index === 0 ? "record-payment acting on award-points" : "award-points acting on record-payment",
      () => {
        const pair = () => pairs()[index] as ReturnType<typeof pairs>[number];

        it("may write its own fence, dead letter and attempt", async () => {
          const { role, own } = pair();
          await expect(asRole(role, fenceFor(own))).resolves.toMatchObject({ rowCount: 1 });
          await expect(asRole(role, deadLetterFor(own))).resolves.toMatchObject({ rowCount: 1 });
          await expect(asRole(role, attemptFor(own))).resolves.toMatchObject({ rowCount: 1 });
        });

        it("may not insert the other consumer's fence (its jobs would be skipped as duplicates)", async () => {
          const { role, other } = pair();
          await expectRefused(asRole(role, fenceFor(other)), SQLSTATE.insufficientPrivilege);
        });

        it("may not insert a dead letter for the other consumer (a bulk replay would send it to that queue)", async () => {
          const { role, other } = pair();
          await expectRefused(asRole(role, deadLetterFor(other)), SQLSTATE.insufficientPrivilege);
        });

        it("may not write the other consumer's attempt ledger", async () => {
          const { role, other } = pair();
          await expectRefused(asRole(role, attemptFor(other)), SQLSTATE.insufficientPrivilege);
          const updated = await asRole(
            role,
            `UPDATE core.message_attempts SET failures = 0 WHERE consumer = '${other}'`,
          );
          expect(updated.rowCount).toBe(0);
        });

        it("sees none of the other consumer's fences, dead letters or attempts", async () => {
          const { role, other } = pair();
          for (const [table, key] of [
            ["core.processed_jobs", "consumer_id = core.consumer_id($1)"],
            ["core.message_attempts", "consumer = $1"],
          ] as const) {
            const { rows } = await asRole(role, `SELECT count(*)::int AS n FROM ${table} WHERE ${key}`, [
              other,
            ]);
            expect(rows[0]?.n, table).toBe(0);
          }
          const { rows } = await asRole(
            role,
            "SELECT count(*)::int AS n FROM core.dead_letters WHERE consumer = $1",
            [other],
          );
          expect(rows[0]?.n).toBe(0);
          // The fixtures are there: the migrator sees them.
          const { rows: all } = await client.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM core.processed_jobs WHERE consumer_id = core.consumer_id($1)",
            [other],
          );
          expect(all[0]?.n).toBeGreaterThan(0);
        });

        it("may not set a dead letter's created_at, status or resolution, even on its own", async () => {
          const { role, own } = pair();
          for (const [column, value] of [
            ["created_at", "now() - interval '30 days'"],
            ["status", "'pending_review'"],
            ["resolved_at", "now()"],
            ["resolved_by", "'me'"],
            ["discard_reason", "'r'"],
            ["id", "gen_random_uuid()"],
          ] as const) {
            await expectRefused(
              asRole(role, deadLetterFor(own, `, ${column}`, `, ${value}`)),
              SQLSTATE.insufficientPrivilege,
            );
          }
        });
      },
    );
  }

  it("record-payment's role reaches none of award-points' tables", async () => {
    for (const sql of [
      "INSERT INTO award_points.balances (tenant_id, user_id, balance) VALUES ('t', 'u', 1000000)",
      "INSERT INTO award_points.ledger (job_id, tenant_id, user_id, points) VALUES ('j', 't', 'u', 5)",
      "UPDATE award_points.balances SET balance = 0",
    ]) {
      await expectRefused(asRole(paymentsRole, sql), SQLSTATE.insufficientPrivilege);
    }
    // award-points' own role still may.
    await expect(
      asRole(
        AWARD,
        "INSERT INTO award_points.ledger (job_id, tenant_id, user_id, points) VALUES ('j', 't', 'u', 5)",
      ),
    ).resolves.toMatchObject({ rowCount: 1 });
  });

  it("the shared base role acts for no consumer: it writes nothing", async () => {
    await expectRefused(
      asRole("jobfence_consumer", fenceFor("award-points")),
      SQLSTATE.insufficientPrivilege,
    );
    await expectRefused(
      asRole("jobfence_consumer", deadLetterFor("award-points")),
      SQLSTATE.insufficientPrivilege,
    );
    await expectRefused(
      asRole(
        "jobfence_consumer",
        "INSERT INTO award_points.ledger (job_id, tenant_id, user_id, points) VALUES ('j', 't', 'u', 5)",
      ),
      SQLSTATE.insufficientPrivilege,
    );
  });

  it("a role granted two consumers' roles is refused rather than guessed", async () => {
    await client.query("BEGIN");
    try {
      await client.query("CREATE ROLE jobfence_test_both NOLOGIN");
      await client.query(`GRANT ${AWARD}, ${paymentsRole} TO jobfence_test_both`);
      await client.query("SET LOCAL ROLE jobfence_test_both");
      await expectRefused(client.query(fenceFor("award-points")), SQLSTATE.insufficientPrivilege);
    } finally {
      await client.query("ROLLBACK");
    }
  });

  describe("the session's consumer (core.session_consumer_id, core.session_consumer)", () => {
    /** Runs `steps` in a transaction rolled back afterwards, as the superuser until a step sets a role. */
    async function rolledBack(steps: () => Promise<void>): Promise<void> {
      await client.query("BEGIN");
      try {
        await steps();
      } finally {
        await client.query("ROLLBACK");
      }
    }
    const lookups = async () =>
      (
        await client.query<{ session_consumer: string | null; session_consumer_id: number | null }>(
          "SELECT core.session_consumer(), core.session_consumer_id()",
        )
      ).rows[0];
    const idOf = async (consumer: string) =>
      (await client.query<{ id: number }>("SELECT core.consumer_id($1) AS id", [consumer])).rows[0]?.id;

    it("both refuse a role acting for two consumers, naming them, rather than guess", async () => {
      await rolledBack(async () => {
        await client.query("CREATE ROLE jobfence_test_both NOLOGIN");
        await client.query(`GRANT ${AWARD}, ${paymentsRole} TO jobfence_test_both`);
        await client.query("SET LOCAL ROLE jobfence_test_both");
        for (const fn of ["session_consumer", "session_consumer_id"]) {
          await client.query("SAVEPOINT lookup");
          const error = await client.query(`SELECT core.${fn}()`).then(
            () => undefined,
            (e: unknown) => e,
          );
          await client.query("ROLLBACK TO SAVEPOINT lookup");
          expect(error, fn).toMatchObject({
            code: SQLSTATE.insufficientPrivilege,
            message: expect.stringContaining(`several consumers ({award-points,${PAYMENTS}})`),
          });
        }
      });
    });

    it("a role granted the consumer's role through another role acts for that consumer", async () => {
      await rolledBack(async () => {
        await client.query(
          "CREATE ROLE jobfence_test_outer NOLOGIN; CREATE ROLE jobfence_test_middle NOLOGIN",
        );
        await client.query(`GRANT ${paymentsRole} TO jobfence_test_middle`);
        await client.query("GRANT jobfence_test_middle TO jobfence_test_outer");
        const id = await idOf(PAYMENTS);
        await client.query("SET LOCAL ROLE jobfence_test_outer");
        expect(await lookups()).toEqual({ session_consumer: PAYMENTS, session_consumer_id: id });
      });
    });

    it("a role the current role may SET but does not inherit acts for nobody", async () => {
      await rolledBack(async () => {
        await client.query("CREATE ROLE jobfence_test_noinherit NOLOGIN NOINHERIT");
        await client.query(`GRANT ${paymentsRole} TO jobfence_test_noinherit`);
        // What it needs to ask, granted directly (it inherits nothing, jobfence_consumer's included).
        await client.query(`GRANT USAGE ON SCHEMA core TO jobfence_test_noinherit;
          GRANT SELECT ON core.consumer_roles TO jobfence_test_noinherit;
          GRANT EXECUTE ON FUNCTION core.session_consumer(), core.session_consumer_id() TO jobfence_test_noinherit`);
        await client.query("SET LOCAL ROLE jobfence_test_noinherit");
        expect(await lookups()).toEqual({ session_consumer: null, session_consumer_id: null });
      });
    });

    it("a registered role that no longer exists counts for nobody, and stops no one", async () => {
      await rolledBack(async () => {
        await client.query(
          "INSERT INTO core.consumer_roles (consumer, role_name) VALUES ('ghost', 'jobfence_consumer_ghost_dropped')",
        );
        const id = await idOf("award-points");
        await client.query(`SET LOCAL ROLE ${AWARD}`);
        expect(await lookups()).toEqual({ session_consumer: "award-points", session_consumer_id: id });
        expect((await client.query(fenceFor("award-points"))).rowCount).toBe(1);
      });
    });

    it("finds a registered role by its exact name, whatever characters it has", async () => {
      await rolledBack(async () => {
        // Not a name the library computes, but the registry may hold one (written by the migrator):
        // read as an identifier, "JF.Mixed Case" would be a qualified name and not this role at all.
        await client.query(`CREATE ROLE "JF.Mixed Case" NOLOGIN IN ROLE jobfence_consumer`);
        await client.query(
          `INSERT INTO core.consumer_roles (consumer, role_name) VALUES ('mixed-case', 'JF.Mixed Case')`,
        );
        await client.query(`CREATE ROLE jobfence_test_outer_exact NOLOGIN IN ROLE "JF.Mixed Case"`);
        const id = await idOf("mixed-case");
        await client.query("SET LOCAL ROLE jobfence_test_outer_exact");
        expect(await lookups()).toEqual({ session_consumer: "mixed-case", session_consumer_id: id });
      });
    });

    it("a statement looks its consumer up once, through one function", async () => {
      await rolledBack(async () => {
        await client.query("SET LOCAL track_functions = 'all'");
        await client.query(`SET LOCAL ROLE ${AWARD}`);
        const inserted = await client.query(
          `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at)
           SELECT 'lookup:' || i, (SELECT core.consumer_id('award-points')), 't', now() + interval '7 days'
             FROM generate_series(1, 25) AS i
           ON CONFLICT DO NOTHING RETURNING job_id`,
        );
        expect(inserted.rowCount).toBe(25);
        const { rows } = await client.query<{ funcname: string; calls: number }>(
          `SELECT funcname, calls::int FROM pg_stat_xact_user_functions
            WHERE schemaname = 'core' ORDER BY funcname`,
        );
        // One lookup for the statement (its check and its RETURNING's read share it), whatever
        // the number of rows, and no second function behind it called once per registry row.
        expect(rows).toEqual([
          { funcname: "consumer_id", calls: 1 },
          { funcname: "session_consumer_id", calls: 1 },
        ]);
      });
    });
  });

  it("the database and the library name a consumer's role alike, long names included", async () => {
    const names = ["award-points", "a", "record-payment", `x${"-y".repeat(22)}`, `long-${"n".repeat(57)}`];
    const { rows } = await client.query<{ name: string }>(
      "SELECT core.consumer_role_name(n) AS name FROM unnest($1::text[]) WITH ORDINALITY AS t(n, i) ORDER BY i",
      [names],
    );
    expect(rows.map((r) => r.name)).toEqual(names.map(consumerRoleName));
    for (const name of rows.map((r) => r.name)) expect(Buffer.byteLength(name)).toBeLessThanOrEqual(63);
    expect(new Set(rows.map((r) => r.name)).size).toBe(names.length);
  });
});

describe("the ops view of dead letters (migration 0018)", () => {
  it("shows a role with a blanket read grant nothing, as the table's row-level security does", async () => {
    await client.query("BEGIN");
    try {
      await client.query("CREATE ROLE jobfence_test_reader NOLOGIN IN ROLE pg_read_all_data");
      await client.query("GRANT USAGE ON SCHEMA core TO jobfence_test_reader");
      await client.query("SET LOCAL ROLE jobfence_test_reader");
      const table = await client.query("SELECT id FROM core.dead_letters");
      const view = await client.query("SELECT id FROM core.ops_dead_letters");
      expect(table.rowCount).toBe(0);
      expect(view.rowCount).toBe(0);
      await client.query("RESET ROLE");
      await client.query("SET LOCAL ROLE jobfence_ops");
      const forOps = await client.query("SELECT id FROM core.ops_dead_letters");
      expect(forOps.rowCount).toBeGreaterThan(0);
    } finally {
      await client.query("ROLLBACK");
    }
  });
});

describe("superseded needs the job's fence, whoever resolves", () => {
  it("the ops role cannot mark a dead letter superseded when its job has no fence", async () => {
    const id = await insertDeadLetter(client, { job_id: "award:no-fence" });
    await expectRefused(
      asRole(
        "jobfence_ops",
        "UPDATE core.dead_letters SET status = 'superseded', resolved_at = now(), resolved_by = 'ops' WHERE id = $1",
        [id],
      ),
      SQLSTATE.checkViolation,
      "dead_letters_superseded_needs_fence",
    );
    // Not even the migrator: the guard is the table's.
    await client.query("BEGIN");
    try {
      await expectRefused(
        client.query(
          "UPDATE core.dead_letters SET status = 'superseded', resolved_at = now() WHERE id = $1",
          [id],
        ),
        SQLSTATE.checkViolation,
        "dead_letters_superseded_needs_fence",
      );
    } finally {
      await client.query("ROLLBACK");
    }
  });

  it("it can when the fence exists", async () => {
    const id = await insertDeadLetter(client, { job_id: "award:live" });
    const result = await asRole(
      "jobfence_ops",
      "UPDATE core.dead_letters SET status = 'superseded', resolved_at = now(), resolved_by = 'ops' WHERE id = $1",
      [id],
    );
    expect(result.rowCount).toBe(1);
  });
});

describe("the dead-letter write's fence lock", () => {
  it("answers and locks only the fences of the login's own consumer", async () => {
    const login = `jft_hold_${Date.now().toString(36)}`;
    await client.query(`CREATE ROLE ${login} LOGIN PASSWORD 'pw-hold'`);
    try {
      await client.query(`GRANT ${AWARD} TO ${login}`);
      const url = new URL(db.url);
      url.username = login;
      url.password = "pw-hold";
      const asLogin = new pg.Client({ connectionString: url.toString() });
      await asLogin.connect();
      try {
        const own = await asLogin.query("SELECT * FROM core.hold_fence('award:live', 'award-points')");
        expect(own.rowCount).toBe(1);
        await ensureConsumerRole(client, "record-payment");
        await insertFence(client, "pay:held", { consumer: "record-payment" });
        const other = await asLogin.query("SELECT * FROM core.hold_fence('pay:held', 'record-payment')");
        expect(other.rowCount).toBe(0);
      } finally {
        await asLogin.end();
      }
    } finally {
      await client.query(`DROP ROLE ${login}`);
    }
  });
});

describe("a login cannot borrow another consumer's identity", () => {
  it("a temporary table named like a catalog shadows nothing the database decides with", async () => {
    const login = `jft_shadow_${Date.now().toString(36)}`;
    const payments = await ensureConsumerRole(client, "record-payment");
    await insertFence(client, "pay:shadowed", { consumer: "record-payment" });
    await client.query(`CREATE ROLE ${login} LOGIN PASSWORD 'pw-shadow'`);
    try {
      await client.query(`GRANT ${AWARD} TO ${login}`);
      const url = new URL(db.url);
      url.username = login;
      url.password = "pw-shadow";
      const asLogin = new pg.Client({ connectionString: url.toString() });
      await asLogin.connect();
      try {
        // The temporary tables come first in an unqualified lookup unless a function names pg_temp.
        await asLogin.query(
          `CREATE TEMP TABLE pg_roles AS SELECT $1::name AS rolname, $2::regrole::oid AS oid`,
          [payments, AWARD],
        );
        await asLogin.query(
          "CREATE TEMP TABLE consumer_roles AS SELECT 'record-payment'::text AS consumer, $1::name AS role_name",
          [AWARD],
        );
        const { rows } = await asLogin.query("SELECT core.session_consumer() AS consumer");
        expect(rows[0]?.consumer).toBe("award-points");
        await expectRefused(
          asLogin.query(
            "INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at) VALUES ('pay:forged', core.consumer_id('record-payment'), 't', now() + interval '1 day')",
          ),
          SQLSTATE.insufficientPrivilege,
        );
        const held = await asLogin.query("SELECT * FROM core.hold_fence('pay:shadowed', 'record-payment')");
        expect(held.rowCount).toBe(0);
      } finally {
        await asLogin.end();
      }
    } finally {
      await client.query(`DROP ROLE ${login}`);
    }
  });

  it("every core function that pins its search_path names pg_temp last", async () => {
    const { rows } = await client.query<{ fn: string; path: string }>(
      `SELECT p.oid::regprocedure::text AS fn, c AS path
         FROM pg_proc p, unnest(p.proconfig) AS c
        WHERE p.pronamespace = 'core'::regnamespace AND c LIKE 'search\\_path=%'`,
    );
    expect(rows.length).toBeGreaterThan(15);
    for (const row of rows) expect(row.path, row.fn).toMatch(/pg_temp$/);
    const definers = await client.query<{ fn: string }>(
      `SELECT oid::regprocedure::text AS fn FROM pg_proc
        WHERE pronamespace = 'core'::regnamespace AND prosecdef
          AND NOT EXISTS (SELECT 1 FROM unnest(proconfig) c WHERE c LIKE 'search\\_path=%')`,
    );
    expect(definers.rows).toEqual([]);
  });

  it("a short consumer name never takes a long one's role", async () => {
    const long = "a".repeat(50);
    const { rows } = await client.query<{ name: string }>("SELECT core.consumer_role_name($1) AS name", [
      long,
    ]);
    const suffix = rows[0]?.name.slice(-12) ?? "";
    // The name that spells the long one's role in the short form is longer than a short form allows.
    const impostor = `${"a".repeat(32)}-${suffix}`;
    expect(consumerRoleName(impostor)).not.toBe(rows[0]?.name);
    expect(consumerRoleName(long)).toBe(rows[0]?.name);
  });
});

describe("superseded needs this job's fence", () => {
  it("a fence of another job under the same id does not supersede, except a poison row's", async () => {
    await client.query("BEGIN");
    try {
      await client.query(
        `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, fingerprint, expires_at)
         VALUES ('award:other-job', core.consumer_id('award-points'), 't', '00000000-0000-0000-0000-000000000001', now() + interval '1 day')`,
      );
      const { rows } = await client.query<{ id: string; error_kind: string }>(
        `INSERT INTO core.dead_letters (job_id, consumer, queue, attempts, error_kind, last_error, correlation_id,
                                        body_form, body, job_fingerprint, fence_fingerprint)
         SELECT 'award:other-job', 'award-points', 'q', 1, kind, '{"class":"E","message":"m"}', 'c', 'text', kind,
                '\\x00000000000000000000000000000002'::bytea,
                CASE WHEN kind = 'conflict' THEN '\\x00000000000000000000000000000001'::bytea END
           FROM unnest(ARRAY['conflict', 'poison']) AS kind
         RETURNING id, error_kind`,
      );
      const conflict = rows.find((r) => r.error_kind === "conflict")?.id;
      const poison = rows.find((r) => r.error_kind === "poison")?.id;
      await client.query("SAVEPOINT s");
      await expectRefused(
        client.query(
          "UPDATE core.dead_letters SET status = 'superseded', resolved_at = now(), resolved_by = 'ops' WHERE id = $1",
          [conflict],
        ),
        SQLSTATE.checkViolation,
        "dead_letters_superseded_needs_fence",
      );
      await client.query("ROLLBACK TO SAVEPOINT s");
      const updated = await client.query(
        "UPDATE core.dead_letters SET status = 'superseded', resolved_at = now(), resolved_by = 'ops' WHERE id = $1",
        [poison],
      );
      expect(updated.rowCount).toBe(1);
    } finally {
      await client.query("ROLLBACK");
    }
  });
});
