/**
 * Attempts (docs/design.md §4.1; issue 14): an attempt is a run of the work that failed, counted in core.message_attempts,
 * not a delivery. Each scenario is one the receive count got wrong, run in both commit modes
 * against the real harness and a real PostgreSQL:
 *
 *   - a redelivery that never ran (a receive count far above the attempts) still gets every attempt;
 *   - a FIFO follower held behind its failed head spends nothing, and gets its own backoff later;
 *   - the time budget leaves records unstarted at no cost, and at the deadline the harness stops
 *     waiting, rolls the running record back, records the interruption, and does nothing after;
 *   - a message interrupted too often is dead-lettered as `interrupted`, with its history;
 *   - a lock wait behind another delivery of the job is never a failure, even on the last attempt;
 *   - a retry that would outlive the message's retention is dead-lettered at once, saying why;
 *   - in batch mode an unknown culprit is found by redoing records alone: innocents never fail.
 */
import type { Context, SQSRecord } from "aws-lambda";
import { afterAll, beforeAll, describe, expect, type TestFunction, it as vitestIt } from "vitest";
import { awardPoints } from "../../functions/award-points/award.ts";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { deliver, receiveRecords } from "../../local/event-source.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import type { CommitMode, ConsumerDefinition, HostedConsumer } from "../../shared/consumer.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import { retryDelaySeconds } from "../../shared/retry/policy.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  effectsOf,
  invoke,
  sqsRecord,
} from "../support/consumer-harness.ts";
import type { TestDatabase } from "../support/database.ts";
import { sendMessage } from "../support/sqs.ts";

type AwardWork = ConsumerDefinition<typeof awardPointsConsumer.payload>["work"];

/** The award alone, without its follow-up: these tests time the work, not the relay after it. */
const applyAward: AwardWork = (job, tx) =>
  awardPoints(tx, {
    jobId: job.jobId,
    tenantId: job.tenantId,
    userId: job.payload.user_id,
    points: job.payload.points,
  });

/** award-points whose work first runs `before` (which may throw or wait). */
const awardWith = (
  before: (jobId: string) => Promise<void> | void,
): ConsumerDefinition<typeof awardPointsConsumer.payload> => ({
  name: awardPointsConsumer.name,
  payload: awardPointsConsumer.payload,
  work: (async (job, tx) => {
    await before(job.jobId);
    await applyAward(job, tx);
  }) satisfies AwardWork,
});

/** award-points whose work for `jobId` sleeps 5 s in the database: it outlasts a short invocation. */
const sleepingOn = (jobId: string): ConsumerDefinition<typeof awardPointsConsumer.payload> => ({
  ...awardPointsConsumer,
  work: async (job, tx) => {
    if (job.jobId === jobId) await tx.query("SELECT pg_sleep(5)");
    await awardPointsConsumer.work(job, tx);
  },
});

const body = (jobId: string) => JSON.stringify(award(jobId, 1, `u-${jobId}`));

/** A 3 s function with a tight budget: a short lock timeout so a record that starts can wait it out. */
const SHORT_INVOCATION = {
  functionTimeoutSeconds: 3,
  recordBudgetMs: 700,
  returnReserveMs: 500,
  lockTimeoutMs: 100,
} as const;
/**
 * "Time running short after the batch's work": the slow job's work ends with less left than the
 * record budget (no record could start: about 350 ms less on an idle machine) and more than the
 * return reserve (nothing is cut off: 650 ms to spare for a loaded one, whose work ends late). With
 * the shared 700 ms budget the whole window was 200 ms wide, and a loaded machine crossed it.
 */
const SHORT_AFTER_WORK = { workMs: 1600, recordBudgetMs: 1500, invocationMs: 2800 } as const;
/** The work of "work slower than the time left": five of them outlast the invocation. */
const PROGRESS_WORK_MS = 600;
/**
 * That test's record budget: a record starts only while its work and a margin (400 ms, for its SQL
 * on a busy machine) fit before the return reserve, so none that starts is cut off. With the
 * shared 700 ms a record could start with 200 ms to run, and a loaded machine interrupted it.
 */
const PROGRESS_RECORD_BUDGET_MS = SHORT_INVOCATION.returnReserveMs + PROGRESS_WORK_MS + 400;
const FIFO_ARN = "arn:aws:sqs:eu-west-1:000000000000:award-points.fifo";

interface LedgerRow {
  failures: number;
  interruptions: number;
  started: number | null;
  history: Array<{
    attempt: number;
    receive_count: number;
    kind: string;
    error: { name: string; message: string };
  }>;
}

interface DeadLetterRow {
  error_kind: string;
  attempts: number;
  status: string;
  last_error: { class: string; message: string };
  attempt_history: LedgerRow["history"];
}

