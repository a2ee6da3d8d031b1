/**
 * The outbox (docs/design.md §11): a follow-up the work sends is written in its fence transaction,
 * sent only if that transaction commits and at least once after it does; the relay after COMMIT
 * sends it at once, the scheduled relay (sweepOutbox) whatever was left, and a follow-up that
 * cannot be sent becomes an `undelivered` dead letter of its target, replayable like any other.
 * Against the real award-points → notify-user chain, the emulator and PostgreSQL.
 */
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import type { SendMessageBatchCommandInput, SQSClient } from "@aws-sdk/client-sqs";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { notifyUserConsumer } from "../../functions/notify-user/consumer.ts";
import { localEventBridgeClient, localSqsClient } from "../../local/aws-clients.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName, registerConsumerQueues } from "../../shared/db/queries/provision-login.ts";
import { replayDeadLetter } from "../../shared/dead-letters/replay.ts";
import { jobFingerprint } from "../../shared/envelope/fingerprint.ts";
import { deriveJobId, fifoDeduplicationId, messageGroupId, type Transaction } from "../../shared/index.ts";
import { sweepOutbox } from "../../shared/outbox/sweep.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  invoke,
  OPS_BUS,
  sqsRecord,
} from "../support/consumer-harness.ts";

let bed: ConsumerTestBed;
const pools: pg.Pool[] = [];
beforeAll(async () => {
  bed = await consumerTestBed();
});
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end()));
  await bed?.close();
});

const silentMetrics = () => new Metrics({ namespace: "jobfence", serviceName: "award-points-outbox" });
const silentLogger = () => new Logger({ serviceName: "award-points-outbox", logLevel: "SILENT" });

/** The follow-up job id award-points' work gives its notification of `parentJobId`. */
const notificationId = (parentJobId: string) => deriveJobId("notify-user", "award-points", parentJobId, 0);

const outboxRows = () =>
  bed.db.withClient(
    async (c) => (await c.query("SELECT * FROM core.outbox ORDER BY created_at, job_id")).rows,
  );

/** A pool in award-points' own role: what its scheduled relay logs in as. */
function relayPool(): pg.Pool {
  const pool = createPool({ connectionString: bed.db.url, role: consumerRoleName("award-points"), max: 2 });
  pools.push(pool);
  return pool;
}

/** One run of award-points' scheduled relay, with every row due now. */
async function sweep(
  options: { sqs?: SQSClient; queues?: Record<string, string>; maxAttempts?: number } = {},
) {
  await bed.db.withClient((c) => c.query("UPDATE core.outbox SET next_attempt_at = now()"));
  return sweepOutbox({
    pool: relayPool(),
    sqs: options.sqs ?? bed.sqs,
    eventBridge: localEventBridgeClient(bed.sink.endpoint),
    opsBusName: OPS_BUS,
    consumer: "award-points",
    queues: options.queues ?? bed.followUpQueues,
    metrics: silentMetrics(),
    logger: silentLogger(),
    ...(options.maxAttempts
      ? { retryPolicy: { maxAttempts: options.maxAttempts, baseSeconds: 30, capSeconds: 60 } }
      : {}),
  });
}

/** Makes every SendMessageBatch of `client` fail as throttled while `failing()` says so. */
function throttled(client: SQSClient, failing: () => boolean): SQSClient {
  client.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === "SendMessageBatchCommand" && failing()) {
        throw Object.assign(new Error("injected: rate exceeded"), {
          name: "ThrottlingException",
          $fault: "client",
          $retryable: { throttling: true },
          $metadata: { httpStatusCode: 400 },
          input: args.input as SendMessageBatchCommandInput,
        });
      }
      return next(args);
    },
    { step: "initialize", name: "throttle" },
  );
  return client;
}

