/**
 * The work's transaction guard (shared/fence/work-transaction.ts, migration 0023) on a real server,
 * as the consumer role, through the fence transaction the harness runs: whatever the work sends,
 * nothing of it commits half-way (a COMMIT in any spelling or place fails at the server, and the
 * fence rolls back with the work), and nothing of the session it changed reaches the next job that
 * borrows the connection (the pool has one, so every job here takes the same one).
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPool } from "../../shared/db/pool.ts";
import { ensureConsumerRole } from "../../shared/db/queries/provision-login.ts";
import { jobFingerprint } from "../../shared/envelope/fingerprint.ts";
import { TransactionControlError, WorkLeftStatementsError } from "../../shared/errors/transaction.ts";
import { FenceTransaction } from "../../shared/fence/fence-transaction.ts";
import { TRANSACTION_ENDED, type WorkQueries } from "../../shared/fence/work-transaction.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

const CONSUMER = "guard-tx";
let db: TestDatabase;
let pool: pg.Pool;
let role: string;

beforeAll(async () => {
  db = await createTestDatabase();
  role = await db.withClient((c) => ensureConsumerRole(c, CONSUMER));
  await db.withClient((c) =>
    c.query(`
      CREATE SCHEMA guard_test;
      -- A column named temp: the old statement scanner refused any statement that named it.
      CREATE TABLE guard_test.effects (job_id text NOT NULL, temp int);
      CREATE TABLE guard_test.deferred (id int CONSTRAINT deferred_unique UNIQUE DEFERRABLE INITIALLY DEFERRED);
      CREATE PROCEDURE guard_test.commits() LANGUAGE plpgsql AS $$ BEGIN COMMIT; END $$;
      CREATE PROCEDURE guard_test.rolls_back() LANGUAGE plpgsql AS $$ BEGIN ROLLBACK; END $$;
      CREATE FUNCTION guard_test.commits_inside() RETURNS void LANGUAGE plpgsql AS $$ BEGIN COMMIT; END $$;
      GRANT USAGE, CREATE ON SCHEMA guard_test TO ${role};
      GRANT SELECT, INSERT ON guard_test.effects, guard_test.deferred TO ${role};
      GRANT EXECUTE ON PROCEDURE guard_test.commits(), guard_test.rolls_back() TO ${role};
      GRANT EXECUTE ON FUNCTION guard_test.commits_inside() TO ${role};
    `),
  );
  // One connection: the next job always borrows the connection the last one used.
  pool = createPool({ connectionString: db.url, role, max: 1 });
  baseline = await sessionState();
});
afterAll(async () => {
  await pool?.end();
  await db?.drop();
});

const open = (jobId: string) =>
  FenceTransaction.open(pool, {
    consumer: CONSUMER,
    ttlSeconds: 3600,
    jobs: [{ jobId, tenantId: "t", fingerprint: jobFingerprint("t", { jobId }) }],
  });

/** Runs `work` as the harness's record path does: work, then COMMIT; on a throw, ROLLBACK. */
async function runJob(jobId: string, work: (tx: WorkQueries) => Promise<void>): Promise<unknown> {
  const { transaction, fresh } = await open(jobId);
  expect(fresh).toEqual(new Set([jobId]));
  try {
    await work(transaction.tx);
    const left = transaction.leftStatements;
    if (left > 0) throw new WorkLeftStatementsError(left);
    await transaction.commit();
    return undefined;
  } catch (error) {
    return (await transaction.abandon()) ?? error;
  }
}

const effect = (jobId: string, temp = 1): pg.QueryConfig => ({
  text: "INSERT INTO guard_test.effects (job_id, temp) VALUES ($1, $2)",
  values: [jobId, temp],
});

/** What committed of the job: its fence and its effects, read as the migrator. */
const committed = (jobId: string) =>
  db.withClient(async (c) => {
    const { rows } = await c.query<{ fences: number; effects: number }>(
      `SELECT (SELECT count(*)::int FROM core.processed_jobs WHERE job_id = $1) AS fences,
              (SELECT count(*)::int FROM guard_test.effects WHERE job_id = $1) AS effects`,
      [jobId],
    );
    return rows[0];
  });
const NOTHING = { fences: 0, effects: 0 };
const APPLIED = { fences: 1, effects: 1 };