/** Runs `jobs` as one batch: the one at `culprit` is dead-lettered and applies nothing, the rest apply once. */
async function expectOnlyCulprit(
  db: TestDatabase,
  handler: HostedConsumer,
  jobs: readonly string[],
  culprit: number,
): Promise<void> {
  expect(
    await invoke(
      handler,
      jobs.map((j) => sqsRecord(body(j), { messageId: `m-${j}` })),
    ),
  ).toEqual([]);
  for (const [i, job] of jobs.entries()) {
    expect(await effectsOf(db, job), job).toEqual(
      i === culprit ? { ledger: 0, fences: 0, deadLetters: 1 } : { ledger: 1, fences: 1, deadLetters: 0 },
    );
  }
}

async function invokeWith(
  handler: HostedConsumer,
  records: SQSRecord[],
  context: Context,
): Promise<string[]> {
  const response = await handler({ Records: records }, context);
  return response.batchItemFailures.map((f) => f.itemIdentifier);
}

/**
 * The two commit modes run side by side, each on a bed of its own (database, emulator, pools): most
 * of a test's time here is spent waiting for a deadline or a lock, so the file takes one mode's time
 * instead of both. Within a mode, the tests run one after another, in the order written.
 */
const it = (name: string, fn: TestFunction) => vitestIt(name, { concurrent: false }, fn);

