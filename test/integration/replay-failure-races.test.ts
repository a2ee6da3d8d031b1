/**
 * A failure during a replay is never merged away (issue 30, class 2; migration 0020). A replayed
 * message that fails again at once (poison, a permanent error, its last attempt) used to find the
 * dead letter being replayed still pending, merge into it and be acked; the replay then marked the
 * row `replayed`, and the job was neither applied nor pending. The same with a bulk chunk (the
 * window is its whole chunk's sends), a discard and a supersede whose UPDATE had not committed.
 *
 * Each case is a fixed interleaving of the real code against real PostgreSQL: the real replay and
 * bulk worker paused inside their SQS send (the send returns only when the test opens a gate), the
 * real discard and supersede paused before their COMMIT, and the real harness processing the
 * replayed body meanwhile. The gate opens once the harness has finished the record or is waiting
 * for a row lock (the fixed write waits for the transition, the old one merged and acked). The
 * invariant afterwards: the message ends applied, or with exactly one pending dead letter.
 */
import { randomBytes } from "node:crypto";
import type { SQSClient } from "@aws-sdk/client-sqs";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import type { ConsumerDefinition } from "../../shared/consumer.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { supersedeAppliedDeadLetters } from "../../shared/db/queries/supersede-applied-dead-letters.ts";
import { planOperation, startOperation } from "../../shared/dead-letters/bulk-operations.ts";
import { runChunk } from "../../shared/dead-letters/bulk-worker.ts";
import { discardDeadLetter, replayDeadLetter } from "../../shared/dead-letters/replay.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import { TEST_SEAL_KEY } from "../support/api-harness.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  invoke,
  sqsRecord,
} from "../support/consumer-harness.ts";
import { expectRefused, SQLSTATE } from "../support/expect-pg.ts";
import { insertDeadLetter } from "../support/fixtures.ts";

let bed: ConsumerTestBed;
let opsPool: pg.Pool;
let watcher: pg.Client;
let queueUrl: string;
beforeAll(async () => {
  bed = await consumerTestBed();
  opsPool = createPool({ connectionString: bed.db.url, role: "jobfence_ops", max: 4 });
  watcher = new pg.Client({ connectionString: bed.db.url });
  await watcher.connect();
  queueUrl = (await bed.queue("replay-failure-races")).url;
});
afterAll(async () => {
  await watcher?.end();
  await opsPool?.end();
  await bed?.close();
});

type Awarded = typeof awardPointsConsumer;
type FastFailure = "poison" | "hard" | "exhausted";

/** A consumer whose every run fails as `kind`, and a body it fails with. */
function failing(kind: FastFailure, jobId: string, tenant: string): { definition: Awarded; body: string } {
  const job = award(jobId, 5, `u-${jobId}`, tenant);
  if (kind === "poison") {
    // The envelope (and so the job id) reads; the payload is not what the consumer takes.
    return {
      definition: awardPointsConsumer,
      body: JSON.stringify({ ...job, payload: { user_id: `u-${jobId}`, points: "five" } }),
    };
  }
  const definition: ConsumerDefinition<Awarded["payload"], Awarded["sends"]> = {
    ...awardPointsConsumer,
    retry: { maxAttempts: 1, rationale: "every attempt is the last here" },
    work: async () => {
      throw kind === "hard" ? new PermanentJobError("the account is closed") : new Error("ledger down");
    },
  };
  return { definition: definition as Awarded, body: JSON.stringify(job) };
}

/** A consumer built by the real factory on a pool of its own (so a test can watch its statements). */
function consumerOn(definition: Awarded, lockTimeoutMs = 5000) {
  const pool = createPool({
    connectionString: bed.db.url,
    role: consumerRoleName("award-points"),
    max: 4,
    lockTimeoutMs,
  });
  // The bed ends the pool with the others.
  return { handler: bed.consumer(definition, { queueUrl, pool }), pool };
}

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/**
 * An SQS client that sends for real, then holds its answer until `open()`: the replay or bulk
 * chunk is paused between its send and its COMMIT, the row still locked and pending.
 * `sent(n)` resolves with the bodies once `n` have been sent.
 */
