/**
 * One consumer cannot reach or create another's rows (issue 30): logged in as a real login of
 * consumer A (award-points) made by core.provision_login, every privilege a consumer holds — each
 * table and column grant, row policy and function of the privilege inventory (docs/schema.md) — is
 * tried with consumer B's (notify-user's) values: B's name, job ids, queue URL, outbox keys. After
 * every attempt, B's rows (read as the migrator) are exactly what they were. Each test's title is
 * what the inventory's "cross-consumer test" column names.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { FENCE_SCOPE } from "../../shared/db/queries/begin-with-fences.ts";
import { claimStep, readJobSteps, recordStepResult } from "../../shared/db/queries/job-steps.ts";
import {
  consumerRoleName,
  provisionLogin,
  registerConsumerQueues,
} from "../../shared/db/queries/provision-login.ts";
import { ConsumerLogins } from "../support/consumer-logins.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { insertDeadLetter, insertFence } from "../support/fixtures.ts";

const A = "award-points";
const B = "notify-user";
const QUEUE_A = "https://sqs.eu-west-1.amazonaws.com/123456789012/award-points";
const QUEUE_B = "https://sqs.eu-west-1.amazonaws.com/123456789012/notify-user";
const FINGERPRINT = "\\x00112233445566778899aabbccddeeff";
const ERROR = JSON.stringify({ class: "Error", message: "send failed" });

let db: TestDatabase;
let admin: pg.Client;
/** A's login, and B's (for the other direction of the consumers' own tables). */
let loginA: pg.Client;
let loginB: pg.Client;
const logins: string[] = [];
let baseline: string;

let consumerLogins: ConsumerLogins;
const connectAs = (consumer: string) =>
  consumerLogins.connect(consumer, { applicationName: `cross-consumer ${consumer}` });

/** Everything of B's, read as the migrator (past row-level security). */
async function rowsOfB(): Promise<string> {
  const read = async (sql: string) => (await admin.query(sql, [B])).rows;
  return JSON.stringify({
    fences: await read(
      "SELECT p.* FROM core.processed_jobs p JOIN core.consumer_roles c ON c.id = p.consumer_id WHERE c.consumer = $1 ORDER BY job_id",
    ),
    deadLetters: await read("SELECT * FROM core.dead_letters WHERE consumer = $1 ORDER BY id"),
    attempts: await read("SELECT * FROM core.message_attempts WHERE consumer = $1 ORDER BY message_id"),
    outbox: await read("SELECT * FROM core.outbox WHERE consumer = $1 OR target = $1 ORDER BY job_id"),
    steps: await read(
      "SELECT s.* FROM core.job_steps s JOIN core.consumer_roles c ON c.id = s.consumer_id WHERE c.consumer = $1 ORDER BY job_id, step",
    ),
    registry: await read("SELECT * FROM core.consumer_roles WHERE consumer = $1"),
    notifications: (await admin.query("SELECT * FROM notify_user.notifications ORDER BY 1")).rows,
  });
}

/** Runs `sql` as `client`, committing whatever it may do; the refusal, if any, is returned. */
async function attempt(client: pg.Client, sql: string, params: unknown[] = []) {
  try {
    const result = await client.query(sql, params);
    return { rows: result.rows as Record<string, unknown>[], rowCount: result.rowCount, error: undefined };
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {});
    return { rows: [], rowCount: 0, error: error as { code?: string; message: string } };
  }
}

async function expectBUntouched(): Promise<void> {
  expect(JSON.parse(await rowsOfB())).toEqual(JSON.parse(baseline));
}

beforeAll(async () => {
  db = await createTestDatabase();
  admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  await registerConsumerQueues(admin, A, [QUEUE_A]);
  await registerConsumerQueues(admin, B, [QUEUE_B]);
  // B's rows: a fence, a pending dead letter, an attempt, a follow-up it sends to A.
  await insertFence(admin, "b:fence", { consumer: B });
  await insertDeadLetter(admin, { job_id: "b:dead", consumer: B, queue: QUEUE_B });
  await admin.query(
    "INSERT INTO core.message_attempts (consumer, message_id, job_id, failures) VALUES ($1, 'm-b', 'b:dead', 1)",
    [B],
  );
  await admin.query(
    `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint)
     VALUES ($1, 'b:parent', $2, 'b:follow-up', 't', 'c', '{"payload":{}}', '${FINGERPRINT}')`,
    [B, A],
  );
  // A step B recorded (migration 0027), of a job id A uses too, and one B claimed and has no answer for.
  await admin.query(
    `INSERT INTO core.job_steps (job_id, consumer_id, step, position, fingerprint, result, recorded_at, expires_at)
     VALUES ('shared:stepped', core.consumer_id($1), 'charge', 1, '00112233445566778899aabbccddeeff', '{"id":"ch_b"}', now(), now() + interval '1 day'),
            ('b:claimed', core.consumer_id($1), 'charge', 1, '00112233445566778899aabbccddeeff', NULL, NULL, now() + interval '1 day')`,
    [B],
  );
  // And a replayed dead letter of B's, of a job id and body A will write too (migration 0025).
  const replayedB = await insertDeadLetter(admin, { job_id: "shared:replayed", consumer: B, queue: QUEUE_B });
  await admin.query(
    "UPDATE core.dead_letters SET status = 'replayed', resolved_at = now(), resolved_by = 'ops' WHERE id = $1",
    [replayedB],
  );
  consumerLogins = new ConsumerLogins(admin, db.url, "jft_cc");
  loginA = await connectAs(A);
  loginB = await connectAs(B);
  baseline = await rowsOfB();
});