/** What a job that borrows the connection finds of the session, through its own `tx`. */
async function sessionState(): Promise<Record<string, unknown>> {
  const { transaction } = await open(`probe-${Math.random()}`);
  try {
    const { rows } = await transaction.tx.query(`
      SELECT pg_backend_pid() AS pid, current_user AS "user", current_setting('search_path') AS search_path,
             current_setting('statement_timeout') AS statement_timeout, current_setting('lock_timeout') AS lock_timeout,
             current_setting('TimeZone') AS time_zone, current_setting('standard_conforming_strings') AS scs,
             current_setting('transaction_read_only') AS read_only,
             current_setting('transaction_isolation') AS isolation,
             coalesce(current_setting('guard_test.custom', true), '') AS custom,
             (SELECT count(*)::int FROM pg_listening_channels()) AS listening,
             (SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS advisory_locks,
             (SELECT count(*)::int FROM pg_cursors) AS cursors,
             (SELECT count(*)::int FROM pg_prepared_statements) AS prepared,
             (SELECT count(*)::int FROM pg_class WHERE relnamespace = pg_my_temp_schema()) AS temp_objects`);
    return rows[0] as Record<string, unknown>;
  } finally {
    await transaction.abandon();
  }
}
let baseline: Record<string, unknown>;

/** The next job on the connection finds the session as the first job found it. */
async function expectCleanSession(): Promise<void> {
  expect(await sessionState()).toEqual(baseline);
}