function gatedSqs(real: SQSClient) {
  const gate = deferred();
  const bodies: string[] = [];
  const waiting: Array<{ n: number; done: (b: string[]) => void }> = [];
  const client = {
    async send(command: { input: { MessageBody?: string; Entries?: Array<{ MessageBody?: string }> } }) {
      const answer = await real.send(command as never);
      const { input } = command;
      for (const b of input.Entries?.map((e) => e.MessageBody) ?? [input.MessageBody]) bodies.push(b ?? "");
      for (const w of waiting) if (bodies.length >= w.n) w.done([...bodies]);
      await gate.promise;
      return answer;
    },
  } as unknown as SQSClient;
  return {
    client,
    open: () => gate.resolve(),
    sent: (n: number) =>
      new Promise<string[]>((done) => {
        if (bodies.length >= n) done([...bodies]);
        else waiting.push({ n, done });
      }),
  };
}

/**
 * Resolves "finished" when `work` settles, or "blocked" as soon as a session of the test's
 * database waits for a lock (the fixed dead-letter write waiting for the transition).
 */
async function finishedOrBlocked(work: Promise<unknown>): Promise<"finished" | "blocked"> {
  let settled = false;
  work.then(
    () => {
      settled = true;
    },
    () => {
      settled = true;
    },
  );
  while (!settled) {
    const { rows } = await watcher.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock'`,
    );
    if ((rows[0]?.n ?? 0) > 0) return "blocked";
    await new Promise((r) => setTimeout(r, 5));
  }
  return "finished";
}

/** Every dead letter of a job, oldest first. */
async function rowsOf(jobId: string) {
  const { rows } = await watcher.query<{ id: string; status: string; error_kind: string }>(
    "SELECT id, status, error_kind FROM core.dead_letters WHERE job_id = $1 ORDER BY created_at, id",
    [jobId],
  );
  return rows;
}

/** The invariant: not applied, so exactly one pending dead letter, a new one beside `resolved`. */
async function expectOnePendingBeside(jobId: string, resolved: { id: string; status: string }, kind: string) {
  const rows = await rowsOf(jobId);
  expect(rows.find((r) => r.id === resolved.id)?.status).toBe(resolved.status);
  const pending = rows.filter((r) => r.status === "pending_review");
  expect(pending, `pending dead letters of ${jobId}`).toHaveLength(1);
  expect(pending[0]?.error_kind).toBe(kind);
  const { rows: fences } = await watcher.query("SELECT 1 FROM core.processed_jobs WHERE job_id = $1", [
    jobId,
  ]);
  expect(fences).toHaveLength(0);
}

/** Records the message's first failure; returns its pending dead letter's id. */
async function firstFailure(handler: Parameters<typeof invoke>[0], jobId: string, body: string) {
  expect(await invoke(handler, [sqsRecord(body)])).toEqual([]);
  const rows = await rowsOf(jobId);
  expect(rows.map((r) => r.status)).toEqual(["pending_review"]);
  return rows[0]?.id as string;
}