afterAll(async () => {
  await consumerLogins?.close();
  for (const login of logins) await admin?.query(`DROP ROLE IF EXISTS ${login}`);
  await admin?.end();
  await db?.drop();
});

beforeEach(async () => {
  // A test that found a hole committed something of B's: start every test from the baseline.
  if (baseline !== undefined && (await rowsOfB()) !== baseline)
    throw new Error("B's rows changed in an earlier test");
});

describe("the tables a consumer may write, tried with B's values", () => {
  it("A's login reads none of B's fences, dead letters, attempts or outbox rows", async () => {
    for (const sql of [
      "SELECT * FROM core.processed_jobs WHERE consumer_id = core.consumer_id($1)",
      "SELECT * FROM core.processed_jobs WHERE job_id = 'b:fence'",
      "SELECT id, consumer, job_id, status, created_at, body_fingerprint, error_kind FROM core.dead_letters WHERE consumer = $1 OR job_id = 'b:dead'",
      "SELECT * FROM core.message_attempts WHERE consumer = $1 OR job_id = 'b:dead'",
      "SELECT * FROM core.outbox WHERE consumer = $1 OR job_id = 'b:follow-up'",
    ]) {
      const params = sql.includes("$1") ? [B] : [];
      const { rows, error } = await attempt(loginA, sql, params);
      expect(error, sql).toBeUndefined();
      expect(rows, sql).toEqual([]);
    }
    // The body, payload and error of any dead letter are not a consumer's to read at all.
    const bodies = await attempt(loginA, "SELECT body, payload, last_error FROM core.dead_letters");
    expect(bodies.error?.code).toBe("42501");
    await expectBUntouched();
  });

  it("A's login cannot insert a fence, a dead letter, an attempt or an outbox row in B's name", async () => {
    for (const sql of [
      "INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at) VALUES ('b:forged', core.consumer_id($1), 't', now() + interval '1 day')",
      `INSERT INTO core.dead_letters (job_id, consumer, queue, attempts, error_kind, last_error, correlation_id, body_form, body)
       VALUES ('b:forged', $1, '${QUEUE_B}', 1, 'hard', '{"class":"E","message":"m"}', 'c', 'text', '{}')`,
      "INSERT INTO core.message_attempts (consumer, message_id, job_id, failures) VALUES ($1, 'm-forged', 'b:forged', 9)",
      `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint)
       VALUES ($1, 'p', '${A}', 'b:forged', 't', 'c', '{"payload":{}}', '${FINGERPRINT}')`,
      // Under the key of B's existing follow-up: refused, not merged.
      `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint)
       VALUES ($1, 'b:parent', '${A}', 'b:follow-up', 't', 'c', '{"payload":{"x":1}}', '${FINGERPRINT}') ON CONFLICT DO NOTHING`,
    ]) {
      const { error } = await attempt(loginA, sql, [B]);
      expect(error?.code, sql).toBe("42501");
    }
    await expectBUntouched();
  });

  it("A's login cannot update or delete B's rows, nor move its own rows to B", async () => {
    for (const sql of ["UPDATE core.message_attempts SET failures = 0 WHERE consumer = $1"]) {
      const { error, rowCount } = await attempt(loginA, sql, [B]);
      expect(error, sql).toBeUndefined();
      expect(rowCount, sql).toBe(0);
    }
    for (const sql of [
      "DELETE FROM core.processed_jobs WHERE consumer_id = core.consumer_id($1)",
      "UPDATE core.processed_jobs SET expires_at = now() WHERE consumer_id = core.consumer_id($1)",
      "UPDATE core.dead_letters SET status = 'discarded' WHERE consumer = $1",
      "DELETE FROM core.dead_letters WHERE consumer = $1",
      "DELETE FROM core.message_attempts WHERE consumer = $1",
      // A consumer changes and deletes no outbox row at all, its own included (0019): the relays do
      // it through their functions.
      "UPDATE core.outbox SET attempts = 999, next_attempt_at = now() + interval '1 year' WHERE consumer = $1 OR target = $1",
      "DELETE FROM core.outbox WHERE consumer = $1 OR target = $1",
      "UPDATE core.outbox SET consumer = $1",
      "UPDATE core.consumer_roles SET queues = '{}' WHERE consumer = $1",
    ]) {
      const { error } = await attempt(loginA, sql, [B]);
      expect(error?.code, sql).toBe("42501");
    }
    // A's own attempt row cannot be handed to B: the policy's check applies to the new row.
    await attempt(
      loginA,
      "INSERT INTO core.message_attempts (consumer, message_id, job_id, failures) VALUES ($1, 'm-a', 'a:1', 1)",
      [A],
    );
    const moved = await attempt(
      loginA,
      "UPDATE core.message_attempts SET consumer = $1 WHERE message_id = 'm-a'",
      [B],
    );
    expect(moved.error?.code).toBe("42501");
    await admin.query("DELETE FROM core.message_attempts WHERE message_id = 'm-a'");
    await expectBUntouched();
  });

  it("A's login reads no queue URL of B's from the registry", async () => {
    const { rows, error } = await attempt(
      loginA,
      "SELECT queues FROM core.consumer_roles WHERE consumer = $1",
      [B],
    );
    expect(rows).toEqual([]);
    expect(error?.code).toBe("42501");
    // What the fence path needs of the registry stays readable.
    const ids = await attempt(
      loginA,
      "SELECT id, consumer, role_name FROM core.consumer_roles WHERE consumer = $1",
      [A],
    );
    expect(ids.rows).toHaveLength(1);
    await expectBUntouched();
  });
});

