/**
 * End to end, issue 15's acceptance scenario: a bulk operation over 20,000 dead letters in the
 * local stack (`npm start` in a child process) runs at its configured rate, survives a SIGKILL of
 * the whole stack mid-way (it resumes; nothing is sent twice but the chunk in flight at the kill,
 * which the fence absorbs; nothing is skipped), and a bulk operation can be cancelled.
 *
 * As in local-stack.test.ts the test owns PostgreSQL and the SQS emulator, so the stack can be
 * SIGKILLed and started again on the same services. The dead letters are seeded directly in
 * PostgreSQL; their queue is one the test creates and no consumer polls, so every message the
 * operation sends stays there to be counted (read from the in-process emulator itself).
 *
 * Pacing, as the worker does it: a replay chunk is min(100, rate) rows, and after a chunk of n rows
 * the operation is not due again for n / rate seconds, counted from when the chunk started. So by
 * any instant t after the start, at most rate · t + one chunk rows are processed, and in any
 * window of length d at most rate · d + two chunks (one in flight at the window's start).
 */
import type { SQSClient } from "@aws-sdk/client-sqs";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { localSqsClient } from "../../local/aws-clients.ts";
import { type SqsEmulator, startSqsEmulator } from "../../local/sqs-emulator.ts";
import type { StackInfo } from "../../local/stack.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { createQueue, messagesIn, type TestQueue } from "../support/sqs.ts";
import {
  type ApiAnswer,
  callApi,
  envelope,
  groupAlive,
  type StackProcess,
  type StackServices,
  startStack,
  tempLocalDir,
  waitFor,
} from "./support.ts";

const LONG = 150_000;
const DEAD_LETTERS = "/v1/core/dead-letters";
/**
 * Not award-points: the stack registers award-points' own queue as the only one its dead letters
 * are replayed to, and these name a queue of the test's. A consumer with no queue registered is not
 * restricted (migration 0014).
 */
const CONSUMER = "bulk-e2e";
const TENANT = "t_bulk";

/** The replay: 20,000 rows at 1000 rows/s (the API's most), so ~20 s of pacing. */
const REPLAY_ROWS = 20_000;
const REPLAY_RATE = 1000;
/** Rows per replay chunk at that rate (the worker's chunkSize: min(100, ceil(rate))). */
const REPLAY_CHUNK = Math.min(100, REPLAY_RATE);
/** The stack is SIGKILLed once at least this many rows are processed. */
const KILL_AFTER = 6_000;

/** The discard to cancel: 2,000 rows at 100 rows/s (chunks of 100, one a second). */
const DISCARD_ROWS = 2_000;
const DISCARD_RATE = 100;
const DISCARD_REASON = "bulk e2e: producer bug, superseded by a backfill";

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

let db: TestDatabase;
let emulator: SqsEmulator;
let localDir: { path: string; remove(): Promise<void> };
let services: StackServices;
let stack: StackProcess | undefined;
let sqs: SQSClient;
let sql: pg.Client;
let replayQueue: TestQueue;
let discardQueue: TestQueue;
const REPLAY_QUEUE_NAME = "bulk-e2e-replay";
const DISCARD_QUEUE_NAME = "bulk-e2e-discard";

/** The running stack; fails the test when a previous step left none. */
function running(): StackProcess {
  if (!stack) throw new Error("no stack is running");
  return stack;
}

/** The seeded job of row `n` (1-based): its id, user and points, as the stored envelope says. */
function seededJob(prefix: string, n: number): { id: string; user: string; points: number } {
  return {
    id: `${prefix}-${String(n).padStart(5, "0")}`,
    user: `${prefix}-user-${n % 50}`,
    points: 1 + (n % 7),
  };
}

/**
 * Seeds `count` pending dead letters of `queue` in ONE statement, as the migrator: job ids
 * `<prefix>-00001`…, body the envelope text exactly as {@link envelope} writes it.
 */