describe("a replayed message that fails again before the replay commits", () => {
  it.for(["poison", "hard", "exhausted"] as const)(
    "%s: the failure stays pending as a new dead letter, and the record is acked only after",
    async (kind) => {
      const jobId = `rfr-single-${kind}`;
      const { definition, body } = failing(kind, jobId, "t_rfr_single");
      const { handler } = consumerOn(definition);
      const original = await firstFailure(handler, jobId, body);

      const sqs = gatedSqs(bed.sqs);
      const replaying = replayDeadLetter({ pool: opsPool, sqs: sqs.client }, original, "operator");
      const [copy] = await sqs.sent(1);
      expect(copy).toBe(body);
      // The copy comes back and fails at once, while the replay still holds the row.
      const processing = invoke(handler, [sqsRecord(copy as string, { receiveCount: 1 })]);
      const state = await finishedOrBlocked(processing);
      sqs.open();
      expect(await replaying).toMatchObject({ status: "replayed" });
      expect(await processing).toEqual([]);
      await expectOnePendingBeside(jobId, { id: original, status: "replayed" }, kind);
      // The write waited for the replay rather than merging into its row.
      expect(state).toBe("blocked");
    },
  );

  it("a write that waits longer than its lock_timeout reports the record failed (SQS keeps it), never acks it", async () => {
    const jobId = "rfr-timeout";
    const { definition, body } = failing("poison", jobId, "t_rfr_timeout");
    const { handler } = consumerOn(definition, 200);
    const original = await firstFailure(handler, jobId, body);

    const sqs = gatedSqs(bed.sqs);
    const replaying = replayDeadLetter({ pool: opsPool, sqs: sqs.client }, original, "operator");
    const [copy] = await sqs.sent(1);
    const record = sqsRecord(copy as string, { messageId: "m-rfr-timeout" });
    // The replay stays paused past the writer's lock_timeout.
    expect(await invoke(handler, [record])).toEqual(["m-rfr-timeout"]);
    sqs.open();
    await replaying;
    expect((await rowsOf(jobId)).map((r) => r.status)).toEqual(["replayed"]);
    // SQS delivers the record again; now it is recorded.
    expect(
      await invoke(handler, [sqsRecord(copy as string, { messageId: "m-rfr-timeout", receiveCount: 2 })]),
    ).toEqual([]);
    await expectOnePendingBeside(jobId, { id: original, status: "replayed" }, "poison");
  });
});

describe("a bulk replay chunk whose replayed messages fail again before the chunk commits", () => {
  it("each of the chunk's rows: one new pending dead letter per message, poison, hard and exhausted alike", async () => {
    const tenant = "t_rfr_bulk";
    const kinds = ["poison", "hard", "exhausted"] as const;
    const cases = kinds.map((kind) => {
      const jobId = `rfr-bulk-${kind}`;
      return { kind, jobId, ...failing(kind, jobId, tenant) };
    });
    // One consumer that fails each body as its case says.
    const byBody = new Map(cases.map((c) => [c.body, c]));
    const definition: Awarded = {
      ...awardPointsConsumer,
      retry: { maxAttempts: 1, rationale: "every attempt is the last here" },
      work: async (job) => {
        const c = cases.find((x) => x.jobId === job.jobId);
        throw c?.kind === "hard" ? new PermanentJobError("the account is closed") : new Error("ledger down");
      },
    } as Awarded;
    const { handler } = consumerOn(definition);
    const originals = new Map<string, string>();
    for (const c of cases) originals.set(c.jobId, await firstFailure(handler, c.jobId, c.body));

    const plan = await planOperation({ pool: opsPool, sealKey: TEST_SEAL_KEY }, "replay", {
      tenant_id: tenant,
    });
    expect(plan.matched).toBe(3);
    await startOperation(
      { pool: opsPool, sealKey: TEST_SEAL_KEY },
      {
        kind: "replay",
        filter: { tenant_id: tenant },
        token: plan.token as string,
        rate_per_second: 1000,
        delay_seconds: 0,
      },
      "operator",
    );
    const sqs = gatedSqs(bed.sqs);
    const chunk = runChunk({ pool: opsPool, sqs: sqs.client });
    const copies = await sqs.sent(3);
    expect(new Set(copies)).toEqual(new Set(byBody.keys()));
    const processing = invoke(
      handler,
      copies.map((b) => sqsRecord(b)),
    );
    const state = await finishedOrBlocked(processing);
    sqs.open();
    expect(await chunk).toEqual({ kind: "ran", rows: 3 });
    expect(await processing).toEqual([]);
    for (const c of cases) {
      await expectOnePendingBeside(
        c.jobId,
        { id: originals.get(c.jobId) as string, status: "replayed" },
        c.kind,
      );
    }
    expect(state).toBe("blocked");
  });
});

/**
 * Pauses the consumer's dead-letter write once, between the INSERT that found the body's pending
 * row and its next statement, and runs `meanwhile` there.
 */