describe("the functions a consumer may call, each argument B's", () => {
  it("core.hold_fence with B's job and B's name answers nothing and locks nothing", async () => {
    await loginA.query("BEGIN");
    try {
      for (const [job, consumer] of [
        ["b:fence", B],
        ["b:fence", A],
      ] as const) {
        const { rows, error } = await attempt(loginA, "SELECT * FROM core.hold_fence($1, $2)", [
          job,
          consumer,
        ]);
        expect(error).toBeUndefined();
        expect(rows).toEqual([]);
      }
      // B's fence is not locked by A's open transaction: a lock that conflicts with KEY SHARE is free.
      await admin.query("BEGIN");
      await admin.query(
        "SELECT 1 FROM core.processed_jobs p JOIN core.consumer_roles c ON c.id = p.consumer_id WHERE c.consumer = $1 AND p.job_id = 'b:fence' FOR UPDATE OF p NOWAIT",
        [B],
      );
      await admin.query("ROLLBACK");
    } finally {
      await loginA.query("ROLLBACK");
    }
    await expectBUntouched();
  });

  it("core.withdraw_own_fences with B's name and B's job ids deletes nothing", async () => {
    await loginA.query("BEGIN");
    try {
      // A fences the same job id in this transaction, so the transaction's own fences are not empty.
      await loginA.query(
        "INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at) VALUES ('b:fence', core.consumer_id($1), 't', now() + interval '1 day')",
        [A],
      );
      const { rows, error } = await attempt(
        loginA,
        "SELECT core.withdraw_own_fences($1, ARRAY['b:fence', 'b:dead']) AS n",
        [B],
      );
      expect(error).toBeUndefined();
      expect(rows).toEqual([{ n: 0 }]);
    } finally {
      await loginA.query("ROLLBACK");
    }
    await expectBUntouched();
  });

  it("core.outbox_undelivered with B as the sender, or B's row's key, moves nothing of B's", async () => {
    for (const args of [
      [B, A, "b:follow-up", QUEUE_A],
      [A, A, "b:follow-up", QUEUE_A],
      [B, A, "b:follow-up", QUEUE_B],
      [A, B, "b:follow-up", QUEUE_B],
    ]) {
      const { rows, error } = await attempt(
        loginA,
        "SELECT * FROM core.outbox_undelivered($1, $2, $3, $4, NULL, $5::jsonb)",
        [...args, ERROR],
      );
      expect(error, JSON.stringify(args)).toBeUndefined();
      expect(rows, JSON.stringify(args)).toEqual([]);
    }
    await expectBUntouched();
  });

  it("a follow-up A's login forges for B never becomes B's pending dead letter", async () => {
    // A writes a row of its own naming B as the target, with a body and job id of its choosing,
    // and moves it to the dead letters as undelivered: B's pending row, which an operator replays
    // to B's queue. The row's provenance must be refused (issue 30, class 1; migration 0019).
    // In a transaction rolled back afterwards: a dead letter, once written, can never be deleted.
    await loginA.query("BEGIN");
    try {
      const forged = await attempt(
        loginA,
        `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint)
         VALUES ($1, 'a:parent', $2, 'b:forged-follow-up', 't', 'c', '{"job_id":"b:forged-follow-up","tenant_id":"t","payload":{"user_id":"u","message":"pay me"}}', '${FINGERPRINT}')`,
        [A, B],
      );
      if (forged.error === undefined) {
        const moved = await attempt(
          loginA,
          "SELECT * FROM core.outbox_undelivered($1, $2, 'b:forged-follow-up', $3, NULL, $4::jsonb)",
          [A, B, QUEUE_B, ERROR],
        );
        expect(moved.rows, "a forged follow-up became B's pending dead letter").toEqual([]);
      }
    } finally {
      await loginA.query("ROLLBACK");
    }
    await expectBUntouched();
  });

  it("core.consumer_id with B's name gives B's id and nothing of B's rows; the session lookups name A's consumer", async () => {
    const { rows } = await attempt(
      loginA,
      "SELECT core.consumer_id($1) AS b, core.session_consumer() AS consumer, core.session_consumer_id() AS id, core.consumer_id($2) AS a",
      [B, A],
    );
    expect(rows[0]?.consumer).toBe(A);
    expect(rows[0]?.id).toBe(rows[0]?.a);
    expect(rows[0]?.b).not.toBe(rows[0]?.a);
    await expectBUntouched();
  });

  it("core.assert_fence_transaction with any transaction id reads and changes nothing of B's", async () => {
    const { rows: xid } = await admin.query("SELECT pg_current_xact_id()::text AS x");
    const { error } = await attempt(loginA, "SELECT core.assert_fence_transaction($1::xid8)", [xid[0]?.x]);
    expect(error?.code).toBe("JF001");
    await expectBUntouched();
  });

  it("core.fence_commit_check with any transaction id and scope commits nothing of B's, and only A's own transaction", async () => {
    // Another transaction's id (B's fence's): JF001, nothing read or changed.
    const { rows: xmin } = await admin.query(
      "SELECT xmin::text::xid8::text AS x FROM core.processed_jobs WHERE job_id = 'b:fence'",
    );
    const other = await attempt(
      loginA,
      "SELECT core.fence_commit_check($1::xid8, 'x', 'x', true, '{}'::text[])",
      [xmin[0]?.x],
    );
    expect(other.error?.code).toBe("JF001");
    // A's own transaction with B's role named as the scope it began with: JF003, nothing committed.
    const began = `${consumerRoleName(B)} "$user", public`;
    await loginA.query("BEGIN");
    const { rows: own } = await loginA.query("SELECT pg_current_xact_id()::text AS x");
    const scoped = await attempt(
      loginA,
      `SELECT core.fence_commit_check($1::xid8, $2, ${FENCE_SCOPE}, true, '{}'::text[])`,
      [own[0]?.x, began],
    );
    expect(scoped.error?.code).toBe("JF003");
    // Passed: it marks A's own transaction, which then commits A's rows only, as any COMMIT would.
    await loginA.query("BEGIN");
    const { rows: mine } = await loginA.query(
      `SELECT pg_current_xact_id()::text AS x, ${FENCE_SCOPE} AS scope`,
    );
    // B's fence named as one A's transaction must still hold: A cannot see it, so it is missing (JF004).
    const named = await attempt(
      loginA,
      `SELECT core.fence_commit_check($1::xid8, $2, ${FENCE_SCOPE}, true, ARRAY['b:fence'])`,
      [mine[0]?.x, mine[0]?.scope],
    );
    expect(named.error?.code).toBe("JF004");
    await loginA.query("BEGIN");
    const { rows: again } = await loginA.query(
      `SELECT pg_current_xact_id()::text AS x, ${FENCE_SCOPE} AS scope`,
    );
    const passed = await attempt(
      loginA,
      `SELECT core.fence_commit_check($1::xid8, $2, ${FENCE_SCOPE}, true, '{}'::text[])`,
      [again[0]?.x, again[0]?.scope],
    );
    expect(passed.error).toBeUndefined();
    await loginA.query("COMMIT");
    await expectBUntouched();
  });

  it("core.reset_fence_session resets A's own session only: B's rows and B's sessions untouched", async () => {
    // Another session's state (the admin's, standing in for B's) is not the caller's to reset.
    await admin.query("SET application_name = 'another-session'");
    await loginA.query("SET statement_timeout = 1234");
    const { error } = await attempt(loginA, "SELECT core.reset_fence_session()");
    expect(error).toBeUndefined();
    const { rows } = await loginA.query("SELECT current_setting('statement_timeout') AS st");
    expect(rows[0]?.st).not.toBe("1234ms");
    const { rows: other } = await admin.query("SELECT current_setting('application_name') AS name");
    expect(other[0]?.name).toBe("another-session");
    await admin.query("RESET application_name");
    await expectBUntouched();
  });

  it("the functions every role may call are pure: immutable, with no definer's rights, or triggers that cannot be called", async () => {
    // pg_trgm's (schema public) are no definers either; set_limit sets the session's own threshold.
    const { rows } = await admin.query<{
      fn: string;
      volatility: string;
      definer: boolean;
      trigger: boolean;
    }>(
      `SELECT p.oid::regprocedure::text AS fn,
              CASE WHEN p.pronamespace = 'core'::regnamespace THEN p.provolatile ELSE 'i' END AS volatility,
              p.prosecdef AS definer, p.prorettype = 'trigger'::regtype AS trigger
         FROM pg_proc p
        WHERE p.pronamespace IN ('core'::regnamespace, 'public'::regnamespace)
          AND EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a WHERE a.grantee = 0)`,
    );
    expect(rows.length).toBeGreaterThan(0);
    for (const r of rows) {
      expect(r.definer, r.fn).toBe(false);
      if (!r.trigger) expect(r.volatility, r.fn).toBe("i");
    }
    for (const r of rows.filter((f) => f.trigger)) {
      const { error } = await attempt(loginA, `SELECT ${r.fn.replace(/\(\)$/, "")}()`);
      expect(error?.code, r.fn).toBe("0A000");
    }
    // The helpers with B's values: answers computed from the arguments alone.
    const { error } = await attempt(
      loginA,
      "SELECT core.consumer_role_name($1), core.dead_letter_body_fingerprint('{}', NULL), core.error_fingerprint('{}'::jsonb), core.first_own_frame('x'), core.normalise_error_message('x'), similarity('a', 'b')",
      [B],
    );
    expect(error).toBeUndefined();
    await expectBUntouched();
  });

  it("the definer trigger functions cannot be called by A's login, and fire for A's own rows only", async () => {
    for (const fn of [
      "core.dead_letters_count_inserted",
      "core.dead_letters_count_updated",
      "core.dead_letters_group_inserted",
      "core.dead_letters_group_updated",
      "core.dead_letters_guard_update",
      "core.dead_letters_link_replay",
    ]) {
      const { error } = await attempt(loginA, `SELECT ${fn}()`);
      expect(error?.code, fn).toBe("42501");
    }
    // A's own dead letter fires the counting and grouping triggers; B's rows stay as they were.
    const own = await attempt(
      loginA,
      `INSERT INTO core.dead_letters (job_id, consumer, queue, attempts, error_kind, last_error, correlation_id, body_form, body)
       VALUES ('a:dead', $1, '${QUEUE_A}', 1, 'hard', '{"class":"E","message":"m"}', 'c', 'text', '{}')`,
      [A],
    );
    expect(own.error).toBeUndefined();
    await admin.query("DELETE FROM core.dead_letters WHERE job_id = 'a:dead'").catch(() => {});
    await expectBUntouched();
  });
});

