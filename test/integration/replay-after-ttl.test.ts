/**
 * Replay can never double (issue 15, item 1): a fence is kept past its TTL while a pending dead
 * letter names its job, so a replay always finds it. The scenario that applied a job twice: a
 * poison dead letter of job J stays pending; J is applied through a corrected resend; the fence's
 * TTL passes and the cleanup runs; a bulk replay of the poison backlog then sent J again. Also the
 * race of a replay against a late retry of the same job: the fence absorbs whichever comes second.
 */
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { createPool } from "../../shared/db/pool.ts";
import { insertDeadLetter } from "../../shared/db/queries/insert-dead-letter.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { storedBody } from "../../shared/db/stored-body.ts";
import { resolveHealedDeadLetters } from "../../shared/dead-letters/escalation.ts";
import { replayDeadLetter } from "../../shared/dead-letters/replay.ts";
import { runFenceCleanup } from "../../shared/fence/cleanup.ts";
import { runBulkToEnd } from "../support/bulk.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  effectsOf,
  invoke,
  sqsRecord,
} from "../support/consumer-harness.ts";
import { insertFence } from "../support/fixtures.ts";
import { receiveAll } from "../support/sqs.ts";

let bed: ConsumerTestBed;
let opsPool: pg.Pool;
let cleanupPool: pg.Pool;
let queueUrl: string;
beforeAll(async () => {
  bed = await consumerTestBed();
  opsPool = createPool({ connectionString: bed.db.url, role: "jobfence_ops", max: 2 });
  cleanupPool = createPool({ connectionString: bed.db.url, role: "jobfence_cleanup", max: 1 });
  queueUrl = (await bed.queue("replay-after-ttl")).url;
});
afterAll(async () => {
  await opsPool?.end();
  await cleanupPool?.end();
  await bed?.close();
});

const pendingOf = (jobId: string) =>
  bed.db.withClient(async (c) => {
    const { rows } = await c.query<{ id: string; status: string; error_kind: string }>(
      "SELECT id, status, error_kind FROM core.dead_letters WHERE job_id = $1 ORDER BY created_at",
      [jobId],
    );
    return rows;
  });

/** Ages the job's fence past its TTL, as eight days would. */
const expireFence = (jobId: string) =>
  bed.db.withClient((c) =>
    c.query(
      `UPDATE core.processed_jobs
          SET processed_at = now() - interval '8 days', expires_at = now() - interval '1 day'
        WHERE job_id = $1`,
      [jobId],
    ),
  );