describe("the relay after COMMIT", () => {
  it("sends an applied job's follow-up once, with a derived job id and the parent's tenant and correlation id, and leaves no row", async () => {
    const handler = bed.consumer(awardPointsConsumer);
    const before = (await bed.followUps("notify-user")).length;
    expect(await invoke(handler, [sqsRecord(JSON.stringify(award("ob-1", 7, "u-ob1")))])).toEqual([]);
    const arrived = (await bed.followUps("notify-user")).slice(before);
    expect(arrived.map((f) => f.envelope)).toEqual([
      {
        job_id: notificationId("ob-1"),
        tenant_id: "t_42",
        correlation_id: "corr-ob-1",
        payload: { user_id: "u-ob1", kind: "points-awarded", points: 7 },
      },
    ]);
    expect(await outboxRows()).toEqual([]);
    // A duplicate of the award sends nothing more: its work does not run.
    expect(await invoke(handler, [sqsRecord(JSON.stringify(award("ob-1", 7, "u-ob1")))])).toEqual([]);
    expect((await bed.followUps("notify-user")).slice(before)).toHaveLength(1);
  });

  it("the follow-up applies in notify-user, and a second copy of it is absorbed by notify-user's fence", async () => {
    const awards = bed.consumer(awardPointsConsumer);
    const notifications = bed.consumer(notifyUserConsumer);
    const before = (await bed.followUps("notify-user")).length;
    await invoke(awards, [sqsRecord(JSON.stringify(award("ob-chain", 3, "u-chain")))]);
    const [followUp] = (await bed.followUps("notify-user")).slice(before);
    const body = JSON.stringify(followUp?.envelope);
    // The relay sent it twice (a crash between its send and its DELETE): one notification.
    expect(await invoke(notifications, [sqsRecord(body), sqsRecord(body)])).toEqual([]);
    const rows = await bed.db.withClient(
      async (c) =>
        (
          await c.query(
            "SELECT user_id, points, correlation_id FROM notify_user.notifications WHERE job_id = $1",
            [notificationId("ob-chain")],
          )
        ).rows,
    );
    expect(rows).toEqual([{ user_id: "u-chain", points: 3, correlation_id: "corr-ob-chain" }]);
  });

  it("a job whose transaction rolls back sends nothing: a retried failure, a hard failure, a statement that fails after the send", async () => {
    const failing = bed.consumer({
      ...awardPointsConsumer,
      work: async (job, tx: Transaction<typeof awardPointsConsumer.sends>) => {
        await awardPointsConsumer.work(job, tx);
        if (job.jobId === "ob-rb-transient") throw new Error("the ledger service blinked");
        if (job.jobId === "ob-rb-hard")
          throw new (await import("../../shared/index.ts")).PermanentJobError("no");
        if (job.jobId === "ob-rb-sql") await tx.query("SELECT 1 / 0");
      },
    });
    const before = (await bed.followUps("notify-user")).length;
    const records = ["ob-rb-transient", "ob-rb-hard", "ob-rb-sql"].map((id) =>
      sqsRecord(JSON.stringify(award(id, 2)), { messageId: id }),
    );
    const failed = await invoke(failing, records);
    expect(failed.sort()).toEqual(["ob-rb-sql", "ob-rb-transient"]);
    expect(await outboxRows()).toEqual([]);
    expect((await bed.followUps("notify-user")).slice(before)).toEqual([]);
  });

  it("batch-commit mode writes the batch's follow-ups in its one transaction and sends only the committed records'", async () => {
    const batch = bed.consumer({
      ...awardPointsConsumer,
      commitMode: "batch",
      work: async (job, tx: Transaction<typeof awardPointsConsumer.sends>) => {
        await awardPointsConsumer.work(job, tx);
        if (job.jobId === "ob-b-3") throw new Error("transient, after its send");
      },
    });
    const before = (await bed.followUps("notify-user")).length;
    const ids = ["ob-b-1", "ob-b-2", "ob-b-3", "ob-b-4"];
    const failed = await invoke(
      batch,
      ids.map((id) => sqsRecord(JSON.stringify(award(id, 1)), { messageId: id })),
    );
    expect(failed).toEqual(["ob-b-3"]);
    const sent = (await bed.followUps("notify-user")).slice(before).map((f) => f.envelope.job_id);
    expect(sent.sort()).toEqual(["ob-b-1", "ob-b-2", "ob-b-4"].map(notificationId).sort());
    expect(await outboxRows()).toEqual([]);
  });

  it("several follow-ups of one job get keys of their own; a repeated key, an undeclared target, a payload the target refuses and an oversize message fail the job hard with nothing committed", async () => {
    // A second target whose schema takes anything: only SQS's size limit can refuse its follow-up.
    const wideSends = { ...awardPointsConsumer.sends, big: z.object({ blob: z.string() }) };
    const fanOut = bed.consumer(
      {
        ...awardPointsConsumer,
        sends: wideSends,
        work: async (job, tx: Transaction<typeof wideSends>) => {
          const notify = (key?: string | number, points = 1) =>
            tx.send("notify-user", {
              payload: { user_id: job.payload.user_id, kind: "points-awarded", points },
              ...(key === undefined ? {} : { key }),
            });
          if (job.jobId === "ob-fan") {
            notify();
            notify();
            notify("summary");
            return;
          }
          await awardPointsConsumer.work(job, tx);
          if (job.jobId === "ob-bad-key") notify("summary") && notify("summary");
          if (job.jobId === "ob-bad-target")
            (tx.send as (t: string, f: unknown) => string)("award-points", { payload: {} });
          if (job.jobId === "ob-bad-payload") notify(undefined, -1);
          if (job.jobId === "ob-too-big")
            (tx.send as (t: string, f: unknown) => string)("big", {
              payload: { blob: "x".repeat(1_048_576) },
            });
        },
      },
      {
        configure: {
          outboxQueues: { ...bed.followUpQueues, big: bed.followUpQueues["notify-user"] as string },
        },
      },
    );
    const before = (await bed.followUps("notify-user")).length;
    const bad = ["ob-bad-key", "ob-bad-target", "ob-bad-payload", "ob-too-big"];
    expect(
      await invoke(
        fanOut,
        ["ob-fan", ...bad].map((id) => sqsRecord(JSON.stringify(award(id, 2)), { messageId: id })),
      ),
    ).toEqual([]);
    const sent = (await bed.followUps("notify-user")).slice(before).map((f) => f.envelope.job_id);
    expect(sent.sort()).toEqual(
      [0, 1, "summary"].map((key) => deriveJobId("notify-user", "award-points", "ob-fan", key)).sort(),
    );
    const dead = await bed.db.withClient(
      async (c) =>
        (
          await c.query<{ job_id: string; error_kind: string; class: string; message: string }>(
            `SELECT job_id, error_kind, last_error->>'class' AS class, last_error->>'message' AS message
               FROM core.dead_letters WHERE job_id = ANY($1) ORDER BY job_id`,
            [bad],
          )
        ).rows,
    );
    expect(dead.map((d) => [d.job_id, d.error_kind, d.class])).toEqual(
      [...bad].sort().map((id) => [id, "hard", "FollowUpRefusedError"]),
    );
    expect(dead.find((d) => d.job_id === "ob-bad-target")?.message).toMatch(/not a target of "award-points"/);
    expect(dead.find((d) => d.job_id === "ob-bad-payload")?.message).toMatch(/payload\.points/);
    expect(dead.find((d) => d.job_id === "ob-too-big")?.message).toMatch(/bytes as SQS counts them/);
    // Nothing of theirs committed: no ledger entry, no outbox row.
    const ledger = await bed.db.withClient(
      async (c) =>
        (await c.query("SELECT job_id FROM award_points.ledger WHERE job_id = ANY($1)", [bad])).rows,
    );
    expect(ledger).toEqual([]);
    expect(await outboxRows()).toEqual([]);
  });

  it("a consumer whose definition declares no target refuses every send, and is refused at start-up when given queues anyway", async () => {
    const plain = bed.consumer({
      name: "award-points",
      payload: awardPointsConsumer.payload,
      work: async (_job, tx) => {
        (tx.send as (t: string, f: unknown) => string)("notify-user", { payload: {} });
      },
    });
    expect(await invoke(plain, [sqsRecord(JSON.stringify(award("ob-undeclared", 1)))])).toEqual([]);
    const row = await bed.db.withClient(
      async (c) =>
        (
          await c.query(
            "SELECT error_kind, last_error->>'message' AS m FROM core.dead_letters WHERE job_id = 'ob-undeclared'",
          )
        ).rows[0],
    );
    expect(row).toMatchObject({ error_kind: "hard", m: expect.stringMatching(/declares no follow-ups/) });
    expect(() =>
      bed.consumer(
        { name: "award-points", payload: awardPointsConsumer.payload, work: async () => {} },
        { configure: { outboxQueues: bed.followUpQueues } },
      ),
    ).toThrow(/outboxQueues: "notify-user" is not a target/);
    expect(() => bed.consumer(awardPointsConsumer, { configure: { outboxQueues: {} } })).toThrow(
      /sends: "notify-user" has no queue URL/,
    );
  });

  it("a FIFO target gets the author's message group, or the follow-up's tenant, and a deduplication id from its job id and fingerprint", async () => {
    const fifo = await bed.queue("notify-user-fifo-target.fifo", { FifoQueue: "true" });
    const grouped = bed.consumer(
      {
        ...awardPointsConsumer,
        work: async (job, tx: Transaction<typeof awardPointsConsumer.sends>) => {
          tx.send("notify-user", {
            payload: { user_id: job.payload.user_id, kind: "points-awarded", points: 1 },
            ...(job.jobId === "ob-fifo-1" ? { groupId: "user-u-f" } : {}),
          });
        },
      },
      { configure: { outboxQueues: { "notify-user": fifo.url } } },
    );
    await invoke(
      grouped,
      ["ob-fifo-1", "ob-fifo-2"].map((id) => sqsRecord(JSON.stringify(award(id, 1)))),
    );
    const { ReceiveMessageCommand } = await import("@aws-sdk/client-sqs");
    const seen: { group?: string; dedup?: string; jobId: string }[] = [];
    for (let i = 0; i < 4 && seen.length < 2; i++) {
      const { Messages = [] } = await bed.sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: fifo.url,
          MaxNumberOfMessages: 10,
          MessageSystemAttributeNames: ["MessageGroupId", "MessageDeduplicationId"],
        }),
      );
      for (const m of Messages) {
        const body = JSON.parse(m.Body ?? "{}");
        expect(m.Attributes?.MessageDeduplicationId).toBe(
          fifoDeduplicationId(body.job_id, jobFingerprint(body.tenant_id, body.payload)),
        );
        seen.push({
          group: m.Attributes?.MessageGroupId,
          dedup: m.Attributes?.MessageDeduplicationId?.split(":").slice(0, -1).join(":"),
          jobId: body.job_id,
        });
      }
    }
    expect(seen.sort((a, b) => a.jobId.localeCompare(b.jobId))).toEqual(
      [
        { group: "user-u-f", dedup: notificationId("ob-fifo-1"), jobId: notificationId("ob-fifo-1") },
        { group: "t_42", dedup: notificationId("ob-fifo-2"), jobId: notificationId("ob-fifo-2") },
      ].sort((a, b) => a.jobId.localeCompare(b.jobId)),
    );
  });
});