describe("the steps (migration 0027)", () => {
  /** A claim (no result) of `shared:stepped`'s step `charge` in the name of consumer $1, with one more column. */
  const stepClaim = (column?: string, value?: string) =>
    `INSERT INTO core.job_steps (job_id, consumer_id, step, position, fingerprint, expires_at${column ? `, ${column}` : ""})
     VALUES ('shared:stepped', core.consumer_id($1), 'charge', 1, NULL, now() + interval '1 day'${column ? `, ${value}` : ""})`;

  it("A's login reads none of B's steps, writes none in B's name, and changes or deletes no step at all", async () => {
    // Reads: by B's id, by the job ids both use, through the runner's own query.
    for (const sql of [
      "SELECT * FROM core.job_steps WHERE consumer_id = core.consumer_id($1)",
      "SELECT * FROM core.job_steps WHERE job_id IN ('shared:stepped', 'b:claimed') AND $1::text IS NOT NULL",
    ]) {
      const { rows, error } = await attempt(loginA, sql, [B]);
      expect(error, sql).toBeUndefined();
      expect(rows, sql).toEqual([]);
    }
    expect(await readJobSteps(loginA, B, "shared:stepped")).toEqual({
      fenced: false,
      claimedBy: null,
      steps: new Map(),
    });
    expect(await readJobSteps(loginA, A, "shared:stepped")).toEqual({
      fenced: false,
      claimedBy: null,
      steps: new Map(),
    });
    // Claims in B's name: refused, also as ON CONFLICT DO NOTHING on the key of B's row (not a
    // silent "someone has it"), also through the runner's own statement.
    for (const sql of [stepClaim(), `${stepClaim()} ON CONFLICT DO NOTHING`]) {
      expect((await attempt(loginA, sql, [B])).error?.code, sql).toBe("42501");
    }
    await expect(
      claimStep(loginA, {
        consumer: B,
        jobId: "shared:stepped",
        step: "charge",
        position: 1,
        fingerprint: Buffer.alloc(16),
        ttlSeconds: 86_400,
      }),
    ).rejects.toMatchObject({ code: "42501" });
    // Answering B's claim: not A's row to update (none found), through the runner's statement too.
    await expect(
      recordStepResult(loginA, { consumer: B, jobId: "b:claimed", step: "charge" }, '{"id":"ch_forged"}'),
    ).rejects.toThrow(/its claim was gone/);
    expect(
      await attempt(
        loginA,
        "UPDATE core.job_steps SET result = '{}' WHERE job_id = 'b:claimed' AND $1::text IS NOT NULL",
        [B],
      ),
    ).toMatchObject({ error: undefined, rowCount: 0 });
    // Its own claim carries no result, and its times are the server's.
    for (const [column, value] of [
      ["result", "'{}'"],
      ["called_at", "now() - interval '1 year'"],
      ["recorded_at", "now()"],
    ] as const) {
      expect((await attempt(loginA, stepClaim(column, value), [A])).error?.code, column).toBe("42501");
    }
    // Its own job claim: never a result, never without a body's fingerprint (any body would pass).
    const jobClaim = (fingerprint: string) =>
      `INSERT INTO core.job_steps (job_id, consumer_id, step, position, fingerprint, expires_at)
       VALUES ('a:claimed', core.consumer_id($1), '_job', 0, ${fingerprint}, now() + interval '1 day')`;
    expect((await attempt(loginA, jobClaim("NULL"), [A])).error?.code).toBe("23514");
    expect(
      (await attempt(loginA, jobClaim("'00112233445566778899aabbccddeeff'"), [A])).error,
    ).toBeUndefined();
    expect(
      (
        await attempt(
          loginA,
          "UPDATE core.job_steps SET result = 'null' WHERE job_id = 'a:claimed' AND $1::text IS NOT NULL",
          [A],
        )
      ).error?.code,
    ).toBe("23514");
    // A's own claim gets its result once; then it is a fact.
    expect((await attempt(loginA, stepClaim(), [A])).error).toBeUndefined();
    const answer = (id: string) =>
      `UPDATE core.job_steps SET result = '{"id":"${id}"}' WHERE job_id = 'shared:stepped' AND consumer_id = core.consumer_id($1)`;
    expect(await attempt(loginA, answer("ch_a"), [A])).toMatchObject({ error: undefined, rowCount: 1 });
    expect(await attempt(loginA, answer("ch_changed"), [A])).toMatchObject({ error: undefined, rowCount: 0 });
    const own = await admin.query(
      "SELECT result::text, recorded_at IS NOT NULL AS recorded FROM core.job_steps WHERE job_id = 'shared:stepped' AND consumer_id = core.consumer_id($1)",
      [A],
    );
    expect(own.rows).toEqual([{ result: '{"id":"ch_a"}', recorded: true }]);
    // No other column of any row changes, and no row goes, B's or A's own; nor through the cleanup's function.
    for (const sql of [
      "UPDATE core.job_steps SET expires_at = now() WHERE consumer_id = core.consumer_id($1)",
      "UPDATE core.job_steps SET consumer_id = core.consumer_id($1)",
      "UPDATE core.job_steps SET fingerprint = NULL, result = '{}' WHERE $1::text IS NOT NULL",
      "DELETE FROM core.job_steps WHERE consumer_id = core.consumer_id($1)",
      "DELETE FROM core.job_steps WHERE $1::text IS NOT NULL",
      "SELECT core.delete_expired_steps(10) WHERE $1::text IS NOT NULL",
    ]) {
      expect((await attempt(loginA, sql, [B])).error?.code, sql).toBe("42501");
    }
    // A's own step is A's: B's login does not see it.
    expect(
      (await attempt(loginB, "SELECT * FROM core.job_steps WHERE job_id = 'shared:stepped'")).rows,
    ).toEqual([expect.objectContaining({ step: "charge", result: { id: "ch_b" } })]);
    await admin.query("DELETE FROM core.job_steps WHERE consumer_id = core.consumer_id($1)", [A]);
    await expectBUntouched();
  });

  it("A's insert in B's name is refused at once, never waiting on B's uncommitted step of the same key", async () => {
    // B records a step and has not committed: its key is locked in the primary key's index.
    await loginB.query("BEGIN");
    await loginB.query(
      `INSERT INTO core.job_steps (job_id, consumer_id, step, position, fingerprint, expires_at)
       VALUES ('b:racing', core.consumer_id($1), 'charge', 1, NULL, now() + interval '1 day')`,
      [B],
    );
    try {
      await loginA.query("SET lock_timeout = '1s'");
      const started = Date.now();
      const sql = `INSERT INTO core.job_steps (job_id, consumer_id, step, position, fingerprint, expires_at)
                   VALUES ('b:racing', core.consumer_id($1), 'charge', 1, NULL, now() + interval '1 day') ON CONFLICT DO NOTHING`;
      const { error } = await attempt(loginA, sql, [B]);
      // Refused by the row policy before the index is probed: a lock timeout (55P03) would tell A
      // that B is recording that very step of that very job right now.
      expect(error?.code).toBe("42501");
      expect(Date.now() - started).toBeLessThan(900);
    } finally {
      await loginA.query("RESET lock_timeout");
      await loginB.query("ROLLBACK");
    }
    await expectBUntouched();
  });

  it("ops reads every consumer's steps and writes none; the cleanup role only through its function", async () => {
    await admin.query("SET ROLE jobfence_ops");
    try {
      const { rows } = await admin.query("SELECT step FROM core.job_steps WHERE job_id = 'shared:stepped'");
      expect(rows).toEqual([{ step: "charge" }]);
      for (const sql of [
        "DELETE FROM core.job_steps",
        "UPDATE core.job_steps SET result = '{}'",
        stepClaim(),
      ]) {
        const refused = await admin
          .query(sql, sql.includes("$1") ? [B] : [])
          .catch((e: { code?: string }) => e);
        expect((refused as { code?: string }).code, sql).toBe("42501");
      }
      await admin.query("RESET ROLE");
      await admin.query("SET ROLE jobfence_cleanup");
      const read = await admin.query("SELECT * FROM core.job_steps").catch((e: { code?: string }) => e);
      expect((read as { code?: string }).code).toBe("42501");
      // Its function deletes nothing a copy could still need (B's row expires tomorrow).
      expect((await admin.query("SELECT core.delete_expired_steps(10) AS n")).rows).toEqual([{ n: 0 }]);
    } finally {
      await admin.query("RESET ROLE");
    }
    await expectBUntouched();
  });
});