describe("a COMMIT or ROLLBACK of the work fails or ends the transaction, and nothing of it commits", () => {
  it.each([
    ["COMMIT"],
    ["commit work"],
    ["END"],
    ["ROLLBACK"],
    ["abort"],
    ["BEGIN"],
    ["COMMIT;"],
    ["  rollback transaction ; "],
  ])("%j, the plain text, is refused before it is sent; the transaction stays the fence's", async (sql) => {
    const jobId = `plain-${sql}`;
    let refusal: unknown;
    let status: string | null = null;
    const error = await runJob(jobId, async (tx) => {
      await tx.query(effect(jobId));
      refusal = await tx.query(sql).catch((e: unknown) => e);
      status = (await tx.query("SELECT 1")).rowCount === 1 ? "open" : null;
    });
    expect(refusal).toBeInstanceOf(TransactionControlError);
    expect(status).toBe("open");
    // The work caught the refusal and went on: the transaction was never ended, its work commits.
    expect(error).toBeUndefined();
    expect(await committed(jobId)).toEqual(APPLIED);
    await expectCleanSession();
  });

  it.each([
    ["COMMIT AND CHAIN"],
    ["/* a comment */ COMMIT"],
    ["END TRANSACTION AND NO CHAIN"],
    ["PREPARE TRANSACTION 'guard-test'"],
    ["SET CONSTRAINTS ALL IMMEDIATE"],
  ])(
    "%j fails at the server: a TransactionControlError, the fence rolled back with the work",
    async (sql) => {
      const jobId = `server-commit-${sql}`;
      const error = await runJob(jobId, async (tx) => {
        await tx.query(effect(jobId));
        await tx.query(sql);
        await tx.query(effect(`${jobId}-after`));
      });
      expect(error).toBeInstanceOf(TransactionControlError);
      expect(await committed(jobId)).toEqual(NOTHING);
      expect(await committed(`${jobId}-after`)).toEqual(NOTHING);
      await expectCleanSession();
    },
  );

  it.each([["ROLLBACK AND NO CHAIN"], ["-- a comment\nROLLBACK"], ["ABORT AND NO CHAIN"]])(
    "%j ends the transaction: the work's later statements are refused, nothing commits",
    async (sql) => {
      const jobId = `server-rollback-${sql}`;
      let later: unknown;
      const error = await runJob(jobId, async (tx) => {
        await tx.query(effect(jobId));
        await tx.query(sql).catch(() => undefined);
        // In autocommit this would commit on its own; it is never sent.
        later = await tx.query(effect(`${jobId}-after`)).catch((e: unknown) => e);
      });
      expect(later).toBeInstanceOf(TransactionControlError);
      // The work swallowed both: the harness's COMMIT finds the transaction ended.
      expect(error).toBeInstanceOf(TransactionControlError);
      expect(await committed(jobId)).toEqual(NOTHING);
      expect(await committed(`${jobId}-after`)).toEqual(NOTHING);
      await expectCleanSession();
    },
  );

  it("statements queued behind a ROLLBACK, not awaited, are refused as pg sends them", async () => {
    const jobId = "queued-behind-rollback";
    const error = await runJob(jobId, async (tx) => {
      const sent = [
        tx.query(effect(jobId)),
        tx.query("ROLLBACK AND NO CHAIN"),
        tx.query(effect(`${jobId}-a`)),
        tx.query("BEGIN ISOLATION LEVEL READ COMMITTED"),
        tx.query(effect(`${jobId}-b`)),
      ];
      const settled = await Promise.allSettled(sent);
      expect(settled.map((s) => s.status)).toEqual([
        "fulfilled",
        "rejected",
        "rejected",
        "rejected",
        "rejected",
      ]);
      for (const s of settled.slice(1))
        expect((s as PromiseRejectedResult).reason).toBeInstanceOf(TransactionControlError);
    });
    expect(error).toBeInstanceOf(TransactionControlError);
    for (const id of [jobId, `${jobId}-a`, `${jobId}-b`]) expect(await committed(id)).toEqual(NOTHING);
    await expectCleanSession();
  });

  it("a text of several statements is refused by the server (extended protocol): nothing of it runs", async () => {
    const jobId = "several-statements";
    const error = await runJob(jobId, async (tx) => {
      await tx.query(`INSERT INTO guard_test.effects (job_id) VALUES ('${jobId}'); COMMIT`);
    });
    expect(error).toBeInstanceOf(pg.DatabaseError);
    expect((error as pg.DatabaseError).code).toBe("42601");
    expect(await committed(jobId)).toEqual(NOTHING);
    await expectCleanSession();
  });

  it.each([
    ["a DO block", "DO $$ BEGIN COMMIT; END $$"],
    ["a DO block that rolls back", "DO $$ BEGIN ROLLBACK; END $$"],
    ["a procedure", "CALL guard_test.commits()"],
    ["a procedure that rolls back", "CALL guard_test.rolls_back()"],
    ["a function the work calls", "SELECT guard_test.commits_inside()"],
  ])(
    "a COMMIT inside %s is refused by PostgreSQL inside the transaction block: nothing commits",
    async (_, sql) => {
      const jobId = `inside-${sql}`;
      const error = await runJob(jobId, async (tx) => {
        await tx.query(effect(jobId));
        await tx.query(sql);
      });
      // 2D000 invalid_transaction_termination: an error of the work's like any other (transient).
      expect((error as pg.DatabaseError).code).toBe("2D000");
      expect(await committed(jobId)).toEqual(NOTHING);
      await expectCleanSession();
    },
  );

  it("a work that swallows the server's refusal of its COMMIT and returns is not committed", async () => {
    const jobId = "swallowed-commit";
    let caught: unknown;
    const error = await runJob(jobId, async (tx) => {
      await tx.query(effect(jobId));
      caught = await tx.query("COMMIT AND NO CHAIN").catch((e: unknown) => e);
    });
    expect(caught).toBeInstanceOf(TransactionControlError);
    expect((caught as Error).cause).toMatchObject({ code: "JF002" });
    expect(error).toBe(caught);
    expect(await committed(jobId)).toEqual(NOTHING);
    await expectCleanSession();
  });
});