async function seed(prefix: string, queue: string, count: number): Promise<void> {
  // In two statements with ANALYZE between: the insert triggers' plans (the replay link's lookup by
  // job id, migration 0025) are made for the table as it is when first run, and on an empty table
  // that is a scan of every row for each row inserted (test/integration/query-plans.test.ts).
  let inserted = 0;
  for (const [from, to] of [
    [1, Math.min(1000, count)],
    [1001, count],
  ] as const) {
    if (from > to) continue;
    inserted += await seedRange(prefix, queue, from, to);
    await sql.query("ANALYZE core.dead_letters");
  }
  expect(inserted).toBe(count);
}

async function seedRange(prefix: string, queue: string, from: number, to: number): Promise<number> {
  const { rowCount } = await sql.query(
    `INSERT INTO core.dead_letters
       (job_id, consumer, queue, tenant_id, payload, message_attributes, attempts, error_kind, last_error,
        status, correlation_id, body_form, body)
     SELECT s.job_id, $2::text, $3::text, $4::text, s.body::jsonb, '{}'::jsonb, 4, 'exhausted',
            '{"class": "Error", "message": "bulk e2e seed"}'::jsonb, 'pending_review', 'corr-' || s.job_id,
            'text', s.body
       FROM (SELECT j.job_id,
                    format('{"job_id":"%s","tenant_id":"%s","correlation_id":"corr-%s","payload":{"user_id":"%s","points":%s}}',
                           j.job_id, $4::text, j.job_id, $1::text || '-user-' || (g % 50), 1 + g % 7) AS body
               FROM generate_series($6::int, $5::int) AS g,
                    LATERAL (SELECT $1::text || '-' || lpad(g::text, 5, '0') AS job_id) AS j) AS s`,
    [prefix, CONSUMER, queue, TENANT, to, from],
  );
  return rowCount ?? 0;
}

/** A dead letter's decision columns, by job id, for one queue. */
async function statesOf(
  queue: string,
): Promise<
  Array<{ job_id: string; status: string; resolved_by: string | null; discard_reason: string | null }>
> {
  const { rows } = await sql.query(
    `SELECT job_id, status, resolved_by, discard_reason FROM core.dead_letters WHERE queue = $1 ORDER BY job_id`,
    [queue],
  );
  return rows;
}