describe("idempotency keys of the ops API (migration 0028)", () => {
  /** A live key and an expired one, each with a recorded response, written as the migrator. */
  async function seedKeys(): Promise<void> {
    await admin.query("DELETE FROM core.idempotency_keys");
    await admin.query(
      `INSERT INTO core.idempotency_keys (actor, key, operation, request_digest, created_at, expires_at,
                                          response_status, response_body, completed_at)
       VALUES ('operator', 'live-key', 'replayDeadLetter', sha256('a'), now(), now() + interval '24 hours',
               200, '{"id":"x"}', now()),
              ('operator', 'old-key', 'replayDeadLetter', sha256('b'), now() - interval '25 hours',
               now() - interval '1 hour', 200, '{"id":"y"}', now() - interval '25 hours')`,
    );
  }
  const keys = async () =>
    (
      await admin.query(
        "SELECT actor, key, response_body::text AS body FROM core.idempotency_keys ORDER BY key",
      )
    ).rows;

  it("consumer logins neither read nor write idempotency keys; the cleanup role deletes only expired ones, through its function, which takes only a batch size", async () => {
    await seedKeys();
    const before = await keys();
    const tries = [
      "SELECT * FROM core.idempotency_keys WHERE $1::text IS NOT NULL",
      "SELECT count(*) FROM core.idempotency_keys WHERE actor = $1",
      `INSERT INTO core.idempotency_keys (actor, key, operation, request_digest)
       VALUES ($1, 'live-key', 'replayDeadLetter', sha256('c'))`,
      "UPDATE core.idempotency_keys SET response_body = '{}' WHERE key = 'live-key' AND $1::text IS NOT NULL",
      "UPDATE core.idempotency_keys SET expires_at = now() - interval '1 day', created_at = now() - interval '2 days' WHERE $1::text IS NOT NULL",
      "DELETE FROM core.idempotency_keys WHERE $1::text IS NOT NULL",
      "SELECT core.delete_expired_idempotency_keys(10) WHERE $1::text IS NOT NULL",
    ];
    for (const login of [loginA, loginB]) {
      for (const sql of tries) {
        const { error } = await attempt(login, sql, [B]);
        expect(error?.code, sql).toBe("42501");
      }
    }
    expect(await keys()).toEqual(before);

    await admin.query("SET ROLE jobfence_cleanup");
    try {
      for (const sql of tries.slice(0, -1)) {
        const refused = await admin.query(sql, [B]).catch((e: { code?: string }) => e);
        expect((refused as { code?: string }).code, sql).toBe("42501");
      }
      // Its one argument, tried out of range: refused, nothing deleted.
      for (const batch of [null, 0, -1, 100_001]) {
        const refused = await admin
          .query("SELECT core.delete_expired_idempotency_keys($1)", [batch])
          .catch((e: { code?: string }) => e);
        expect((refused as { code?: string }).code, String(batch)).toBe("22023");
      }
      expect((await admin.query("SELECT core.delete_expired_idempotency_keys(10) AS n")).rows).toEqual([
        { n: 1 },
      ]);
    } finally {
      await admin.query("RESET ROLE");
    }
    expect((await keys()).map((k) => k.key)).toEqual(["live-key"]);
    const { rows: signature } = await admin.query(
      "SELECT pg_get_function_identity_arguments('core.delete_expired_idempotency_keys'::regproc) AS args",
    );
    expect(signature).toEqual([{ args: "batch_size integer" }]);
    await expectBUntouched();
  });

  it("ops reads, claims, answers and releases keys; nothing else can", async () => {
    await seedKeys();
    await admin.query("SET ROLE jobfence_ops");
    try {
      expect((await admin.query("SELECT key FROM core.idempotency_keys ORDER BY key")).rows).toHaveLength(2);
      await admin.query(
        "INSERT INTO core.idempotency_keys (actor, key, operation, request_digest) VALUES ('operator', 'new-key', 'discardDeadLetter', sha256('d'))",
      );
      await admin.query(
        "UPDATE core.idempotency_keys SET response_status = 200, response_body = '{}', completed_at = now() WHERE key = 'new-key'",
      );
      await admin.query("DELETE FROM core.idempotency_keys WHERE key = 'new-key'");
      // The constraints hold for ops too: a failed response is never kept.
      const failed = await admin
        .query(
          "INSERT INTO core.idempotency_keys (actor, key, operation, request_digest) VALUES ('operator', 'bad key', 'discardDeadLetter', sha256('d'))",
        )
        .catch((e: { code?: string }) => e);
      expect((failed as { code?: string }).code).toBe("23514");
    } finally {
      await admin.query("RESET ROLE");
    }
    const { rows } = await admin.query(
      `SELECT grantee FROM information_schema.role_table_grants
        WHERE table_schema = 'core' AND table_name = 'idempotency_keys' AND grantee <> current_user
        GROUP BY grantee ORDER BY grantee`,
    );
    expect(rows).toEqual([{ grantee: "jobfence_ops" }]);
  });
});