describe("what the work changes of its session is gone for the next job on the connection", () => {
  it.each([
    ["a session SET", "SET statement_timeout = 1234"],
    ["SET TIME ZONE", "SET TIME ZONE 'Asia/Tokyo'"],
    ["a session set_config", "SELECT set_config('guard_test.custom', 'leaked', false)"],
    [
      "UPDATE pg_settings",
      "UPDATE pg_settings SET setting = 'off' WHERE name = 'standard_conforming_strings'",
    ],
    [
      "SET SESSION CHARACTERISTICS",
      "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    ],
    ["default_transaction_read_only", "SET default_transaction_read_only = on"],
    ["RESET ALL", "RESET ALL"],
    ["LISTEN", "LISTEN guard_channel"],
    ["a session advisory lock", "SELECT pg_advisory_lock(4242)"],
    ["a shared session advisory lock", "SELECT pg_try_advisory_lock_shared(4243)"],
    ["a temporary table", "CREATE TEMP TABLE scratch (id int)"],
    ["a temporary view", "CREATE VIEW pg_temp.scratch_view AS SELECT 1 AS one"],
    ["SELECT INTO TEMP", "SELECT 1 AS one INTO TEMP scratch_copy"],
    ["a cursor WITH HOLD", "DECLARE kept CURSOR WITH HOLD FOR SELECT 1"],
    ["a prepared statement", "PREPARE kept AS SELECT 1"],
  ])("%s: the job applies, the next job finds the session as it was", async (_, sql) => {
    const jobId = `session-${sql}`;
    const error = await runJob(jobId, async (tx) => {
      await tx.query(sql);
      await tx.query(effect(jobId));
    });
    expect(error).toBeUndefined();
    expect(await committed(jobId)).toEqual(APPLIED);
    await expectCleanSession();
  });

  it("a temporary table that shadows the real one does not swallow the next job's effect", async () => {
    const jobId = "shadow";
    const error = await runJob(jobId, async (tx) => {
      await tx.query("CREATE TEMP TABLE effects (job_id text, temp int)");
      // A work that names the table unqualified, with pg_temp first, writes into the shadow.
      await tx.query(effect(jobId));
    });
    expect(error).toBeUndefined();
    const next = "after-shadow";
    expect(
      await runJob(next, async (tx) => {
        await tx.query("INSERT INTO effects (job_id) VALUES ($1)", [next]).catch(() => undefined);
      }),
    ).toBeDefined(); // the next job's unqualified name finds no temporary table: 42P01, rolled back
    expect(await committed(next)).toEqual(NOTHING);
    await expectCleanSession();
  });

  it("a COMMIT check that fails runs no resets: they run after the ROLLBACK", async () => {
    const jobId = "resets-after-failed-commit";
    const error = await runJob(jobId, async (tx) => {
      // What a ROLLBACK does not undo: a session advisory lock, a prepared statement.
      await tx.query("SELECT pg_advisory_lock(4321)");
      await tx.query("PREPARE failed_commit AS SELECT 1");
      await tx.query(effect(jobId));
      // A scope the harness's COMMIT check refuses: it raises before its resets, and the COMMIT is skipped.
      await tx.query("SET LOCAL search_path = pg_catalog, guard_test");
    });
    expect(error).toBeInstanceOf(TransactionControlError);
    expect(await committed(jobId)).toEqual(NOTHING);
    await expectCleanSession();
  });

  it("a COMMIT that fails after the check leaves nothing of the session either", async () => {
    const jobId = "resets-rolled-back";
    const error = await runJob(jobId, async (tx) => {
      // What a ROLLBACK does not undo; the check's unlock and DEALLOCATE are not undone by it either.
      await tx.query("SELECT pg_advisory_lock(4322)");
      await tx.query("PREPARE rolled_back AS SELECT 1");
      await tx.query(effect(jobId));
      // The work's own deferred constraint, violated: checked at COMMIT, after the harness's check.
      await tx.query("INSERT INTO guard_test.deferred VALUES (1), (1)");
    });
    expect(error).toMatchObject({ code: "23505" });
    expect(await committed(jobId)).toEqual(NOTHING);
    await expectCleanSession();
  });

  it("named queries are prepared again for the next job (DEALLOCATE ALL clears pg's record of them too)", async () => {
    for (const [jobId, text] of [
      ["named-1", "SELECT 1 AS n"],
      ["named-2", "SELECT 2 AS n"],
    ] as const) {
      const error = await runJob(jobId, async (tx) => {
        const { rows } = await tx.query({ name: "guard_named", text });
        expect(rows).toHaveLength(1);
        await tx.query(effect(jobId));
      });
      expect(error).toBeUndefined();
    }
    await expectCleanSession();
  });
});

describe("role and search_path, which batch-mates share, are checked at COMMIT", () => {
  it.each([
    ["SET LOCAL search_path", "SET LOCAL search_path = guard_test, public"],
    ["a session SET search_path", "SET search_path = guard_test"],
    ["a local set_config of search_path", "SELECT set_config('search_path', 'pg_temp, public', true)"],
    ["SET LOCAL ROLE", "SET LOCAL ROLE postgres"],
    ["a session SET ROLE", "SET ROLE postgres"],
  ])("%s left changed: TransactionControlError at COMMIT, nothing committed", async (_, sql) => {
    const jobId = `scope-${sql}`;
    const error = await runJob(jobId, async (tx) => {
      await tx.query(effect(jobId));
      await tx.query(sql);
    });
    expect(error).toBeInstanceOf(TransactionControlError);
    expect((error as Error).cause).toMatchObject({ code: "JF003" });
    expect(await committed(jobId)).toEqual(NOTHING);
    await expectCleanSession();
  });

  it("a search_path changed and restored before the work returns commits", async () => {
    const jobId = "scope-restored";
    const error = await runJob(jobId, async (tx) => {
      const { rows } = await tx.query<{ path: string }>("SELECT current_setting('search_path') AS path");
      await tx.query("SET LOCAL search_path = guard_test");
      await tx.query("INSERT INTO effects (job_id) VALUES ($1)", [jobId]);
      await tx.query("SELECT set_config('search_path', $1, true)", [rows[0]?.path]);
    });
    expect(error).toBeUndefined();
    expect(await committed(jobId)).toEqual(APPLIED);
  });
});

describe("what the work may do", () => {
  it("savepoints: a failed statement rolled back to one, and the rest committed", async () => {
    const jobId = "savepoint";
    const error = await runJob(jobId, async (tx) => {
      await tx.query(effect(jobId, 1));
      await tx.query("SAVEPOINT before_risk");
      await tx.query(effect(jobId, 2));
      await expect(tx.query("SELECT 1 / 0")).rejects.toMatchObject({ code: "22012" });
      // 25P02 in_failed_sql_transaction: aborted until the rollback to the savepoint.
      await expect(tx.query("SELECT 1")).rejects.toMatchObject({ code: "25P02" });
      await tx.query("ROLLBACK TO SAVEPOINT before_risk");
      await tx.query(effect(jobId, 3));
      await tx.query("RELEASE SAVEPOINT before_risk");
    });
    expect(error).toBeUndefined();
    const { rows } = await pool.query<{ temp: number }>(
      "SELECT temp FROM guard_test.effects WHERE job_id = $1 ORDER BY temp",
      [jobId],
    );
    expect(rows.map((r) => r.temp)).toEqual([1, 3]);
  });

  it("a column named temp, SET LOCAL and a local set_config: allowed, and gone after the COMMIT", async () => {
    const jobId = "allowed";
    const error = await runJob(jobId, async (tx) => {
      await tx.query("SET LOCAL statement_timeout = '4321ms'");
      await tx.query("SELECT set_config('guard_test.custom', 'inside', true)");
      const inside = await tx.query(
        "SELECT current_setting('statement_timeout') AS st, current_setting('guard_test.custom') AS custom",
      );
      expect(inside.rows).toEqual([{ st: "4321ms", custom: "inside" }]);
      await tx.query("INSERT INTO guard_test.effects (job_id, temp) SELECT $1, 7", [jobId]);
      await tx.query("CREATE TABLE guard_test.made_by_work (id int, temp int)");
      await tx.query("CREATE INDEX ON guard_test.made_by_work (temp)");
      expect((await tx.query("SELECT temp FROM guard_test.effects WHERE job_id = $1", [jobId])).rows).toEqual(
        [{ temp: 7 }],
      );
      await tx.query("SELECT pg_advisory_xact_lock(99)");
      await tx.query("NOTIFY guard_channel, 'hello'");
    });
    expect(error).toBeUndefined();
    expect(await committed(jobId)).toEqual(APPLIED);
    await expectCleanSession();
  });

  it("a statement the work did not await is never sent once the harness has taken the connection back", async () => {
    const jobId = "left-behind";
    const error = await runJob(jobId, async (tx) => {
      void tx.query("SELECT pg_sleep(0.1)").catch(() => undefined);
      void tx.query(effect(`${jobId}-late`)).catch(() => undefined);
    });
    expect(error).toBeInstanceOf(WorkLeftStatementsError);
    expect(await committed(`${jobId}-late`)).toEqual(NOTHING);
    await expectCleanSession();
  });

  it("refuses every call once the transaction has ended, while the harness's client goes on", async () => {
    let kept: WorkQueries | undefined;
    const error = await runJob("kept", async (tx) => {
      kept = tx;
    });
    expect(error).toBeUndefined();
    const late = kept?.query("SELECT 1");
    await expect(late).rejects.toBeInstanceOf(TransactionControlError);
    await expect(late).rejects.toThrow(TRANSACTION_ENDED);
    await expectCleanSession();
  });
});