function pauseAfterConflict(pool: pg.Pool, meanwhile: () => Promise<void>) {
  let armed = true;
  const after = async (text: unknown, result: pg.QueryResult) => {
    if (
      armed &&
      typeof text === "string" &&
      text.includes("INSERT INTO core.dead_letters") &&
      result.rowCount === 0
    ) {
      armed = false;
      await meanwhile();
    }
    return result;
  };
  // The dead-letter write runs on a pooled client the harness checks out within the record's
  // deadline (shared/db/connect-before.ts), or on pool.query: both are watched.
  const query = pool.query.bind(pool) as (text: unknown, params?: unknown) => Promise<pg.QueryResult>;
  pool.query = (async (text: unknown, params?: unknown) =>
    after(text, await query(text, params))) as typeof pool.query;
  const watched = new WeakSet<pg.PoolClient>();
  const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
  pool.connect = (async () => {
    const client = await connect();
    if (!watched.has(client)) {
      watched.add(client);
      const clientQuery = client.query.bind(client) as (
        text: unknown,
        params?: unknown,
      ) => Promise<pg.QueryResult>;
      client.query = (async (text: unknown, params?: unknown) =>
        after(text, await clientQuery(text, params))) as typeof client.query;
    }
    return client;
  }) as typeof pool.connect;
}

/**
 * Runs one transition's statements in a transaction of the ops role that commits only when
 * `commit()` is called: the UPDATE has taken the row, its COMMIT is not done yet.
 */
async function heldTransaction(run: (tx: pg.PoolClient) => Promise<unknown>) {
  const tx = await opsPool.connect();
  await tx.query("BEGIN");
  const result = await run(tx);
  return {
    result,
    commit: async () => {
      await tx.query("COMMIT");
      tx.release();
    },
  };
}

describe("a failure written while a discard or a supersede takes its pending row", () => {
  it("discard: the UPDATE took the row before the failure merged, so the failure stays pending", async () => {
    const jobId = "rfr-discard";
    const { definition, body } = failing("hard", jobId, "t_rfr_discard");
    const { handler, pool } = consumerOn(definition);
    const original = await firstFailure(handler, jobId, body);

    let commit: () => Promise<void> = async () => {};
    pauseAfterConflict(pool, async () => {
      // The real discard, its one statement run in a transaction the test commits later.
      const held = await heldTransaction((tx) =>
        discardDeadLetter(tx as unknown as pg.Pool, original, "not worth it", "operator"),
      );
      expect(held.result).toMatchObject({ status: "discarded" });
      commit = held.commit;
    });
    const processing = invoke(handler, [sqsRecord(body, { receiveCount: 1 })]);
    const state = await finishedOrBlocked(processing);
    await commit();
    expect(await processing).toEqual([]);
    await expectOnePendingBeside(jobId, { id: original, status: "discarded" }, "hard");
    expect(state).toBe("blocked");
  });

  it("discard: a failure merged before the discard took the row is covered by the operator's decision", async () => {
    const jobId = "rfr-discard-after";
    const { definition, body } = failing("hard", jobId, "t_rfr_discard");
    const { handler } = consumerOn(definition);
    const original = await firstFailure(handler, jobId, body);
    expect(await invoke(handler, [sqsRecord(body, { receiveCount: 1 })])).toEqual([]);
    expect((await rowsOf(jobId)).map((r) => r.id)).toEqual([original]);
    await discardDeadLetter(opsPool, original, "not worth it", "operator");
    expect((await rowsOf(jobId)).map((r) => r.status)).toEqual(["discarded"]);
  });

  it("supersede: the poison failure of a job applied since is never merged into the row being superseded", async () => {
    const jobId = "rfr-supersede";
    const { definition, body } = failing("poison", jobId, "t_rfr_supersede");
    const { handler, pool } = consumerOn(definition);
    const original = await firstFailure(handler, jobId, body);
    // A corrected resend applies the job: the poison row is now one the escalation supersedes.
    const corrected = JSON.stringify(award(jobId, 5, `u-${jobId}`, "t_rfr_supersede"));
    expect(await invoke(handler, [sqsRecord(corrected)])).toEqual([]);

    let commit: () => Promise<void> = async () => {};
    pauseAfterConflict(pool, async () => {
      const held = await heldTransaction((tx) => supersedeAppliedDeadLetters(tx, "escalation"));
      expect(held.result).toBeGreaterThanOrEqual(1);
      commit = held.commit;
    });
    // The malformed message comes back (a duplicate delivery) and is poison again.
    const processing = invoke(handler, [sqsRecord(body, { receiveCount: 2 })]);
    const state = await finishedOrBlocked(processing);
    await commit();
    expect(await processing).toEqual([]);
    const rows = await rowsOf(jobId);
    expect(rows.find((r) => r.id === original)?.status).toBe("superseded");
    // The new failure is a row of its own (the next escalation run supersedes it in turn).
    expect(rows.filter((r) => r.status === "pending_review").map((r) => r.error_kind)).toEqual(["poison"]);
    expect(state).toBe("blocked");
  });
});