describe("the bulk filter digest (migration 0030)", () => {
  it("consumer logins can neither compute a bulk filter digest nor start, read or change a bulk operation; ops computes one digest for messages that differ only in case", async () => {
    const tries = [
      "SELECT core.bulk_filter_digest(jsonb_build_object('consumer', $1::text, 'message', 'Timeout'))",
      "SELECT id, filter_digest FROM core.bulk_operations WHERE $1::text IS NOT NULL",
      `INSERT INTO core.bulk_operations (kind, filter, reason, delay_seconds, rate_per_second, planned, submitted_by)
       VALUES ('discard', jsonb_build_object('consumer', $1::text), 'x', 0, 1, 1, 'a consumer')`,
      "UPDATE core.bulk_operations SET status = 'cancelled' WHERE $1::text IS NOT NULL",
    ];
    for (const login of [loginA, loginB]) {
      for (const sql of tries) {
        const { error } = await attempt(login, sql, [B]);
        expect(error?.code, sql).toBe("42501");
      }
    }
    await admin.query("SET ROLE jobfence_ops");
    try {
      const { rows } = await admin.query(
        `SELECT core.bulk_filter_digest('{"consumer":"b","message":"Timeout"}') = core.bulk_filter_digest('{"message":"TIMEOUT","consumer":"b"}') AS same_case,
                core.bulk_filter_digest('{"consumer":"b","message":"Timeout"}') = core.bulk_filter_digest('{"consumer":"B","message":"Timeout"}') AS other_consumer,
                core.bulk_filter_digest('{"consumer":"b"}') = core.bulk_filter_digest('{"consumer":"b","message":""}') AS no_message`,
      );
      // The message alone is compared without case; every other field, and having a message at all, counts.
      expect(rows).toEqual([{ same_case: true, other_consumer: false, no_message: false }]);
    } finally {
      await admin.query("RESET ROLE");
    }
    await expectBUntouched();
  });
});