/** Status counts of one queue's dead letters. */
async function statusCounts(queue: string): Promise<Record<string, number>> {
  const { rows } = await sql.query<{ status: string; n: number }>(
    "SELECT status, count(*)::int AS n FROM core.dead_letters WHERE queue = $1 GROUP BY status ORDER BY status",
    [queue],
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

/** An operation as the API returns it (the fields the test reads). */
interface Operation {
  id: string;
  kind: string;
  status: string;
  planned: number;
  processed: number;
  replayed: number;
  superseded: number;
  discarded: number;
  conflicts: number;
  failed: number;
  last_error: string | null;
  rate_per_second: number;
  submitted_by: string;
  submitted_at: string;
  cancelled_by: string | null;
  finished_at: string | null;
  skipped?: unknown[];
}

function ok(answer: ApiAnswer, status: number, what: string): Record<string, unknown> {
  expect(answer.status, `${what}: ${JSON.stringify(answer.body)}`).toBe(status);
  return answer.body ?? {};
}

/** One progress reading: the request went out at `before`, the answer came back at `after`. */
interface Sample {
  before: number;
  after: number;
  processed: number;
  status: string;
}

async function readOperation(info: StackInfo, id: string): Promise<Operation> {
  return ok(
    await callApi(info, "GET", `${DEAD_LETTERS}/operations/${id}`, info.tokens.read),
    200,
    "GET operation",
  ) as unknown as Operation;
}

/** Reads the operation every `intervalMs` until `until` accepts a reading; returns the readings. */
async function sampleUntil(
  info: StackInfo,
  id: string,
  until: (op: Operation) => boolean,
  timeoutMs: number,
  intervalMs = 200,
): Promise<{ samples: Sample[]; last: Operation }> {
  const samples: Sample[] = [];
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const before = Date.now();
    const op = await readOperation(info, id);
    const after = Date.now();
    samples.push({ before, after, processed: op.processed, status: op.status });
    if (until(op)) return { samples, last: op };
    if (after > deadline) throw new Error(`timed out sampling operation ${id}; last: ${JSON.stringify(op)}`);
    await sleep(intervalMs);
  }
}

/** Waits until no session of a (killed) stack is left in the test's database. */
async function stackSessionsGone(): Promise<number> {
  const started = Date.now();
  await waitFor(
    "the killed stack's PostgreSQL sessions to end",
    async () =>
      Number(
        (
          await sql.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity
              WHERE datname = current_database() AND application_name LIKE 'jobfence-local:%'`,
          )
        ).rows[0]?.n,
      ),
    (n) => n === 0,
    30_000,
    50,
  );
  return Date.now() - started;
}

/**
 * Waits for a moment the worker is inside a chunk's sends: the queue holds 30–89 messages more than
 * the operation's committed progress (3–8 of the chunk's 10 batches). The queue is read first, so
 * a chunk that commits meanwhile only makes the difference smaller.
 */
async function killMoment(
  id: string,
  timeoutMs = 10_000,
): Promise<{ caught: boolean; queued: number; committed: number }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const queued = messagesIn(emulator, REPLAY_QUEUE_NAME);
    const { rows } = await sql.query<{ processed: number }>(
      "SELECT processed::int AS processed FROM core.bulk_operations WHERE id = $1",
      [id],
    );
    const committed = rows[0]?.processed ?? 0;
    const ahead = queued - committed;
    if (ahead >= 30 && ahead < 90) return { caught: true, queued, committed };
    if (Date.now() > deadline) return { caught: false, queued, committed };
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

beforeAll(async () => {
  db = await createTestDatabase();
  emulator = await startSqsEmulator();
  localDir = await tempLocalDir();
  services = { databaseUrl: db.url, sqsEndpoint: emulator.endpoint, localDir: localDir.path };
  sqs = localSqsClient(emulator.endpoint);
  sql = new pg.Client({ connectionString: db.url });
  await sql.connect();
  // Queues no consumer polls: what the operation sends stays there to be counted.
  replayQueue = await createQueue(sqs, emulator.endpoint, REPLAY_QUEUE_NAME);
  discardQueue = await createQueue(sqs, emulator.endpoint, DISCARD_QUEUE_NAME);
  await seed("bulk", replayQueue.url, REPLAY_ROWS);
  await seed("cancel", discardQueue.url, DISCARD_ROWS);
  stack = await startStack(services);
}, LONG);

afterAll(async () => {
  if (stack) await stack.stop(10_000);
  await sql?.end().catch(() => {});
  sqs?.destroy();
  await emulator?.stop();
  await db?.drop();
  await localDir?.remove();
}, LONG);

describe("bulk operations in the local stack (issue 15)", () => {
  it("seeded the sets as the API sees them, with bodies exactly as the envelope writes them", async () => {
    const { info } = running();
    const { rows } = await sql.query<{ job_id: string; body: string; queue: string }>(
      "SELECT job_id, body, queue FROM core.dead_letters WHERE job_id IN ('bulk-00001', 'bulk-20000', 'cancel-00007')",
    );
    const byJob = new Map(rows.map((r) => [r.job_id, r]));
    for (const [prefix, n, queue] of [
      ["bulk", 1, replayQueue.url],
      ["bulk", 20_000, replayQueue.url],
      ["cancel", 7, discardQueue.url],
    ] as const) {
      const job = seededJob(prefix, n);
      expect(byJob.get(job.id)).toEqual({
        job_id: job.id,
        body: envelope(job.id, job.user, job.points, TENANT),
        queue,
      });
    }
    expect(await statusCounts(replayQueue.url)).toEqual({ pending_review: REPLAY_ROWS });
    expect(await statusCounts(discardQueue.url)).toEqual({ pending_review: DISCARD_ROWS });
    const plan = ok(
      await callApi(info, "POST", `${DEAD_LETTERS}/replay/plan`, info.tokens.replay, {
        filter: { queue: replayQueue.url },
      }),
      200,
      "plan",
    );
    expect(plan).toMatchObject({
      kind: "replay",
      matched: REPLAY_ROWS,
      pending_total: REPLAY_ROWS + DISCARD_ROWS,
      would_send: REPLAY_ROWS,
      superseded: 0,
      conflicts: 0,
      confirmation_required: true,
    });
    // Without the plan's token, a set this large is refused.
    const unconfirmed = await callApi(info, "POST", `${DEAD_LETTERS}/replay`, info.tokens.replay, {
      filter: { queue: replayQueue.url },
      rate_per_second: REPLAY_RATE,
    });
    expect(unconfirmed.status).toBe(428);
  });

  it("replays 20,000 dead letters at the configured rate, through a SIGKILL of the stack, each once, skipping none", {
    timeout: LONG,
  }, async () => {
    const first = running();
    const filter = { queue: replayQueue.url };
    const plan = ok(
      await callApi(first.info, "POST", `${DEAD_LETTERS}/replay/plan`, first.info.tokens.replay, { filter }),
      200,
      "plan",
    );
    expect(plan.token).toEqual(expect.any(String));

    const t0 = Date.now();
    const started = ok(
      await callApi(first.info, "POST", `${DEAD_LETTERS}/replay`, first.info.tokens.replay, {
        filter,
        token: plan.token,
        rate_per_second: REPLAY_RATE,
      }),
      202,
      "start replay",
    ) as unknown as Operation;
    expect(started).toMatchObject({
      kind: "replay",
      status: "running",
      planned: REPLAY_ROWS,
      processed: 0,
      rate_per_second: REPLAY_RATE,
      submitted_by: "local-replayer",
      cancelled_by: null,
      finished_at: null,
    });
    const id = started.id;

    // Before the kill: progress while it runs.
    const beforeKill = await sampleUntil(first.info, id, (op) => op.processed >= KILL_AFTER, 60_000);
    expect(beforeKill.last.status).toBe("running");

    // SIGKILL the whole group (npm, sh, node) in the middle of a chunk's sends: when the queue
    // (read from the in-process emulator first, then the committed progress) shows some but not all
    // of an uncommitted chunk's messages. Between chunks, if that moment is not caught within 10 s.
    const midChunk = await killMoment(id);
    const killedAt = Date.now();
    const killed = await first.kill();
    expect(killed.signal).toBe("SIGKILL");
    expect(groupAlive(first.pid)).toBe(false);
    expect(first.stdout()).not.toMatch(/\bstopped\b/);
    // Once PostgreSQL has noticed, the chunk in flight is rolled back: what is committed is final.
    const sessionsGoneMs = await stackSessionsGone();
    const { rows: atKillRows } = await sql.query<{ processed: number; status: string }>(
      "SELECT processed::int AS processed, status FROM core.bulk_operations WHERE id = $1",
      [id],
    );
    const atKill = atKillRows[0];
    if (!atKill) throw new Error("the operation is gone");
    expect(atKill.status).toBe("running");
    expect(atKill.processed).toBeGreaterThanOrEqual(KILL_AFTER);
    expect(atKill.processed).toBeLessThan(REPLAY_ROWS);
    // The chunk that was (or was about to be) in flight: the next rows of the operation's set after
    // its committed cursor.
    const { rows: inFlightRows } = await sql.query<{ job_id: string }>(
      `SELECT d.job_id FROM core.bulk_operation_items i
         JOIN core.bulk_operations o ON o.id = i.operation_id
         JOIN core.dead_letters d ON d.id = i.dead_letter_id
        WHERE o.id = $1 AND d.queue = $2 AND i.position > o.cursor_position
        ORDER BY i.position LIMIT $3`,
      [id, replayQueue.url, REPLAY_CHUNK],
    );
    const inFlight = new Set(inFlightRows.map((r) => r.job_id));
    expect(inFlight.size).toBe(REPLAY_CHUNK);
    // What reached the queue by then: every committed row once, and the in-flight chunk's sends.
    const sentAtKill = messagesIn(emulator, REPLAY_QUEUE_NAME);
    const uncommittedSends = sentAtKill - atKill.processed;
    expect(uncommittedSends).toBeGreaterThanOrEqual(0);
    expect(uncommittedSends).toBeLessThanOrEqual(REPLAY_CHUNK);
    // The kill landed mid-chunk (the case worth testing): some of its sends out, its commit not.
    if (midChunk.caught) expect(uncommittedSends, JSON.stringify(midChunk)).toBeGreaterThan(0);

    // Start again on the same services; the operation resumes where its cursor is.
    stack = undefined;
    const second = await startStack(services);
    stack = second;
    const restartedAt = Date.now();
    const afterRestart = await sampleUntil(second.info, id, (op) => op.status !== "running", 90_000, 250);
    const doneAt = afterRestart.samples.at(-1)?.after ?? Number.NaN;
    const finished = afterRestart.last;

    // It completed: every row handled once, every one replayed, nothing left pending or skipped.
    expect(finished).toMatchObject({
      status: "completed",
      planned: REPLAY_ROWS,
      processed: REPLAY_ROWS,
      replayed: REPLAY_ROWS,
      superseded: 0,
      discarded: 0,
      conflicts: 0,
      failed: 0,
      last_error: null,
      submitted_by: "local-replayer",
      cancelled_by: null,
      finished_at: expect.any(String),
      skipped: [],
    });
    // It resumed: progress after the restart started from what was committed at the kill.
    const firstAfter = afterRestart.samples[0];
    expect(firstAfter?.processed).toBeGreaterThanOrEqual(atKill.processed);
    expect(second.lines(/^\d\d:\d\d:\d\d bulk\s+\d+ dead letter\(s\) handled/).length).toBeGreaterThan(0);
    // No chunk failed in either stack (so no send was repeated but at the kill).
    expect(first.lines(/chunk\(s\) failed|worker failed/)).toEqual([]);
    expect(second.lines(/chunk\(s\) failed|worker failed/)).toEqual([]);
    const { rows: skips } = await sql.query(
      "SELECT * FROM core.bulk_operation_skips WHERE operation_id = $1",
      [id],
    );
    expect(skips).toEqual([]);

    // The rate. Never ahead of the pace: by any reading, at most rate · (time since the start) plus
    // one chunk; in any window of 2 s or more, at most rate · window plus two chunks.
    const samples = [...beforeKill.samples, ...afterRestart.samples];
    for (const s of samples) {
      expect(s.processed, `processed ${s.after - t0} ms after the start`).toBeLessThanOrEqual(
        (REPLAY_RATE * (s.after - t0)) / 1000 + REPLAY_CHUNK,
      );
    }
    let fastest = 0;
    for (const [i, a] of samples.entries()) {
      for (const b of samples.slice(i + 1)) {
        const windowMs = b.after - a.before;
        if (windowMs < 2000) continue;
        const delta = b.processed - a.processed;
        expect(delta, `${delta} rows in ${windowMs} ms`).toBeLessThanOrEqual(
          (REPLAY_RATE * windowMs) / 1000 + 2 * REPLAY_CHUNK,
        );
        // As measured (the narrower window), over the windows the stack was up throughout.
        if (a.after < killedAt === b.before < killedAt)
          fastest = Math.max(fastest, (delta * 1000) / Math.max(1, b.before - a.after));
      }
    }
    // And the whole run took at least its pacing: 20,000 / rate, less one chunk's worth.
    const minimumMs = ((REPLAY_ROWS - REPLAY_CHUNK) / REPLAY_RATE) * 1000;
    expect(doneAt - t0).toBeGreaterThanOrEqual(minimumMs);
    const serverMs = Date.parse(finished.finished_at ?? "") - Date.parse(finished.submitted_at);
    expect(serverMs).toBeGreaterThanOrEqual(minimumMs);
    const downMs = restartedAt - killedAt;
    const upMs = serverMs - downMs;
    const beforeRate = (atKill.processed * 1000) / (killedAt - t0);
    const afterStart = afterRestart.samples[0] ?? { after: restartedAt, processed: atKill.processed };
    const afterRate = ((REPLAY_ROWS - afterStart.processed) * 1000) / Math.max(1, doneAt - afterStart.after);

    // Every dead letter of the set replayed, once, by the token's subject.
    const states = await statesOf(replayQueue.url);
    expect(states).toHaveLength(REPLAY_ROWS);
    expect(states.filter((r) => r.status !== "replayed" || r.resolved_by !== "local-replayer")).toEqual([]);

    // The queue: every seeded job at least once, its body byte for byte; a job more than once only
    // if it was in the chunk in flight at the kill (those the fence absorbs: same job, same body).
    const queue = emulator.server.inspectQueue(REPLAY_QUEUE_NAME);
    if (!queue) throw new Error("the replay queue is gone");
    const messages = [
      ...queue.messages.ready,
      ...queue.messages.delayed,
      ...queue.messages.inflight.map((m) => m.message),
    ];
    expect(messages.length).toBeGreaterThanOrEqual(REPLAY_ROWS);
    const sent = new Map<string, number>();
    const wrongBodies: string[] = [];
    for (const message of messages) {
      const jobId = (JSON.parse(message.body) as { job_id: string }).job_id;
      const n = Number(jobId.slice("bulk-".length));
      const job = seededJob("bulk", n);
      if (job.id !== jobId || message.body !== envelope(job.id, job.user, job.points, TENANT))
        wrongBodies.push(message.body);
      sent.set(jobId, (sent.get(jobId) ?? 0) + 1);
    }
    expect(wrongBodies).toEqual([]);
    const missing = Array.from({ length: REPLAY_ROWS }, (_, i) => seededJob("bulk", i + 1).id).filter(
      (job) => !sent.has(job),
    );
    expect(missing).toEqual([]);
    expect(sent.size).toBe(REPLAY_ROWS);
    const repeated = [...sent.entries()].filter(([, count]) => count > 1);
    expect(repeated.filter(([, count]) => count > 2)).toEqual([]);
    expect(repeated.length).toBeLessThanOrEqual(REPLAY_CHUNK);
    expect(repeated.map(([job]) => job).filter((job) => !inFlight.has(job))).toEqual([]);
    expect(messages.length).toBe(REPLAY_ROWS + repeated.length);
    // Exactly the sends of the chunk in flight at the kill were repeated: it ran again, once.
    expect(repeated.length).toBe(uncommittedSends);

    // A finished operation cannot be cancelled.
    const cancelFinished = await callApi(
      second.info,
      "POST",
      `${DEAD_LETTERS}/operations/${id}/cancel`,
      second.info.tokens.admin,
      {},
    );
    expect(cancelFinished.status).toBe(409);

    console.log(
      [
        `e2e bulk: ${REPLAY_ROWS} replayed at ${REPLAY_RATE}/s in ${((doneAt - t0) / 1000).toFixed(1)} s (test clock;`,
        `${(serverMs / 1000).toFixed(1)} s submitted→finished, ${(downMs / 1000).toFixed(1)} s of it down, ~${(upMs / 1000).toFixed(1)} s up);`,
        `SIGKILL at ${atKill.processed} processed, ${midChunk.caught ? "mid-chunk" : "NOT caught mid-chunk"} (${sentAtKill} messages in the queue, sessions gone after ${sessionsGoneMs} ms);`,
        `measured ${beforeRate.toFixed(0)}/s before the kill, ${afterRate.toFixed(0)}/s after the restart,`,
        `fastest ≥2 s window ${fastest.toFixed(0)}/s; ${repeated.length} job(s) sent twice (the chunk in flight),`,
        `${messages.length} messages in all; ${samples.length} progress readings`,
      ].join(" "),
    );
  });

  it("cancels a running bulk discard: it stops where it was, and the rest stays pending", {
    timeout: LONG,
  }, async () => {
    const { info } = running();
    const filter = { queue: discardQueue.url };
    const plan = ok(
      await callApi(info, "POST", `${DEAD_LETTERS}/discard/plan`, info.tokens.discard, { filter }),
      200,
      "discard plan",
    );
    expect(plan).toMatchObject({ kind: "discard", matched: DISCARD_ROWS, confirmation_required: true });
    const started = ok(
      await callApi(info, "POST", `${DEAD_LETTERS}/discard`, info.tokens.discard, {
        filter,
        token: plan.token,
        reason: DISCARD_REASON,
        rate_per_second: DISCARD_RATE,
      }),
      202,
      "start discard",
    ) as unknown as Operation;
    expect(started).toMatchObject({ kind: "discard", status: "running", planned: DISCARD_ROWS });
    const id = started.id;

    const progress = await sampleUntil(info, id, (op) => op.processed >= 300, 30_000);
    expect(progress.last.status).toBe("running");

    // The discarder may not cancel with a read token; the admin may (a different actor than the submitter).
    const forbidden = await callApi(
      info,
      "POST",
      `${DEAD_LETTERS}/operations/${id}/cancel`,
      info.tokens.read,
      {},
    );
    expect(forbidden.status).toBe(403);
    const cancelled = ok(
      await callApi(info, "POST", `${DEAD_LETTERS}/operations/${id}/cancel`, info.tokens.admin, {}),
      200,
      "cancel",
    ) as unknown as Operation;
    expect(cancelled).toMatchObject({
      id,
      status: "cancelled",
      cancelled_by: "local-admin",
      submitted_by: "local-discarder",
      finished_at: expect.any(String),
    });
    const stoppedAt = cancelled.processed;
    expect(stoppedAt).toBeGreaterThanOrEqual(300);
    expect(stoppedAt).toBeLessThan(DISCARD_ROWS);
    expect(cancelled.discarded).toBe(stoppedAt);

    // It stays stopped: after several chunk intervals nothing more has been processed.
    await sleep((3 * 1000 * Math.min(500, DISCARD_RATE)) / DISCARD_RATE);
    const later = await readOperation(info, id);
    expect(later).toMatchObject({
      status: "cancelled",
      processed: stoppedAt,
      discarded: stoppedAt,
      cancelled_by: "local-admin",
      finished_at: cancelled.finished_at,
    });
    const again = await callApi(
      info,
      "POST",
      `${DEAD_LETTERS}/operations/${id}/cancel`,
      info.tokens.admin,
      {},
    );
    expect(again.status).toBe(409);

    // What it did stays done; the rest is still pending.
    expect(await statusCounts(discardQueue.url)).toEqual({
      discarded: stoppedAt,
      pending_review: DISCARD_ROWS - stoppedAt,
    });
    const states = await statesOf(discardQueue.url);
    const discarded = states.filter((r) => r.status === "discarded");
    expect(
      discarded.filter((r) => r.resolved_by !== "local-discarder" || r.discard_reason !== DISCARD_REASON),
    ).toEqual([]);
    expect(states.filter((r) => r.status === "pending_review" && r.resolved_by !== null)).toEqual([]);
    // Nothing skipped: the discarded rows are exactly the first of the set, oldest first.
    const { rows: order } = await sql.query<{ status: string }>(
      "SELECT status FROM core.dead_letters WHERE queue = $1 ORDER BY created_at, id",
      [discardQueue.url],
    );
    const firstPending = order.findIndex((r) => r.status === "pending_review");
    expect(firstPending).toBe(stoppedAt);
    expect(order.slice(firstPending).filter((r) => r.status !== "pending_review")).toEqual([]);
    // Nothing of a discard reaches a queue.
    expect(emulator.server.inspectQueue(DISCARD_QUEUE_NAME)?.messages.ready).toEqual([]);

    console.log(
      `e2e bulk: discard cancelled at ${stoppedAt} of ${DISCARD_ROWS} (${DISCARD_RATE}/s), ${DISCARD_ROWS - stoppedAt} left pending`,
    );
  });
});