describe("the scheduled relay", () => {
  it("sends what the relay after COMMIT could not, then deletes it", async () => {
    let down = true;
    const flaky = throttled(localSqsClient(bed.emulator.endpoint), () => down);
    const handler = bed.consumer(awardPointsConsumer, { sqs: flaky });
    const before = (await bed.followUps("notify-user")).length;
    expect(await invoke(handler, [sqsRecord(JSON.stringify(award("ob-left", 5)))])).toEqual([]);
    // The award committed; its follow-up waits in the outbox, not yet due.
    expect((await outboxRows()).map((r) => [r.job_id, r.attempts])).toEqual([[notificationId("ob-left"), 0]]);
    down = false;
    expect(await sweep()).toMatchObject({ sent: 1, retried: 0, undelivered: [], rows: 0 });
    expect((await bed.followUps("notify-user")).slice(before).map((f) => f.envelope.job_id)).toEqual([
      notificationId("ob-left"),
    ]);
    expect(await outboxRows()).toEqual([]);
    flaky.destroy();
  });

  it("reschedules a send that may pass, and after its last attempt moves the row to the dead letters as undelivered (alerted, replayable to the target)", async () => {
    const down = true;
    const flaky = throttled(localSqsClient(bed.emulator.endpoint), () => down);
    const handler = bed.consumer(awardPointsConsumer, { sqs: flaky });
    await invoke(handler, [sqsRecord(JSON.stringify(award("ob-undelivered", 9, "u-ud")))]);
    const first = await sweep({ sqs: flaky, maxAttempts: 2 });
    expect(first).toMatchObject({ sent: 0, retried: 1, undelivered: [], rows: 1 });
    const [row] = await outboxRows();
    expect(row).toMatchObject({ attempts: 1, last_error: { class: "ThrottlingException" } });
    expect(row.next_attempt_at.getTime()).toBeGreaterThan(Date.now() + 10_000);
    const alertsBefore = bed.sink.events.length;
    const second = await sweep({ sqs: flaky, maxAttempts: 2 });
    expect(second).toMatchObject({ sent: 0, retried: 0, rows: 0 });
    expect(second.undelivered).toHaveLength(1);
    expect(await outboxRows()).toEqual([]);
    const dead = await bed.db.withClient(
      async (c) =>
        (
          await c.query("SELECT * FROM core.dead_letters WHERE job_id = $1", [
            notificationId("ob-undelivered"),
          ])
        ).rows,
    );
    expect(dead).toMatchObject([
      {
        consumer: "notify-user",
        queue: bed.followUpQueues["notify-user"],
        error_kind: "undelivered",
        status: "pending_review",
        attempts: 2,
        tenant_id: "t_42",
        correlation_id: "corr-ob-undelivered",
        payload: { user_id: "u-ud", kind: "points-awarded", points: 9 },
        message_attributes: { parent: { consumer: "award-points", job_id: "ob-undelivered" } },
        last_error: { class: "ThrottlingException" },
      },
    ]);
    expect(bed.sink.events.slice(alertsBefore).map((e) => e.detail)).toMatchObject([
      { consumer: "notify-user", error_kind: "undelivered", job_id: notificationId("ob-undelivered") },
    ]);
    // Replayed like any dead letter: to notify-user's queue, where its consumer applies it once.
    const ops = createPool({ connectionString: bed.db.url, role: "jobfence_ops", max: 1 });
    pools.push(ops);
    const before = (await bed.followUps("notify-user")).length;
    await replayDeadLetter({ pool: ops, sqs: bed.sqs }, dead[0].id, "ops@example.com");
    const [replayed] = (await bed.followUps("notify-user")).slice(before);
    expect(replayed?.envelope.job_id).toBe(notificationId("ob-undelivered"));
    expect(
      await invoke(bed.consumer(notifyUserConsumer), [sqsRecord(JSON.stringify(replayed?.envelope))]),
    ).toEqual([]);
    flaky.destroy();
  });

  it("a send SQS refuses as the sender's fault is undelivered at once", async () => {
    const gone = `${bed.emulator.endpoint}/000000000000/no-such-queue`;
    const handler = bed.consumer(awardPointsConsumer, {
      configure: { outboxQueues: { "notify-user": gone } },
    });
    await invoke(handler, [sqsRecord(JSON.stringify(award("ob-gone", 1)))]);
    const report = await sweep({ queues: { "notify-user": gone } });
    expect(report.undelivered).toHaveLength(1);
    const [dead] = await bed.db.withClient(
      async (c) =>
        (
          await c.query("SELECT error_kind, attempts, queue FROM core.dead_letters WHERE job_id = $1", [
            notificationId("ob-gone"),
          ])
        ).rows,
    );
    expect(dead).toEqual({ error_kind: "undelivered", attempts: 1, queue: gone });
  });

  it("an undelivered follow-up to a FIFO target keeps the message group it was sent with, as SQS took it", async () => {
    const gone = `${bed.emulator.endpoint}/000000000000/no-such-queue.fifo`;
    const grouped = bed.consumer(
      {
        ...awardPointsConsumer,
        work: async (job, tx: Transaction<typeof awardPointsConsumer.sends>) => {
          tx.send("notify-user", {
            payload: { user_id: job.payload.user_id, kind: "points-awarded", points: 1 },
            // Not SQS text (a space): sent under its hash, and so kept.
            ...(job.jobId === "ob-fifo-gone-1" ? { groupId: "user one" } : {}),
          });
        },
      },
      { configure: { outboxQueues: { "notify-user": gone } } },
    );
    await invoke(
      grouped,
      ["ob-fifo-gone-1", "ob-fifo-gone-2"].map((id) => sqsRecord(JSON.stringify(award(id, 1)))),
    );
    await sweep({ queues: { "notify-user": gone } });
    const groups = await bed.db.withClient(
      async (c) =>
        (
          await c.query<{ job_id: string; group: string }>(
            "SELECT job_id, message_attributes->>'message_group_id' AS group FROM core.dead_letters WHERE job_id = ANY($1)",
            [["ob-fifo-gone-1", "ob-fifo-gone-2"].map(notificationId)],
          )
        ).rows,
    );
    expect(Object.fromEntries(groups.map((g) => [g.job_id, g.group]))).toEqual({
      [notificationId("ob-fifo-gone-1")]: messageGroupId("t_42", "user one"),
      [notificationId("ob-fifo-gone-2")]: "t_42",
    });
    expect(messageGroupId("t_42", "user one")).toMatch(/^sha256:/);
  });

  it("two relays at once never take the same row (FOR UPDATE SKIP LOCKED): every follow-up sent once", async () => {
    const down = { value: true };
    const flaky = throttled(localSqsClient(bed.emulator.endpoint), () => down.value);
    const handler = bed.consumer(awardPointsConsumer, { sqs: flaky });
    const ids = Array.from({ length: 40 }, (_, i) => `ob-race-${i}`);
    for (let i = 0; i < ids.length; i += 10)
      await invoke(
        handler,
        ids.slice(i, i + 10).map((id) => sqsRecord(JSON.stringify(award(id, 1)))),
      );
    expect(await outboxRows()).toHaveLength(40);
    down.value = false;
    const before = (await bed.followUps("notify-user")).length;
    await bed.db.withClient((c) => c.query("UPDATE core.outbox SET next_attempt_at = now()"));
    const run = () =>
      sweepOutbox({
        pool: relayPool(),
        sqs: bed.sqs,
        eventBridge: localEventBridgeClient(bed.sink.endpoint),
        opsBusName: OPS_BUS,
        consumer: "award-points",
        queues: bed.followUpQueues,
        metrics: silentMetrics(),
        logger: silentLogger(),
        batchSize: 5,
      });
    const reports = await Promise.all([run(), run(), run()]);
    expect(reports.reduce((n, r) => n + r.sent, 0)).toBe(40);
    const sent = (await bed.followUps("notify-user")).slice(before).map((f) => f.envelope.job_id);
    expect(sent.sort()).toEqual(ids.map(notificationId).sort());
    expect(await outboxRows()).toEqual([]);
    flaky.destroy();
  });
});