describe("the replay link (migration 0025)", () => {
  /** The rows that name `id` as the replayed dead letter they came from. */
  const successorsOf = async (id: string) =>
    (await admin.query("SELECT id, consumer FROM core.dead_letters WHERE replay_of = $1", [id])).rows;
  const replayedOfB = async () =>
    (
      await admin.query<{ id: string }>(
        "SELECT id FROM core.dead_letters WHERE consumer = $1 AND job_id = 'shared:replayed'",
        [B],
      )
    ).rows[0]?.id as string;

  it("A's login can neither set nor read a link, and its dead letters never link to B's replayed rows", async () => {
    const b = await replayedOfB();
    const insert = (consumer: string, extra = "") =>
      `INSERT INTO core.dead_letters (job_id, consumer, queue, attempts, error_kind, last_error, correlation_id, body_form, body${extra ? ", replay_of" : ""})
       VALUES ('shared:replayed', '${consumer}', '${consumer === A ? QUEUE_A : QUEUE_B}', 1, 'hard', '{"class":"E","message":"m"}', 'c', 'text', '{}'${extra}) RETURNING id`;
    // Setting the link, to B's row or any: no privilege on the column.
    expect((await attempt(loginA, insert(A, `, '${b}'`))).error?.code).toBe("42501");
    // Reading any link, its own rows' included: no privilege on the column.
    expect((await attempt(loginA, "SELECT replay_of FROM core.dead_letters")).error?.code).toBe("42501");
    expect((await attempt(loginA, "SELECT * FROM core.dead_letters")).error?.code).toBe("42501");
    // A row filed under B: refused by row-level security after the trigger looked; nothing kept.
    expect((await attempt(loginA, insert(B))).error?.code).toBe("42501");
    // A's own dead letter of the same job id and body as B's replayed one: not linked to it.
    const own = await attempt(loginA, insert(A));
    expect(own.error).toBeUndefined();
    const ownId = own.rows[0]?.id as string;
    const { rows } = await admin.query("SELECT replay_of FROM core.dead_letters WHERE id = $1", [ownId]);
    expect(rows).toEqual([{ replay_of: null }]);
    expect(await successorsOf(b)).toEqual([]);
    await expectBUntouched();

    // A's own replayed row is linked, by the database, to A's next failure of it.
    await admin.query(
      "UPDATE core.dead_letters SET status = 'replayed', resolved_at = now(), resolved_by = 'ops' WHERE id = $1",
      [ownId],
    );
    const next = await attempt(loginA, insert(A));
    expect(next.error).toBeUndefined();
    expect(await successorsOf(ownId)).toEqual([{ id: next.rows[0]?.id, consumer: A }]);
    expect(await successorsOf(b)).toEqual([]);
    await expectBUntouched();
  });
});