describe("replay after the fence's TTL", () => {
  it("a poison dead letter of a job applied by a corrected resend is never replayed into a second effect", async () => {
    const handler = bed.consumer(awardPointsConsumer, { queueUrl });
    const jobId = "ttl-poison-then-resend";
    // The first message: the envelope is readable, the payload is not what the consumer takes.
    const poison = { ...award(jobId, 10, "u-ttl"), payload: { user_id: "u-ttl", points: "ten" } };
    expect(await invoke(handler, [sqsRecord(JSON.stringify(poison))])).toEqual([]);
    expect((await pendingOf(jobId)).map((r) => r.error_kind)).toEqual(["poison"]);
    // The corrected resend applies the job.
    expect(await invoke(handler, [sqsRecord(JSON.stringify(award(jobId, 10, "u-ttl")))])).toEqual([]);
    expect(await effectsOf(bed.db, jobId)).toEqual({ ledger: 1, fences: 1, deadLetters: 1 });

    // Eight days later: the fence has expired, and the cleanup runs. The pending dead letter keeps it.
    await expireFence(jobId);
    const report = await runFenceCleanup({ db: cleanupPool, budgetMs: 10_000, pauseMs: 0 });
    expect(report.held).toBeGreaterThanOrEqual(1);
    expect(await effectsOf(bed.db, jobId)).toMatchObject({ fences: 1 });

    // A bulk replay of the poison backlog finds the fence: nothing is sent for the job.
    const result = await runBulkToEnd(
      { pool: opsPool, sqs: bed.sqs },
      { kind: "replay", filter: { consumer: "award-points", error_kind: "poison", job_id: jobId } },
    );
    expect(result).toMatchObject({ status: "completed", replayed: 0 });
    expect(result.processed).toBeGreaterThanOrEqual(1);
    const sent = await receiveAll(bed.sqs, queueUrl);
    expect(sent.filter((m) => m.Body?.includes(jobId))).toEqual([]);
    expect(await effectsOf(bed.db, jobId)).toMatchObject({ ledger: 1, fences: 1 });

    // The daily run heals it: the job is applied, the poison row is superseded.
    await resolveHealedDeadLetters(opsPool);
    expect((await pendingOf(jobId)).map((r) => r.status)).toEqual(["superseded"]);
    // Once no pending dead letter names the job, the next cleanup deletes its fence.
    await runFenceCleanup({ db: cleanupPool, budgetMs: 10_000, pauseMs: 0 });
    expect(await effectsOf(bed.db, jobId)).toMatchObject({ fences: 0, ledger: 1 });
  });

  it("an exhausted dead letter whose fence expired is superseded by its replay, not sent", async () => {
    const handler = bed.consumer(
      {
        ...awardPointsConsumer,
        retry: { maxAttempts: 1, rationale: "the first failure is the last here" },
        work: async () => {
          throw new Error("ledger down");
        },
      },
      { queueUrl },
    );
    const jobId = "ttl-exhausted-then-resend";
    expect(await invoke(handler, [sqsRecord(JSON.stringify(award(jobId, 3, "u-ttl2")))])).toEqual([]);
    const [row] = await pendingOf(jobId);
    // A resend of the job applies it (the producer retried), then the fence expires.
    await invoke(bed.consumer(awardPointsConsumer, { queueUrl }), [
      sqsRecord(JSON.stringify(award(jobId, 3, "u-ttl2"))),
    ]);
    await expireFence(jobId);
    await runFenceCleanup({ db: cleanupPool, budgetMs: 10_000, pauseMs: 0 });
    const replayed = await replayDeadLetter({ pool: opsPool, sqs: bed.sqs }, row?.id as string, "test");
    expect(replayed.status).toBe("superseded");
    expect(await effectsOf(bed.db, jobId)).toMatchObject({ ledger: 1, fences: 1 });
  });

  it("a dead letter written while the cleanup runs keeps its job's expired fence, whichever commits first", async () => {
    const consumerPool = createPool({
      connectionString: bed.db.url,
      role: consumerRoleName("award-points"),
      max: 1,
    });
    try {
      const jobId = "ttl-drain-during-cleanup";
      const body = JSON.stringify(award(jobId, 6, "u-drain"));
      await bed.db.withClient((c) => insertFence(c, jobId));
      await expireFence(jobId);
      // The backstop drain's write (it does not let the fence decide), left uncommitted.
      const writer = await consumerPool.connect();
      try {
        await writer.query("BEGIN");
        await insertDeadLetter(writer, {
          jobId,
          consumer: "award-points",
          queue: queueUrl,
          tenantId: "t_42",
          correlationId: jobId,
          body: storedBody(body),
          payloadJson: body,
          messageAttributes: {},
          attempts: 8,
          attemptHistory: [],
          errorKind: "unrecorded",
          lastError: { class: "UnrecordedMessageError", message: "found on the backstop queue" },
          jobFingerprint: null,
          fenceFingerprint: null,
          checkFence: false,
        });
        // The cleanup cannot see the dead letter yet; the write's lock on the fence keeps it.
        await runFenceCleanup({ db: cleanupPool, budgetMs: 10_000, pauseMs: 0 });
        expect(await effectsOf(bed.db, jobId)).toMatchObject({ fences: 1 });
        await writer.query("COMMIT");
      } finally {
        writer.release();
      }
      const after = await runFenceCleanup({ db: cleanupPool, budgetMs: 10_000, pauseMs: 0 });
      expect(after.held).toBeGreaterThanOrEqual(1);
      expect(await effectsOf(bed.db, jobId)).toMatchObject({ fences: 1 });
      const [row] = await pendingOf(jobId);
      const replayed = await replayDeadLetter({ pool: opsPool, sqs: bed.sqs }, row?.id as string, "test");
      expect(replayed.status).toBe("superseded");
    } finally {
      await consumerPool.end();
    }
  });

  it("a replay racing a late retry of the same job: one effect, whichever comes second is a duplicate", async () => {
    const jobId = "ttl-replay-vs-late-retry";
    let failing = true;
    const handler = bed.consumer(
      {
        ...awardPointsConsumer,
        retry: { maxAttempts: 1, rationale: "the first failure is the last here" },
        work: async (job, tx) => {
          if (failing) throw new Error("ledger down");
          await awardPointsConsumer.work(job, tx);
        },
      },
      { queueUrl },
    );
    const original = sqsRecord(JSON.stringify(award(jobId, 4, "u-race")), { messageId: `m-${jobId}` });
    expect(await invoke(handler, [original])).toEqual([]);
    const [row] = await pendingOf(jobId);
    failing = false;
    // The operator replays while the original message, its ack lost, comes back late.
    await replayDeadLetter({ pool: opsPool, sqs: bed.sqs }, row?.id as string, "test");
    const [replayedMessage] = (await receiveAll(bed.sqs, queueUrl)).filter((m) => m.Body?.includes(jobId));
    const replay = sqsRecord(replayedMessage?.Body as string, {
      messageId: replayedMessage?.MessageId as string,
    });
    const late = { ...original, attributes: { ...original.attributes, ApproximateReceiveCount: "2" } };
    const both = await Promise.all([invoke(handler, [replay]), invoke(handler, [late])]);
    expect(both.flat()).toEqual([]);
    expect(await effectsOf(bed.db, jobId)).toMatchObject({ ledger: 1, fences: 1 });
  });
});