for (const mode of ["per-record", "batch"] as const satisfies readonly CommitMode[]) {
  describe(`attempts (${mode})`, { concurrent: true }, () => {
    let bed: ConsumerTestBed;
    beforeAll(async () => {
      bed = await consumerTestBed({ commitMode: mode });
    });
    afterAll(() => bed.close());

    const ledgerOf = (messageId: string) =>
      bed.db.withClient(async (c) => {
        const { rows } = await c.query<LedgerRow>(
          "SELECT failures, interruptions, started, history FROM core.message_attempts WHERE message_id = $1",
          [messageId],
        );
        return rows[0];
      });
    const deadLettersOf = (jobId: string) =>
      bed.db.withClient(async (c) => {
        const { rows } = await c.query<DeadLetterRow>(
          "SELECT error_kind, attempts, status, last_error, attempt_history FROM core.dead_letters WHERE job_id = $1",
          [jobId],
        );
        return rows;
      });
    const id = (name: string) => `${mode === "batch" ? "b" : "p"}-${name}`;

    it("a redelivery that never ran still gets every attempt: exhaustion counts failed runs, not receives", async () => {
      const job = id("late-runner");
      const handler = bed.consumer(
        awardWith(() => {
          throw new Error("ledger service unavailable");
        }),
      );
      // Seven receives before its first run (held back, unstarted, a crashed batch-mate…).
      for (let n = 1; n <= 5; n++) {
        const record = sqsRecord(body(job), { messageId: `m-${job}`, receiveCount: 6 + n });
        const failed = await invoke(handler, [record]);
        if (n < 5) {
          expect(failed).toEqual([`m-${job}`]);
          expect(await ledgerOf(`m-${job}`)).toMatchObject({ failures: n, interruptions: 0, started: null });
          expect(await deadLettersOf(job)).toEqual([]);
        } else {
          expect(failed).toEqual([]);
        }
      }
      const [row] = await deadLettersOf(job);
      expect(row).toMatchObject({ error_kind: "exhausted", attempts: 5, status: "pending_review" });
      expect(row?.last_error).toMatchObject({ class: "Error", message: "ledger service unavailable" });
      expect(row?.attempt_history.map((e) => [e.attempt, e.receive_count, e.kind])).toEqual([
        [1, 7, "failure"],
        [2, 8, "failure"],
        [3, 9, "failure"],
        [4, 10, "failure"],
        [5, 11, "failure"],
      ]);
      expect(row?.attempt_history[0]?.error).toEqual({
        name: "Error",
        message: "ledger service unavailable",
      });
    });

    it("the work's attempt is the run's number, and the backoff grows with the failures", async () => {
      const job = id("attempt-number");
      const seen: number[] = [];
      const delays: number[] = [];
      const handler = bed.consumer(
        {
          ...awardPointsConsumer,
          work: async (j) => {
            seen.push(j.attempt);
            throw new Error("flaky");
          },
        },
        {
          random: () => 0.5,
          onOutcome: (outcome) => {
            if (outcome.status === "retry" && outcome.delaySeconds !== null)
              delays.push(outcome.delaySeconds);
          },
        },
      );
      for (const receiveCount of [1, 4, 9]) {
        await invoke(handler, [sqsRecord(body(job), { messageId: `m-${job}`, receiveCount })]);
      }
      expect(seen).toEqual([1, 2, 3]);
      expect(delays).toEqual([1, 2, 3].map((n) => retryDelaySeconds(n, handler.retryPolicy, () => 0.5)));
    });

    it("FIFO: a follower held behind its failed head spends no attempt, then gets its own retries", async () => {
      const head = id("fifo-head");
      const follower = id("fifo-follower");
      let followerFails = 1;
      const handler = bed.consumer(
        awardWith((jobId) => {
          if (jobId === head) throw new Error("head keeps failing");
          if (jobId === follower && followerFails-- > 0) throw new Error("one blip");
        }),
      );
      const rec = (jobId: string, receiveCount: number) =>
        sqsRecord(body(jobId), { messageId: `m-${jobId}`, receiveCount, groupId: "g", queueArn: FIFO_ARN });
      // As real SQS hands them out: the head and its follower together, on every receive.
      for (let n = 1; n <= 4; n++) {
        expect(await invoke(handler, [rec(head, n), rec(follower, n)])).toEqual([
          `m-${head}`,
          `m-${follower}`,
        ]);
        expect(await ledgerOf(`m-${follower}`)).toBeUndefined();
      }
      // The head's fifth failure is its last: dead-lettered, so the follower runs for the first
      // time on its fifth receive, and one blip is a retry with its first backoff, not exhaustion.
      const outcomes: Array<[string, string]> = [];
      const watched = bed.consumer(
        awardWith((jobId) => {
          if (jobId === head) throw new Error("head keeps failing");
          if (jobId === follower && followerFails-- > 0) throw new Error("one blip");
        }),
        { onOutcome: (o, rc) => outcomes.push([rc.record.messageId, o.status]) },
      );
      expect(await invoke(watched, [rec(head, 5), rec(follower, 5)])).toEqual([`m-${follower}`]);
      expect(outcomes).toEqual([
        [`m-${head}`, "dead-lettered"],
        [`m-${follower}`, "retry"],
      ]);
      expect((await deadLettersOf(head)).map((r) => r.error_kind)).toEqual(["exhausted"]);
      expect(await ledgerOf(`m-${follower}`)).toMatchObject({ failures: 1 });
      expect(await invoke(watched, [rec(follower, 6)])).toEqual([]);
      expect(await effectsOf(bed.db, follower)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    });

    it("FIFO through the local event source: the held-back follower is visible again at once, behind its hidden head", async () => {
      const head = id("q-head");
      const follower = id("q-follower");
      const queue = await bed.queue(`${id("fifo-return")}.fifo`, {
        FifoQueue: "true",
        ContentBasedDeduplication: "true",
        VisibilityTimeout: "120",
      });
      const handler = bed.consumer(
        awardWith((jobId) => {
          if (jobId === head) throw new Error("head fails");
        }),
        { queueUrl: queue.url, random: () => 0.5 },
      );
      for (const jobId of [head, follower])
        await sendMessage(bed.sqs, queue.url, award(jobId, 1, `u-${jobId}`), { groupId: "g" });
      const source = { sqs: bed.sqs, queueUrl: queue.url, queueArn: queue.arn };
      // As real SQS does, one receive hands out both messages of the group, in order.
      const records = await receiveRecords(source);
      expect(records.map((r) => JSON.parse(r.body).job_id)).toEqual([head, follower]);
      const result = await deliver(source, records, handler, lambdaContext(handler.consumer));
      expect(result.failedIds).toHaveLength(2);
      const name = queue.url.slice(queue.url.lastIndexOf("/") + 1);
      const state = bed.emulator.server.inspectQueue(name);
      // The head is hidden for its backoff; the follower is back in the queue, not in flight.
      const inflight = state?.messages.inflight ?? [];
      expect(inflight.map((m) => JSON.parse(m.message.body).job_id)).toEqual([head]);
      const hiddenFor = ((inflight[0]?.visibilityDeadline ?? 0) - Date.now()) / 1000;
      expect(Math.abs(hiddenFor - retryDelaySeconds(1, handler.retryPolicy, () => 0.5))).toBeLessThanOrEqual(
        2,
      );
      // The group stays behind its head: nothing is handed out while the head is hidden.
      expect(await receiveRecords(source)).toEqual([]);
      expect(await ledgerOf(result.received[1]?.messageId ?? "")).toBeUndefined();
    });

    it("the time budget: no record starts with too little time left, and an unstarted one spends nothing", async () => {
      const jobs = [id("budget-0"), id("budget-1"), id("budget-2")];
      // The invocation's clock moves only when a job works (2.1 s each), so which records start
      // depends on the budget alone, not on how busy the machine is; the return reserve's real
      // timer (at 3 s - 0.5 s) leaves the first record 2.5 s of real time for its transaction.
      let worked = 0;
      const handler = bed.consumer(
        awardWith(() => {
          worked += 2100;
        }),
        {
          configure: {
            functionTimeoutSeconds: 3,
            recordBudgetMs: 1000,
            returnReserveMs: 500,
            lockTimeoutMs: 100,
          },
        },
      );
      const records = jobs.map((j) => sqsRecord(body(j), { messageId: `m-${j}` }));
      // 3 s left: the first record starts, and after its 2.1 s only 0.9 s is left, under the budget.
      const context = { ...lambdaContext(handler.consumer), getRemainingTimeInMillis: () => 3000 - worked };
      const failed = await invokeWith(handler, records, context);
      // Batch mode commits what ran and withdraws the fences of the jobs it did not reach.
      const applied = [jobs[0]];
      expect(failed).toEqual(
        records.map((r) => r.messageId).filter((m) => !applied.some((j) => m === `m-${j}`)),
      );
      for (const job of jobs) {
        expect(await effectsOf(bed.db, job)).toEqual({
          ledger: applied.includes(job) ? 1 : 0,
          fences: applied.includes(job) ? 1 : 0,
          deadLetters: 0,
        });
        expect(await ledgerOf(`m-${job}`)).toBeUndefined();
      }
      // Less than the budget from the start: nothing runs at all.
      const late = jobs.map((j) => sqsRecord(body(`${j}-late`), { messageId: `m-${j}-late` }));
      expect(await invokeWith(handler, late, lambdaContext(handler.consumer, 900))).toEqual(
        late.map((r) => r.messageId),
      );
      for (const job of jobs) expect(await effectsOf(bed.db, `${job}-late`)).toMatchObject({ fences: 0 });
    });

    it("at the deadline the running record is rolled back and its interruption recorded; nothing runs after the return", async () => {
      const stuck = id("deadline-stuck");
      const after = id("deadline-after");
      const handler = bed.consumer(sleepingOn(stuck), {
        configure: {
          functionTimeoutSeconds: 3,
          recordBudgetMs: 1200,
          returnReserveMs: 1000,
          lockTimeoutMs: 100,
        },
      });
      const records = [stuck, after].map((j) => sqsRecord(body(j), { messageId: `m-${j}` }));
      const started = Date.now();
      const failed = await invokeWith(handler, records, lambdaContext(handler.consumer, 2500));
      const elapsed = Date.now() - started;
      expect(failed).toEqual([`m-${stuck}`, `m-${after}`]);
      // Returned at the reserve, not after the 5 s sleep (and before the 2.5 s "timeout").
      expect(elapsed).toBeLessThan(2500);
      expect(await ledgerOf(`m-${stuck}`)).toMatchObject({ failures: 0, interruptions: 1, started: null });
      expect((await ledgerOf(`m-${stuck}`))?.history.map((e) => e.kind)).toEqual(["interruption"]);
      expect(await ledgerOf(`m-${after}`)).toBeUndefined();
      // The sleeping statement is stopped by the server within its connection check (the connection
      // was destroyed), long before its 5 s, and nothing committed later.
      const sleeping = () =>
        bed.db.withClient(async (c) => {
          const { rows } = await c.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(5)' AND datname = current_database()",
          );
          return rows[0]?.n;
        });
      const waitUntil = Date.now() + 2500;
      while ((await sleeping()) !== 0 && Date.now() < waitUntil) await new Promise((r) => setTimeout(r, 100));
      expect(await sleeping()).toBe(0);
      expect(await effectsOf(bed.db, stuck)).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
      expect(await effectsOf(bed.db, after)).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
    });

    it("a message interrupted as often as allowed is dead-lettered as interrupted; its batch-mates apply", async () => {
      const killer = id("killer");
      const mate = id("killer-mate");
      const handler = bed.consumer(sleepingOn(killer), {
        configure: {
          functionTimeoutSeconds: 3,
          recordBudgetMs: 1200,
          returnReserveMs: 1000,
          lockTimeoutMs: 100,
          maxInterruptions: 2,
        },
      });
      const delivery = (n: number) => [
        sqsRecord(body(killer), { messageId: `m-${killer}`, receiveCount: n }),
        sqsRecord(body(mate), { messageId: `m-${mate}`, receiveCount: n }),
      ];
      // 2.5 s left: the killer starts even 1.3 s late on a loaded machine (the budget is 1.2 s), and
      // the reserve cuts it off 1.5 s in, with nothing left to start the batch-mate.
      for (const n of [1, 2]) {
        expect(await invokeWith(handler, delivery(n), lambdaContext(handler.consumer, 2500))).toEqual([
          `m-${killer}`,
          `m-${mate}`,
        ]);
      }
      expect(await ledgerOf(`m-${killer}`)).toMatchObject({ interruptions: 2 });
      expect(await ledgerOf(`m-${mate}`)).toBeUndefined();
      // The third delivery names it: a dead letter of its own kind, and the batch-mate runs.
      expect(await invokeWith(handler, delivery(3), lambdaContext(handler.consumer, 5000))).toEqual([]);
      const [row] = await deadLettersOf(killer);
      expect(row).toMatchObject({ error_kind: "interrupted", status: "pending_review" });
      expect(row?.last_error.class).toBe("InterruptedJobError");
      expect(row?.attempt_history.map((e) => e.kind)).toEqual(["interruption", "interruption"]);
      expect(await effectsOf(bed.db, killer)).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
      expect(await effectsOf(bed.db, mate)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    });

    it("a delivery that died with its work in flight leaves a marker the next delivery counts", async () => {
      const job = id("marker");
      const handler = bed.consumer(awardPointsConsumer, { configure: { maxInterruptions: 2 } });
      // What a delivery that was killed mid-work leaves: its claim (receive 2) and nothing else.
      await bed.db.withClient((c) =>
        c.query(
          "INSERT INTO core.message_attempts (consumer, message_id, job_id, started) VALUES ('award-points', $1, $2, 2)",
          [`m-${job}`, job],
        ),
      );
      expect(
        await invoke(handler, [sqsRecord(body(job), { messageId: `m-${job}`, receiveCount: 3 })]),
      ).toEqual([]);
      expect(await ledgerOf(`m-${job}`)).toMatchObject({ interruptions: 1, started: 3 });
      expect(await effectsOf(bed.db, job)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
      // A first delivery writes nothing to the ledger, and neither does a redelivery's success beyond its claim.
      const fresh = id("marker-fresh");
      expect(await invoke(handler, [sqsRecord(body(fresh), { messageId: `m-${fresh}` })])).toEqual([]);
      expect(await ledgerOf(`m-${fresh}`)).toBeUndefined();
    });

    it("a lock wait behind another delivery of the job is not a failure, even on the last attempt", async () => {
      const job = id("held");
      let release: () => void = () => {};
      const holding = new Promise<void>((resolve) => {
        release = resolve;
      });
      const holder = bed.consumer(awardWith(() => holding));
      const outcomes: string[] = [];
      const waiter = bed.consumer(
        {
          ...awardPointsConsumer,
          retry: { maxAttempts: 1, rationale: "every failure is the last attempt here" },
        },
        { lockTimeoutMs: 300, onOutcome: (o) => outcomes.push(o.status) },
      );
      const first = invoke(holder, [sqsRecord(body(job), { messageId: `m-${job}-a` })]);
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(
        await invoke(waiter, [sqsRecord(body(job), { messageId: `m-${job}-b`, receiveCount: 2 })]),
      ).toEqual([`m-${job}-b`]);
      expect(outcomes).toEqual(["held"]);
      release();
      expect(await first).toEqual([]);
      expect(await effectsOf(bed.db, job)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
      expect(await ledgerOf(`m-${job}-b`)).toMatchObject({ failures: 0, started: null });
      // Its redelivery is a duplicate.
      expect(
        await invoke(waiter, [sqsRecord(body(job), { messageId: `m-${job}-b`, receiveCount: 3 })]),
      ).toEqual([]);
      expect(await effectsOf(bed.db, job)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    });

    it("a retry that would outlive the message's retention is dead-lettered now, saying why", async () => {
      const job = id("retention");
      const retention = 4 * 86_400;
      const handler = bed.consumer(
        awardWith(() => {
          throw new Error("downstream timeout");
        }),
        { configure: { queueRetentionSeconds: retention }, random: () => 0.5 },
      );
      const record = sqsRecord(body(job), { messageId: `m-${job}` });
      // Sent 3.99 days ago: 20 s before SQS deletes it, less than the first backoff (30 s).
      const sent = Date.now() - (retention - 20) * 1000;
      const old = { ...record, attributes: { ...record.attributes, SentTimestamp: String(sent) } };
      expect(await invoke(handler, [old])).toEqual([]);
      const [row] = await deadLettersOf(job);
      expect(row).toMatchObject({ error_kind: "exhausted", attempts: 1 });
      expect(row?.last_error.message).toContain("downstream timeout");
      expect(row?.last_error.message).toMatch(/retention/);
      // A fresh message with the same failure is retried.
      const young = id("retention-young");
      expect(await invoke(handler, [sqsRecord(body(young), { messageId: `m-${young}` })])).toEqual([
        `m-${young}`,
      ]);
      expect(await deadLettersOf(young)).toEqual([]);
    });

    it("a transient failure on the queue's last receive before the backstop is dead-lettered by the harness", async () => {
      const job = id("receive-limit");
      const handler = bed.consumer(
        awardWith(() => {
          throw new Error("still down");
        }),
        { configure: { maxReceiveCount: 19 } },
      );
      expect(
        await invoke(handler, [sqsRecord(body(job), { messageId: `m-${job}`, receiveCount: 19 })]),
      ).toEqual([]);
      const [row] = await deadLettersOf(job);
      expect(row).toMatchObject({ error_kind: "exhausted", attempts: 1 });
      expect(row?.last_error.message).toMatch(/receive 19 of 19/);
    });

    it("on its last attempt, a culprit whose failure shows only at COMMIT is the only dead letter", async () => {
      const jobs = [id("commit-0"), id("commit-1"), id("commit-2")];
      const handler = bed.consumer({
        ...awardPointsConsumer,
        retry: { maxAttempts: 1, rationale: "every failure is the last attempt here" },
        work: async (job, tx) => {
          await awardPointsConsumer.work(job, tx);
          // A deferred check: the statement succeeds, the COMMIT fails.
          if (job.jobId === jobs[1]) await tx.query("INSERT INTO public.attempts_deferred VALUES (1), (1)");
        },
      });
      await bed.db.withClient((c) =>
        c.query(`CREATE TABLE IF NOT EXISTS public.attempts_deferred (v int UNIQUE DEFERRABLE INITIALLY DEFERRED);
                 GRANT INSERT ON public.attempts_deferred TO jobfence_consumer_award_points`),
      );
      await expectOnlyCulprit(bed.db, handler, jobs, 1);
    });

    it("work that swallows a failed statement is the one blamed; the batch-mates after it apply", async () => {
      const jobs = [id("swallow-0"), id("swallow-1"), id("swallow-2")];
      const handler = bed.consumer({
        ...awardPointsConsumer,
        retry: { maxAttempts: 1, rationale: "every failure is the last attempt here" },
        work: async (job, tx) => {
          if (job.jobId === jobs[1]) {
            try {
              await tx.query("SELECT 1 / 0");
            } catch {
              // swallowed: the transaction is now failed
            }
            return;
          }
          await awardPointsConsumer.work(job, tx);
        },
      });
      await expectOnlyCulprit(bed.db, handler, jobs, 1);
    });

    it("timings that do not fit together are refused at start-up, every problem named", () => {
      const refused = (configure: Record<string, unknown>) => {
        try {
          bed.consumer(awardPointsConsumer, { configure });
        } catch (error) {
          return error instanceof ConfigurationError ? error.problems : [String(error)];
        }
        return [];
      };
      expect(refused({ recordBudgetMs: 6000, returnReserveMs: 2000, lockTimeoutMs: 5000 })).toEqual([
        expect.stringMatching(/recordBudgetMs 6000 must exceed the fence lock timeout 5000 ms/),
      ]);
      // As deployed: the queue's redrive count below what the attempts and interruptions need.
      const deployed = refused({ maxReceiveCount: 8, visibilityTimeoutSeconds: 180 });
      expect(deployed.join("\n")).toMatch(/maxReceiveCount/);
      expect(refused({ maxReceiveCount: 19, visibilityTimeoutSeconds: 180 })).toEqual([]);
    });

    it("a failed statement the next record's work runs into (25P02) blames no innocent: each is redone alone", async () => {
      const jobs = [id("floating-0"), id("floating-1"), id("floating-2")];
      const handler = bed.consumer({
        ...awardPointsConsumer,
        retry: { maxAttempts: 1, rationale: "every failure is the last attempt here" },
        work: async (job, tx) => {
          if (job.jobId === jobs[0]) {
            // Not awaited: the failure reaches the server after this work has returned, so the
            // transaction still looks healthy, and the next record's first statement is refused.
            tx.query("SELECT 1 / 0").catch(() => {});
            return;
          }
          await awardPointsConsumer.work(job, tx);
        },
      });
      await expectOnlyCulprit(bed.db, handler, jobs, 0);
    });

    // Found by review: each of the following broke a guarantee of the first version.

    it("a redelivery of a message whose last attempt already failed does not run again", async () => {
      const job = id("spent");
      let healthy = false;
      const handler = bed.consumer(
        awardWith(() => {
          if (!healthy) throw new Error("downstream blip");
        }),
      );
      for (let n = 1; n <= 5; n++)
        await invoke(handler, [sqsRecord(body(job), { messageId: `m-${job}`, receiveCount: n })]);
      expect((await deadLettersOf(job)).map((r) => r.error_kind)).toEqual(["exhausted"]);
      // The dead letter committed but the ack was lost (a crash, a deadline): SQS hands it out again.
      healthy = true;
      expect(
        await invoke(handler, [sqsRecord(body(job), { messageId: `m-${job}`, receiveCount: 6 })]),
      ).toEqual([]);
      expect(await effectsOf(bed.db, job)).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
    });

    it("a second delivery of a running message waits on its fence instead of naming it interrupted", async () => {
      const job = id("concurrent");
      await bed.db.withClient((c) =>
        c.query(
          "INSERT INTO core.message_attempts (consumer, message_id, job_id, started) VALUES ('award-points', $1, $2, 2)",
          [`m-${job}`, job],
        ),
      );
      let release: () => void = () => {};
      const holding = new Promise<void>((resolve) => {
        release = resolve;
      });
      const holder = bed.consumer(awardWith(() => holding));
      const second = bed.consumer(awardPointsConsumer, { lockTimeoutMs: 300 });
      const running = invoke(holder, [sqsRecord(body(job), { messageId: `m-${job}`, receiveCount: 3 })]);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(
        await invoke(second, [sqsRecord(body(job), { messageId: `m-${job}`, receiveCount: 4 })]),
      ).toEqual([`m-${job}`]);
      release();
      expect(await running).toEqual([]);
      expect(await effectsOf(bed.db, job)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    });

    it("a deadline that finds no work running (a slow connection) counts no interruption", async () => {
      const job = id("slow-connect");
      const pool = createPool({
        connectionString: bed.db.url,
        role: consumerRoleName("award-points"),
        max: 2,
        lockTimeoutMs: 100,
      });
      // The bed ends it with the consumer's (it keeps every pool a consumer is given).
      const connect = pool.connect.bind(pool);
      let calls = 0;
      pool.connect = (async () => {
        if (calls++ === 0) await new Promise((resolve) => setTimeout(resolve, 1500));
        return connect();
      }) as typeof pool.connect;
      let ran = 0;
      const handler = bed.consumer(
        awardWith(() => {
          ran++;
        }),
        { pool, configure: { ...SHORT_INVOCATION } },
      );
      expect(
        await invokeWith(
          handler,
          [sqsRecord(body(job), { messageId: `m-${job}` })],
          lambdaContext(handler.consumer, 1100),
        ),
      ).toEqual([`m-${job}`]);
      await new Promise((resolve) => setTimeout(resolve, 1500));
      expect(ran).toBe(0);
      expect(await ledgerOf(`m-${job}`)).toBeUndefined();
      expect(await effectsOf(bed.db, job)).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
    });

    it("time running short after the batch's work still records the failures and acks what committed", async () => {
      const bad = id("short-bad");
      const slow = id("short-slow");
      const handler = bed.consumer(
        awardWith(async (jobId) => {
          if (jobId === bad) throw new Error("downstream blip");
          if (jobId === slow) await new Promise((resolve) => setTimeout(resolve, SHORT_AFTER_WORK.workMs));
        }),
        { configure: { ...SHORT_INVOCATION, recordBudgetMs: SHORT_AFTER_WORK.recordBudgetMs } },
      );
      const failed = await invokeWith(
        handler,
        [sqsRecord(body(bad), { messageId: `m-${bad}` }), sqsRecord(body(slow), { messageId: `m-${slow}` })],
        lambdaContext(handler.consumer, SHORT_AFTER_WORK.invocationMs),
      );
      expect(failed).toEqual([`m-${bad}`]);
      expect(await ledgerOf(`m-${bad}`)).toMatchObject({ failures: 1 });
      expect(await effectsOf(bed.db, slow)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    });

    it("work slower than the time left still makes progress: what ran commits, the rest comes back unrun", async () => {
      const jobs = [0, 1, 2, 3, 4].map((n) => id(`progress-${n}`));
      const handler = bed.consumer(
        awardWith(() => new Promise((resolve) => setTimeout(resolve, PROGRESS_WORK_MS))),
        {
          configure: { ...SHORT_INVOCATION, recordBudgetMs: PROGRESS_RECORD_BUDGET_MS },
        },
      );
      const failed = await invokeWith(
        handler,
        jobs.map((j) => sqsRecord(body(j), { messageId: `m-${j}` })),
        lambdaContext(handler.consumer, 3000),
      );
      let applied = 0;
      for (const job of jobs) {
        const effects = await effectsOf(bed.db, job);
        expect(effects.ledger).toBe(effects.fences);
        applied += effects.fences;
      }
      expect(applied).toBeGreaterThanOrEqual(2);
      expect(failed).toHaveLength(jobs.length - applied);
      for (const job of jobs) expect(await ledgerOf(`m-${job}`)).toBeUndefined();
    });

    it("a transaction can withdraw only the fences it inserted itself", async () => {
      const committed = id("withdraw-committed");
      await invoke(bed.consumer(awardPointsConsumer), [
        sqsRecord(body(committed), { messageId: `m-${committed}` }),
      ]);
      const own = id("withdraw-own");
      const client = await bed.pools[0]?.connect();
      if (!client) throw new Error("no pool");
      try {
        await client.query("BEGIN");
        await client.query(
          "INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, processed_at, expires_at) VALUES ($1, core.consumer_id('award-points'), 't', now(), now() + interval '1 day')",
          [own],
        );
        const { rows } = await client.query<{ n: number }>(
          "SELECT core.withdraw_own_fences('award-points', $1::text[]) AS n",
          [[own, committed]],
        );
        expect(rows[0]?.n).toBe(1);
        await client.query("COMMIT");
      } finally {
        client.release();
      }
      expect(await effectsOf(bed.db, own)).toMatchObject({ fences: 0 });
      expect(await effectsOf(bed.db, committed)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    });

    it("work that returns with a statement still running is the one blamed, never the record after it", async () => {
      const culprit = id("floating-sleep");
      const innocent = id("floating-innocent");
      const handler = bed.consumer({
        ...awardPointsConsumer,
        work: async (job, tx) => {
          if (job.jobId === culprit) {
            tx.query("SELECT pg_sleep(0.3)").catch(() => {});
            return;
          }
          await awardPointsConsumer.work(job, tx);
        },
      });
      const records = [culprit, innocent].map((j) => sqsRecord(body(j), { messageId: `m-${j}` }));
      expect(await invoke(handler, records)).toEqual([]);
      const [row] = await deadLettersOf(culprit);
      expect(row).toMatchObject({ error_kind: "hard", last_error: { class: "WorkLeftStatementsError" } });
      expect(await effectsOf(bed.db, culprit)).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
      expect(await effectsOf(bed.db, innocent)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    });

    it("a claim still running at the deadline never lands after the return", async () => {
      const job = id("slow-claim");
      const messageId = `m-${job}`;
      await bed.db.withClient((c) =>
        c.query(`CREATE OR REPLACE FUNCTION public.attempts_slow_claim() RETURNS trigger LANGUAGE plpgsql AS $$
                   BEGIN IF NEW.message_id LIKE '%slow-claim' THEN PERFORM pg_sleep(1.5); END IF; RETURN NEW; END $$;
                 DROP TRIGGER IF EXISTS attempts_slow_claim ON core.message_attempts;
                 CREATE TRIGGER attempts_slow_claim BEFORE INSERT ON core.message_attempts
                   FOR EACH ROW EXECUTE FUNCTION public.attempts_slow_claim()`),
      );
      let ran = 0;
      const handler = bed.consumer(
        awardWith(() => {
          ran++;
        }),
        { configure: { ...SHORT_INVOCATION } },
      );
      try {
        const failed = await invokeWith(
          handler,
          [sqsRecord(body(job), { messageId, receiveCount: 2 })],
          lambdaContext(handler.consumer, 1100),
        );
        expect(failed).toEqual([messageId]);
        await new Promise((resolve) => setTimeout(resolve, 1600));
        expect(await ledgerOf(messageId)).toBeUndefined();
      } finally {
        await bed.db.withClient((c) => c.query("DROP TRIGGER attempts_slow_claim ON core.message_attempts"));
      }
      expect(ran).toBe(0);
      expect(await invoke(handler, [sqsRecord(body(job), { messageId, receiveCount: 3 })])).toEqual([]);
      expect(await ledgerOf(messageId)).toMatchObject({ interruptions: 0 });
      expect(await effectsOf(bed.db, job)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    });

    it("a receive count beyond what the ledger keeps is still a delivery like any other", async () => {
      const job = id("huge-count");
      const handler = bed.consumer(awardPointsConsumer);
      const record = sqsRecord(body(job), { messageId: `m-${job}`, receiveCount: 2_147_483_648 });
      expect(await invoke(handler, [record])).toEqual([]);
      expect(await effectsOf(bed.db, job)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    });

    it("a hard failure's dead letter carries the failures before it and its own run", async () => {
      const job = id("hard-after-flaky");
      let calls = 0;
      const handler = bed.consumer(
        awardWith(() => {
          calls++;
          if (calls === 1) throw new Error("flaky");
          throw new PermanentJobError("account closed");
        }),
      );
      await invoke(handler, [sqsRecord(body(job), { messageId: `m-${job}` })]);
      expect(
        await invoke(handler, [sqsRecord(body(job), { messageId: `m-${job}`, receiveCount: 2 })]),
      ).toEqual([]);
      const [row] = await deadLettersOf(job);
      expect(row).toMatchObject({ error_kind: "hard", attempts: 2 });
      expect(row?.attempt_history.map((e) => [e.attempt, e.error.message])).toEqual([
        [1, "flaky"],
        [2, "account closed"],
      ]);
    });
  });
}