describe("core.hold_pending_dead_letter, the definer the merge locks through (migration 0020)", () => {
  const login = `jft_rfr_${randomBytes(4).toString("hex")}`;
  const password = randomBytes(12).toString("hex");
  const OTHER = "record-payment";
  let asA: pg.Client;
  let ownRow: { id: string; fp: Buffer };
  let otherRow: { id: string; fp: Buffer };

  const rowOf = async (id: string) => {
    const { rows } = await watcher.query<{ fp: Buffer }>(
      "SELECT body_fingerprint AS fp FROM core.dead_letters WHERE id = $1",
      [id],
    );
    return { id, fp: rows[0]?.fp as Buffer };
  };
  /** Whether an operator's FOR UPDATE NOWAIT finds the row locked. */
  const lockedFor = async (id: string) => {
    const ops = await opsPool.connect();
    try {
      await ops.query("BEGIN");
      await ops.query("SELECT 1 FROM core.dead_letters WHERE id = $1 FOR UPDATE NOWAIT", [id]);
      return false;
    } catch (error) {
      if ((error as { code?: string }).code === "55P03") return true;
      throw error;
    } finally {
      await ops.query("ROLLBACK");
      ops.release();
    }
  };

  beforeAll(async () => {
    await bed.consumerRole(OTHER);
    await watcher.query(`CREATE ROLE ${login} LOGIN PASSWORD '${password}'`);
    await watcher.query(`GRANT ${consumerRoleName("award-points")} TO ${login}`);
    const url = new URL(bed.db.url);
    url.username = login;
    url.password = password;
    asA = new pg.Client({ connectionString: url.toString() });
    await asA.connect();
    ownRow = await rowOf(await insertDeadLetter(watcher, { job_id: "rfr-hold", consumer: "award-points" }));
    otherRow = await rowOf(
      await insertDeadLetter(watcher, { job_id: "rfr-hold", consumer: OTHER, payload: { of: OTHER } }),
    );
  });
  afterAll(async () => {
    await asA?.end();
    await watcher.query(`DROP OWNED BY ${login}`);
    await watcher.query(`DROP ROLE IF EXISTS ${login}`);
  });

  const hold = (consumer: unknown, job: unknown, fp: unknown) =>
    asA.query("SELECT id FROM core.hold_pending_dead_letter($1, $2, $3)", [consumer, job, fp]);

  it("A's login holds its own pending row, and the lock lasts until its transaction ends", async () => {
    await asA.query("BEGIN");
    expect((await hold("award-points", "rfr-hold", ownRow.fp)).rows).toEqual([{ id: ownRow.id }]);
    expect(await lockedFor(ownRow.id)).toBe(true);
    await asA.query("COMMIT");
    expect(await lockedFor(ownRow.id)).toBe(false);
  });

  it("A's login neither sees nor locks B's row, whichever argument it bends", async () => {
    await asA.query("BEGIN");
    try {
      // B's name, B's job and B's fingerprint.
      expect((await hold(OTHER, "rfr-hold", otherRow.fp)).rowCount).toBe(0);
      // A's name with B's fingerprint: that is no row of A's.
      expect(ownRow.fp.equals(otherRow.fp)).toBe(false);
      expect((await hold("award-points", "rfr-hold", otherRow.fp)).rowCount).toBe(0);
      // Nulls and patterns match nothing.
      expect((await hold(null, "rfr-hold", otherRow.fp)).rowCount).toBe(0);
      expect((await hold(OTHER, null, otherRow.fp)).rowCount).toBe(0);
      expect((await hold(OTHER, "rfr-hold", null)).rowCount).toBe(0);
      expect((await hold("%", "%", otherRow.fp)).rowCount).toBe(0);
      expect(await lockedFor(otherRow.id)).toBe(false);
    } finally {
      await asA.query("ROLLBACK");
    }
  });

  it("a consumer's login still may not lock or resolve dead letters itself", async () => {
    await expectRefused(
      asA.query("SELECT id FROM core.dead_letters WHERE id = $1 FOR SHARE", [ownRow.id]),
      SQLSTATE.insufficientPrivilege,
    );
    await expectRefused(
      asA.query("UPDATE core.dead_letters SET status = 'discarded' WHERE id = $1", [ownRow.id]),
      SQLSTATE.insufficientPrivilege,
    );
  });
});