describe("what a bad row, a bad payload or a caught refusal cannot do", () => {
  it("a payload holding U+FFFF (which SQS refuses raw) is written escaped: the same JSON, the same value downstream", async () => {
    const before = (await bed.followUps("notify-user")).length;
    await invoke(bed.consumer(awardPointsConsumer), [
      sqsRecord(JSON.stringify(award("ob-ffff", 1, "u-\uffff\ufffe"))),
    ]);
    const [row] = await bed.db.withClient(
      async (c) =>
        (await c.query<{ body: string }>("SELECT body FROM core.outbox WHERE parent_job_id = 'ob-ffff'"))
          .rows,
    );
    // Sent already: nothing left; what arrived parses to the user id as it was.
    expect(row).toBeUndefined();
    const [arrived] = (await bed.followUps("notify-user")).slice(before);
    expect((arrived?.envelope.payload as { user_id?: string } | undefined)?.user_id).toBe("u-\uffff\ufffe");
    const staged = await import("../../shared/outbox/follow-up.ts");
    const body = staged.stagedFollowUp(
      { consumer: "award-points", sends: awardPointsConsumer.sends },
      { jobId: "p", tenantId: "t", correlationId: "c", payload: {} },
      "notify-user",
      { payload: { user_id: "u-\uffff", kind: "points-awarded", points: 1 } },
      0,
      null,
    ).body;
    expect(body).not.toMatch(/[\uFFFE\uFFFF]/);
    expect(body).toContain("\\uffff");
  });

  it("a work that catches a refused send still fails hard, and commits nothing", async () => {
    const catching = bed.consumer({
      ...awardPointsConsumer,
      work: async (job, tx: Transaction<typeof awardPointsConsumer.sends>) => {
        await awardPointsConsumer.work(job, tx);
        try {
          tx.send("notify-user", {
            payload: { user_id: "u", kind: "points-awarded", points: -1 },
            key: "bad",
          });
        } catch {
          // swallowed: the job must not commit as if the follow-up had been sent
        }
      },
    });
    expect(await invoke(catching, [sqsRecord(JSON.stringify(award("ob-caught", 1)))])).toEqual([]);
    const [dead] = await bed.db.withClient(
      async (c) =>
        (
          await c.query(
            "SELECT error_kind, last_error->>'class' AS class FROM core.dead_letters WHERE job_id = 'ob-caught'",
          )
        ).rows,
    );
    expect(dead).toEqual({ error_kind: "hard", class: "FollowUpRefusedError" });
    const ledger = await bed.db.withClient(
      async (c) => (await c.query("SELECT 1 FROM award_points.ledger WHERE job_id = 'ob-caught'")).rowCount,
    );
    expect(ledger).toBe(0);
    expect(await outboxRows()).toEqual([]);
  });

  it("a row that is not the harness's (its body not its job's envelope) fails alone; its round-mates are sent", async () => {
    let down = true;
    const flaky = throttled(localSqsClient(bed.emulator.endpoint), () => down);
    await invoke(bed.consumer(awardPointsConsumer, { sqs: flaky }), [
      sqsRecord(JSON.stringify(award("ob-mate-1", 1))),
      sqsRecord(JSON.stringify(award("ob-mate-2", 1))),
    ]);
    down = false;
    await bed.db.withClient((c) =>
      c.query(
        `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint)
         VALUES ('award-points', 'p', 'notify-user', 'ob-not-ours', 't', 'c', '{"job_id":"other","payload":{}}', '\\x00112233445566778899aabbccddeeff')`,
      ),
    );
    const before = (await bed.followUps("notify-user")).length;
    const report = await sweep();
    expect(report.sent).toBe(2);
    expect(report.undelivered.map((u) => u.key.jobId)).toEqual(["ob-not-ours"]);
    expect(
      (await bed.followUps("notify-user"))
        .slice(before)
        .map((f) => f.envelope.job_id)
        .sort(),
    ).toEqual(["ob-mate-1", "ob-mate-2"].map(notificationId).sort());
    expect(await outboxRows()).toEqual([]);
    flaky.destroy();
  });

  it("a row the database will not move (its queue registered for another consumer) is rescheduled, and its round goes on", async () => {
    const foreign = await bed.queue("ob-foreign-queue");
    await bed.db.withClient((c) => registerConsumerQueues(c, "award-points", [foreign.url]));
    try {
      // Sent to award-points' own queue by a misconfiguration, refused as the sender's fault (the
      // emulator takes it, so the refusal is injected): the move to notify-user's dead letters is refused.
      const refusing = localSqsClient(bed.emulator.endpoint);
      refusing.middlewareStack.add(
        (next, context) => async (args) => {
          if (context.commandName !== "SendMessageBatchCommand") return next(args);
          const entries = (args.input as SendMessageBatchCommandInput).Entries ?? [];
          return {
            output: {
              Successful: [],
              Failed: entries.map((e) => ({
                Id: e.Id,
                SenderFault: true,
                Code: "InvalidMessageContents",
                Message: "no",
              })),
              $metadata: {},
            },
            response: {},
          } as never;
        },
        { step: "initialize", name: "refuse" },
      );
      const handler = bed.consumer(awardPointsConsumer, {
        sqs: refusing,
        configure: { outboxQueues: { "notify-user": foreign.url } },
      });
      await invoke(handler, [sqsRecord(JSON.stringify(award("ob-foreign", 1)))]);
      const report = await sweep({ sqs: refusing, queues: { "notify-user": foreign.url } });
      expect(report).toMatchObject({ undelivered: [], retried: 1 });
      const [row] = await outboxRows();
      expect(row).toMatchObject({ job_id: notificationId("ob-foreign"), attempts: 1 });
      expect(row.last_error.message).toMatch(
        /not moved to the dead letters: queue .* is not one registered for consumer notify-user/,
      );
      refusing.destroy();
    } finally {
      await bed.db.withClient(async (c) => {
        await c.query("DELETE FROM core.outbox WHERE parent_job_id = 'ob-foreign'");
        await c.query("UPDATE core.consumer_roles SET queues = '{}' WHERE consumer = 'award-points'");
      });
    }
  });

  it("another consumer's row under a follow-up's key does not block the job that sends it", async () => {
    await bed.db.withClient((c) =>
      c.query(
        `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint)
         VALUES ('notify-user', 'p', 'notify-user', $1, 't', 'c', '{}', '\\x00112233445566778899aabbccddeeff')`,
        [notificationId("ob-squatted")],
      ),
    );
    try {
      expect(
        await invoke(bed.consumer(awardPointsConsumer), [sqsRecord(JSON.stringify(award("ob-squatted", 1)))]),
      ).toEqual([]);
      const ledger = await bed.db.withClient(
        async (c) =>
          (await c.query("SELECT 1 FROM award_points.ledger WHERE job_id = 'ob-squatted'")).rowCount,
      );
      expect(ledger).toBe(1);
    } finally {
      await bed.db.withClient((c) => c.query("DELETE FROM core.outbox WHERE consumer = 'notify-user'"));
    }
  });

  it("a row can name only a registered consumer as its target, and move only to a queue not registered for another", async () => {
    const insert = (target: string) =>
      bed.db.withClient((c) =>
        c.query(
          `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint)
           VALUES ('award-points', 'p', $1, 'ob-ghost', 't', 'c', '{}', '\\x00112233445566778899aabbccddeeff')`,
          [target],
        ),
      );
    await expect(insert("ghost")).rejects.toThrow(/outbox_target_registered/);
    const own = await bed.queue("ob-award-own");
    await bed.db.withClient((c) => registerConsumerQueues(c, "award-points", [own.url]));
    try {
      await insert("notify-user");
      // Moved only by the relay transaction that claimed it (migration 0019).
      await bed.db.withClient((c) => c.query("UPDATE core.outbox SET next_attempt_at = now()"));
      await expect(
        bed.db.withClient(async (c) => {
          await c.query("BEGIN");
          try {
            await c.query("SELECT * FROM core.outbox_claim('award-points', 100)");
            return await c.query(
              "SELECT * FROM core.outbox_undelivered('award-points', 'notify-user', 'ob-ghost', $1, NULL, $2::jsonb)",
              [own.url, JSON.stringify({ class: "X", message: "y" })],
            );
          } finally {
            await c.query("ROLLBACK");
          }
        }),
      ).rejects.toThrow(/is not one registered for consumer notify-user/);
      // The same rule guards every replay: a dead letter of notify-user naming award-points' queue.
      const allowed = await bed.db.withClient(
        async (c) =>
          (
            await c.query<{ ok: boolean }>("SELECT core.replay_queue_allowed('notify-user', $1) AS ok", [
              own.url,
            ])
          ).rows[0]?.ok,
      );
      expect(allowed).toBe(false);
    } finally {
      await bed.db.withClient(async (c) => {
        await c.query("DELETE FROM core.outbox WHERE job_id = 'ob-ghost'");
        await c.query("UPDATE core.consumer_roles SET queues = '{}' WHERE consumer = 'award-points'");
      });
    }
  });
});