describe("schemas, the database and the consumers' own tables", () => {
  it("each consumer's login reaches none of the other consumer's own tables", async () => {
    for (const sql of [
      "SELECT * FROM notify_user.notifications",
      "INSERT INTO notify_user.notifications SELECT * FROM notify_user.notifications LIMIT 0",
    ]) {
      expect((await attempt(loginA, sql)).error?.code, sql).toBe("42501");
    }
    for (const sql of [
      "SELECT * FROM award_points.balances",
      "INSERT INTO award_points.ledger (job_id, tenant_id, user_id, points) VALUES ('j', 't', 'u', 5)",
      "UPDATE award_points.balances SET balance = 0",
    ]) {
      expect((await attempt(loginB, sql)).error?.code, sql).toBe("42501");
    }
    await expectBUntouched();
  });

  it("A's login creates nothing in core, public or a consumer's schema, and its temporary tables shadow nothing", async () => {
    for (const sql of [
      "CREATE TABLE core.x (id int)",
      "CREATE TABLE public.x (id int)",
      "CREATE TABLE notify_user.x (id int)",
      "CREATE TABLE award_points.x (id int)",
      "CREATE FUNCTION core.session_consumer_x() RETURNS text LANGUAGE sql AS 'SELECT 1::text'",
    ]) {
      expect((await attempt(loginA, sql)).error?.code, sql).toBe("42501");
    }
    await loginA.query(
      "CREATE TEMP TABLE consumer_roles AS SELECT $1::text AS consumer, $2::name AS role_name, 1::smallint AS id",
      [B, consumerRoleName(A)],
    );
    try {
      const { rows } = await attempt(loginA, "SELECT core.session_consumer() AS c");
      expect(rows[0]?.c).toBe(A);
    } finally {
      await loginA.query("DROP TABLE pg_temp.consumer_roles");
    }
    await expectBUntouched();
  });

  it("a consumer's group role is a member of jobfence_consumer and of nothing else", async () => {
    const { rows } = await admin.query<{ role: string }>(
      `SELECT g.rolname AS role FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
        WHERE m.member = $1::regrole ORDER BY 1`,
      [consumerRoleName(A)],
    );
    expect(rows.map((r) => r.role)).toEqual(["jobfence_consumer"]);
  });
});

describe("a login holding two consumers' roles", () => {
  it("is refused after SET ROLE to either consumer's role, naming both", async () => {
    const username = `jft_cc_both_${randomBytes(4).toString("hex")}`;
    logins.push(username);
    await provisionLogin(admin, { username, password: "pw-both-1234", consumer: A });
    // A grant by hand, which core.provision_login never makes (it revokes it on the next deploy).
    await admin.query(`GRANT ${consumerRoleName(B)} TO ${username}`);
    const url = new URL(db.url);
    url.username = username;
    url.password = "pw-both-1234";
    const both = new pg.Client({ connectionString: url.toString() });
    await both.connect();
    try {
      for (const role of [consumerRoleName(A), consumerRoleName(B)]) {
        await both.query(`SET ROLE ${role}`);
        for (const sql of [
          "SELECT core.session_consumer()",
          "SELECT core.session_consumer_id()",
          "SELECT count(*) FROM core.dead_letters",
          "INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at) VALUES ('both:1', core.consumer_id('notify-user'), 't', now() + interval '1 day')",
        ]) {
          const { error } = await attempt(both, sql);
          expect(error?.code, `${role}: ${sql}`).toBe("42501");
          expect(error?.message, `${role}: ${sql}`).toMatch(/award-points.*notify-user/);
        }
        await both.query("RESET ROLE");
      }
      // Without SET ROLE too.
      const { error } = await attempt(both, "SELECT core.session_consumer()");
      expect(error?.code).toBe("42501");
      // Nor through a definer function that acts for the consumer it is named (they run as their
      // owner, so they check the login): each names the consumers whichever one it is given.
      for (const consumer of [A, B]) {
        for (const sql of [
          `SELECT * FROM core.hold_fence('both:1', '${consumer}')`,
          `SELECT * FROM core.hold_pending_dead_letter('${consumer}', 'both:1', '\\x00')`,
          `SELECT * FROM core.outbox_claim('${consumer}', 10)`,
          `SELECT core.outbox_sent('${consumer}', ARRAY['${A}'], ARRAY['both:1'])`,
          `SELECT * FROM core.outbox_retry('${consumer}', '${A}', 'both:1', 1, '{}'::jsonb)`,
          `SELECT * FROM core.outbox_undelivered('${consumer}', '${A}', 'both:1', 'q', NULL, '{}'::jsonb)`,
        ]) {
          const refused = await attempt(both, sql);
          expect(refused.error?.code, sql).toBe("42501");
          expect(refused.error?.message, sql).toMatch(/award-points.*notify-user/);
        }
      }
    } finally {
      await both.end();
    }
    await expectBUntouched();
  });
});