/**
 * `core.outbox_undelivered` (the relay's move of a follow-up it could not send) merges into a pending
 * row the same way as the harness's write: it holds the row FOR SHARE, so a replay of the same
 * follow-up that holds the row is waited for, and the relay's failure then gets a row of its own.
 */
describe("core.outbox_undelivered while a replay of the same follow-up holds its row", () => {
  it("the relay's failure becomes a new pending dead letter, not one merged into the row being replayed", async () => {
    const target = "notify-user";
    const queue = bed.followUpQueues[target] as string;
    // A follow-up with its provenance (declared target, derived job id), as the harness writes one:
    // a replay refuses an undelivered row whose provenance fails.
    const key = '"rfr-outbox"';
    const derived = await watcher.query<{ id: string }>(
      "SELECT core.follow_up_job_id($1, 'award-points', 'rfr-parent', $2) AS id",
      [target, key],
    );
    const jobId = derived.rows[0]?.id as string;
    const body = JSON.stringify({
      job_id: jobId,
      tenant_id: "t_rfr_outbox",
      correlation_id: `corr-${jobId}`,
      payload: { user_id: "u-outbox", kind: "points-awarded", points: 1 },
    });
    const addOutboxRow = () =>
      watcher.query(
        `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint,
                                  follow_up_key, next_attempt_at)
         VALUES ('award-points', 'rfr-parent', $1, $2, 't_rfr_outbox', $3, $4, $5, $6, now())`,
        [target, jobId, `corr-${jobId}`, body, randomBytes(16), key],
      );
    const relay = new pg.Client({ connectionString: bed.db.url });
    await relay.connect();
    try {
      // As the scheduled relay does: claim the due row, then move it, in one transaction.
      const undelivered = async () => {
        await relay.query("BEGIN");
        await relay.query("SELECT * FROM core.outbox_claim('award-points', 100)");
        const moved = await relay.query<{ id: string; created: boolean }>(
          "SELECT * FROM core.outbox_undelivered('award-points', $1, $2, $3, NULL, $4::jsonb)",
          [target, jobId, queue, JSON.stringify({ class: "SendError", message: "refused" })],
        );
        await relay.query("COMMIT");
        return moved;
      };
      await addOutboxRow();
      const first = (await undelivered()).rows[0];
      expect(first?.created).toBe(true);

      const sqs = gatedSqs(bed.sqs);
      const replaying = replayDeadLetter({ pool: opsPool, sqs: sqs.client }, first?.id as string, "operator");
      await sqs.sent(1);
      // The same follow-up is written again and fails to send again while the replay holds the row.
      await addOutboxRow();
      const moving = undelivered();
      await finishedOrBlocked(moving);
      sqs.open();
      await replaying;
      await moving;
      await expectOnePendingBeside(jobId, { id: first?.id as string, status: "replayed" }, "undelivered");
    } finally {
      await relay.end();
    }
  });
});