describe("the outbox's invariants, in the database", () => {
  it("a consumer's login reaches only its own rows, and may move to the dead letters only its own", async () => {
    await bed.db.withClient(async (c) => {
      await c.query(
        `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint)
         VALUES ('award-points', 'p', 'notify-user', 'ob-rls', 't', 'c', '{"payload":{}}', '\\x00112233445566778899aabbccddeeff')`,
      );
    });
    // A real login of notify-user's (a superuser's session is a member of every role).
    const role = await bed.consumerRole("notify-user");
    const login = `jft_ob_${Date.now().toString(36)}`;
    await bed.db.withClient(async (c) => {
      await c.query(`CREATE ROLE ${login} LOGIN PASSWORD 'pw-ob'`);
      await c.query(`GRANT ${role} TO ${login}`);
    });
    const url = new URL(bed.db.url);
    url.username = login;
    url.password = "pw-ob";
    const other = new pg.Client({ connectionString: url.toString() });
    await other.connect();
    try {
      expect((await other.query("SELECT * FROM core.outbox")).rows).toEqual([]);
      // No consumer may delete outbox rows at all, its own included (migration 0019).
      await expect(other.query("DELETE FROM core.outbox")).rejects.toThrow(/permission denied/);
      expect(
        (
          await other.query(
            "SELECT * FROM core.outbox_undelivered('award-points', 'notify-user', 'ob-rls', $1, NULL, $2::jsonb)",
            [bed.followUpQueues["notify-user"], JSON.stringify({ class: "X", message: "y" })],
          )
        ).rows,
      ).toEqual([]);
      await expect(
        other.query(
          `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint)
           VALUES ('award-points', 'p', 'notify-user', 'ob-forged', 't', 'c', '{}', '\\x00112233445566778899aabbccddeeff')`,
        ),
      ).rejects.toThrow(/row-level security/);
    } finally {
      await other.end();
      await bed.db.withClient(async (c) => {
        await c.query(`DROP ROLE ${login}`);
        await c.query("DELETE FROM core.outbox WHERE job_id = 'ob-rls'");
      });
    }
    expect(await outboxRows()).toEqual([]);
  });

  it("the database refuses a row SQS could not carry or that names no consumer", async () => {
    const insert = (overrides: Record<string, string>) =>
      bed.db.withClient((c) =>
        c.query(
          `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint)
           VALUES ($1, 'p', $2, 'ob-check', 't', 'c', $3, '\\x00112233445566778899aabbccddeeff')`,
          [overrides.consumer ?? "award-points", overrides.target ?? "notify-user", overrides.body ?? "{}"],
        ),
      );
    await expect(insert({ body: "x".repeat(1_048_577) })).rejects.toThrow(/outbox_body_size/);
    await expect(insert({ target: "Notify User" })).rejects.toThrow(/outbox_target_name/);
    await expect(insert({ consumer: "" })).rejects.toThrow(/outbox_consumer_name/);
  });

  it("a job that sends nothing writes nothing to the outbox and sends no statement for it", async () => {
    const statements: string[] = [];
    // Ended by the bed, which ends every consumer's pool.
    const pool = createPool({ connectionString: bed.db.url, role: consumerRoleName("award-points"), max: 1 });
    pool.on("connect", (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
        const [text] = args;
        statements.push(typeof text === "string" ? text : String((text as { text?: unknown })?.text));
        return query(...args);
      };
    });
    const silent = bed.consumer(
      { name: "award-points", payload: awardPointsConsumer.payload, work: async () => {} },
      { pool },
    );
    statements.length = 0;
    expect(await invoke(silent, [sqsRecord(JSON.stringify(award("ob-silent", 1)))])).toEqual([]);
    expect(statements.some((s) => /outbox/i.test(s))).toBe(false);
    // BEGIN + fence in one, the COMMIT with its check in another: nothing else.
    expect(statements).toHaveLength(2);
  });

  it("a job that sends a follow-up adds one statement before the COMMIT and one after it, checks included", async () => {
    const statements: string[] = [];
    const pool = createPool({ connectionString: bed.db.url, role: consumerRoleName("award-points"), max: 1 });
    pool.on("connect", (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
        const [text] = args;
        statements.push(typeof text === "string" ? text : String((text as { text?: unknown })?.text));
        return query(...args);
      };
    });
    const sending = bed.consumer(awardPointsConsumer, { pool });
    statements.length = 0;
    expect(await invoke(sending, [sqsRecord(JSON.stringify(award("ob-one-send", 1)))])).toEqual([]);
    // BEGIN + fence; the work's own statements; the follow-up's insert (its provenance checked by the
    // row policy, no statement of its own); the COMMIT; and the delete after it, through core.outbox_sent.
    const outbox = statements.filter((s) => /outbox/i.test(s));
    expect(outbox).toHaveLength(2);
    expect(outbox[0]).toMatch(/INSERT INTO core\.outbox/);
    expect(outbox[1]).toMatch(/core\.outbox_sent/);
    expect(await outboxRows()).toEqual([]);
  });
});
