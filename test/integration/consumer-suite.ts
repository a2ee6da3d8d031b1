/**
 * The consumer harness end to end against real PostgreSQL (as the least-privileged consumer role),
 * the fauxqs SQS emulator and the EventBridge sink. Acceptance tests are named by criterion. The
 * suite runs once per commit mode (consumer.test.ts, consumer-batch-commit.test.ts), each file on
 * its own database: every guarantee holds in both.
 */
import { ChangeMessageVisibilityCommand } from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { awardPointsConsumer, type awardPointsPayload } from "../../functions/award-points/consumer.ts";
import { localSqsClient } from "../../local/aws-clients.ts";
import { pollOnce, type QueueSource } from "../../local/event-source.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import type { CommitMode, ConsumerDefinition, HostedConsumer } from "../../shared/consumer.ts";
import { bodyOf, type StoredBodyColumns } from "../../shared/db/stored-body.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import { DEFAULT_RETRY_POLICY, retryDelaySeconds } from "../../shared/retry/policy.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  effectsOf,
  invoke,
  OPS_BUS,
  rowCounts,
  sqsRecord,
} from "../support/consumer-harness.ts";
import { messagesIn, sendMessage } from "../support/sqs.ts";

/** Defines the consumer suite for `commitMode`. */
export function consumerSuite(commitMode: CommitMode): void {
  let bed: ConsumerTestBed;
  beforeAll(async () => {
    bed = await consumerTestBed({ commitMode });
    await bed.db.withClient(async (c) => {
      // A table whose unique constraint is checked at COMMIT: lets a test make COMMIT itself fail.
      await c.query(`CREATE TABLE public.deferred_check (id int, CONSTRAINT deferred_unique UNIQUE (id) DEFERRABLE INITIALLY DEFERRED);
                     GRANT INSERT ON public.deferred_check TO jobfence_consumer_award_points;`);
    });
  });
  afterAll(async () => {
    await bed?.close();
  });
  beforeEach(() => {
    bed.sink.setMode("accept");
  });

  type AwardDefinition = ConsumerDefinition<typeof awardPointsPayload>;

  /** award-points with its work wrapped: `before` runs first on the same transaction. */
  function awardWith(
    before: (
      job: Parameters<AwardDefinition["work"]>[0],
      tx: Parameters<AwardDefinition["work"]>[1],
    ) => Promise<void>,
  ): AwardDefinition {
    return {
      ...awardPointsConsumer,
      work: async (job, tx) => {
        await before(job, tx);
        await awardPointsConsumer.work(job, tx);
      },
    };
  }

  async function deadLetter(jobId: string): Promise<Record<string, unknown> | undefined> {
    return bed.db.withClient(async (c) => {
      const { rows } = await c.query("SELECT * FROM core.dead_letters WHERE job_id = $1", [jobId]);
      expect(rows.length).toBeLessThanOrEqual(1);
      return rows[0];
    });
  }

  async function balance(userId: string, tenantId = "t_42"): Promise<number> {
    return bed.db.withClient(async (c) => {
      const { rows } = await c.query(
        "SELECT balance FROM award_points.balances WHERE tenant_id = $1 AND user_id = $2",
        [tenantId, userId],
      );
      return rows[0] ? Number(rows[0].balance) : 0;
    });
  }

  describe("applying a job", () => {
    it("commits the ledger entry, the balance and the fence, and acks", async () => {
      const handler = bed.consumer(awardPointsConsumer);
      const failures = await invoke(handler, [sqsRecord(JSON.stringify(award("apply-1", 25, "u-apply")))]);
      expect(failures).toEqual([]);
      expect(await effectsOf(bed.db, "apply-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
      expect(await balance("u-apply")).toBe(25);
      const fence = await bed.db.withClient(
        async (c) =>
          (
            await c.query(
              `SELECT tenant_id, extract(epoch FROM expires_at - processed_at)::float8 AS ttl,
                      expires_at = date_trunc('minute', expires_at) AS whole_minute
                 FROM core.processed_jobs WHERE job_id = 'apply-1'`,
            )
          ).rows[0],
      );
      expect(fence.tenant_id).toBe("t_42");
      // At least the default 21-day TTL, at most a minute more (expires_at is rounded up to a whole minute).
      expect(fence.ttl).toBeGreaterThanOrEqual(21 * 86_400);
      expect(fence.ttl).toBeLessThanOrEqual(21 * 86_400 + 60);
      expect(fence.whole_minute).toBe(true);
    });

    it("AC5 re-delivering a job whose fence exists (as a replay does) produces no second effect", async () => {
      const handler = bed.consumer(awardPointsConsumer);
      const body = JSON.stringify(award("replay-1", 7, "u-replay"));
      expect(await invoke(handler, [sqsRecord(body)])).toEqual([]);
      // A replay is a new message (new id) carrying the same job_id.
      expect(await invoke(handler, [sqsRecord(body), sqsRecord(body)])).toEqual([]);
      expect(await effectsOf(bed.db, "replay-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
      expect(await balance("u-replay")).toBe(7);
    });

    it("AC8 a batch of successes writes no row beyond its fences (the consumer's own tables aside)", async () => {
      const handler = bed.consumer(awardPointsConsumer);
      const before = await rowCounts(bed.db, ["core", "award_points"]);
      const records = Array.from({ length: 20 }, (_, i) =>
        sqsRecord(JSON.stringify(award(`ac8-${i}`, 1, `u-ac8-${i % 3}`))),
      );
      expect(await invoke(handler, records)).toEqual([]);
      const after = await rowCounts(bed.db, ["core", "award_points"]);

      const grown = Object.fromEntries(
        Object.keys(after)
          .filter((t) => after[t] !== before[t])
          .map((t) => [t, (after[t] ?? 0) - (before[t] ?? 0)]),
      );
      const { "award_points.ledger": _ledger, "award_points.balances": _balances, ...core } = grown;
      expect(core).toEqual({ "core.processed_jobs": 20 });
      expect(Object.keys(before)).toEqual(
        expect.arrayContaining(["core.dead_letters", "core.schema_migrations"]),
      );
      expect(bed.sink.events.filter((e) => JSON.stringify(e.detail).includes("ac8-"))).toEqual([]);
    });
  });

  describe("concurrent duplicates", () => {
    it("AC1 the same job_id processed concurrently (12 ways, 10 rounds) produces exactly one effect", async () => {
      // Separate handlers with their own pools stand in for separate Lambda containers.
      const handlers = Array.from({ length: 6 }, () => bed.consumer(awardPointsConsumer));
      for (let round = 0; round < 10; round++) {
        const jobId = `ac1-${round}`;
        const body = JSON.stringify(award(jobId, 5, `u-ac1-${round}`));
        const results = await Promise.all(
          Array.from({ length: 12 }, (_, i) =>
            invoke(handlers[i % handlers.length] as HostedConsumer, [sqsRecord(body)]),
          ),
        );
        expect(results.flat()).toEqual([]);
        expect(await effectsOf(bed.db, jobId)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
        expect(await balance(`u-ac1-${round}`)).toBe(5);
      }
    });

    it("a concurrent duplicate waits for the first transaction and proceeds when it rolls back", async () => {
      let release!: () => void;
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      let first = true;
      const slowThenFail = bed.consumer(
        awardWith(async () => {
          if (first) {
            first = false;
            await held;
            throw new Error("first delivery fails after holding the fence");
          }
        }),
        { random: () => 0.5 },
      );
      const body = JSON.stringify(award("wait-1", 3, "u-wait"));
      const firstRun = invoke(slowThenFail, [sqsRecord(body, { messageId: "wait-a" })]);
      await new Promise((r) => setTimeout(r, 200));
      const secondRun = invoke(bed.consumer(awardPointsConsumer), [sqsRecord(body, { messageId: "wait-b" })]);
      await new Promise((r) => setTimeout(r, 200));
      release();
      expect(await firstRun).toEqual(["wait-a"]);
      expect(await secondRun).toEqual([]);
      expect(await effectsOf(bed.db, "wait-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    });

    it("the wait is bounded by lock_timeout: a blocked duplicate fails transiently instead of hanging", async () => {
      let release!: () => void;
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      const holder = bed.consumer(awardWith(() => held));
      const impatient = bed.consumer(awardPointsConsumer, { lockTimeoutMs: 200 });
      const body = JSON.stringify(award("lock-1", 4, "u-lock"));
      const holding = invoke(holder, [sqsRecord(body, { messageId: "lock-a" })]);
      await new Promise((r) => setTimeout(r, 200));
      const started = Date.now();
      expect(await invoke(impatient, [sqsRecord(body, { messageId: "lock-b" })])).toEqual(["lock-b"]);
      expect(Date.now() - started).toBeLessThan(3000);
      release();
      expect(await holding).toEqual([]);
      expect(await effectsOf(bed.db, "lock-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    });
  });

  describe("retries", () => {
    it("AC3 a transient failure retries with growing, jittered visibility delays, then writes one dead letter", async () => {
      const queue = await bed.queue("ac3-retries", { VisibilityTimeout: "30" });
      const jitter = [0.1, 0.9, 0.5, 0.3];
      let draws = 0;
      const random = () => jitter[draws++ % jitter.length] as number;
      let attempts = 0;
      const handler = bed.consumer(
        awardWith(async () => {
          attempts++;
          throw new Error("ledger service unavailable");
        }),
        { random, queueUrl: queue.url },
      );
      const source: QueueSource = { sqs: bed.sqs, queueUrl: queue.url, queueArn: queue.arn };
      await sendMessage(bed.sqs, queue.url, award("ac3-1", 9, "u-ac3"));

      const observedDelays: number[] = [];
      for (let attempt = 1; attempt <= DEFAULT_RETRY_POLICY.maxAttempts; attempt++) {
        const delivery = await pollOnce(source, handler, lambdaContext("award-points"));
        expect(delivery.received.map((r) => r.attributes.ApproximateReceiveCount)).toEqual([String(attempt)]);
        if (attempt < DEFAULT_RETRY_POLICY.maxAttempts) {
          expect(delivery.failedIds).toHaveLength(1);
          // The emulator's own record of how long the message is hidden.
          const inflight = bed.emulator.server.inspectQueue("ac3-retries")?.messages.inflight ?? [];
          expect(inflight).toHaveLength(1);
          observedDelays.push(Math.round(((inflight[0]?.visibilityDeadline ?? 0) - Date.now()) / 1000));
          // Let the delay pass: make the message visible now, as time would.
          await bed.sqs.send(
            new ChangeMessageVisibilityCommand({
              QueueUrl: queue.url,
              ReceiptHandle: delivery.received[0]?.receiptHandle,
              VisibilityTimeout: 0,
            }),
          );
        } else {
          expect(delivery.failedIds).toEqual([]);
          expect(delivery.deletedIds).toHaveLength(1);
        }
      }

      const expected = jitter.map((u, i) => retryDelaySeconds(i + 1, DEFAULT_RETRY_POLICY, () => u));
      expect(expected).toEqual([25, 70, 120, 221]);
      for (const [i, delay] of observedDelays.entries())
        expect(Math.abs(delay - (expected[i] as number))).toBeLessThanOrEqual(1);
      for (let i = 1; i < expected.length; i++)
        expect(expected[i]).toBeGreaterThan(expected[i - 1] as number);
      expect(attempts).toBe(5);

      const row = await deadLetter("ac3-1");
      expect(row).toMatchObject({
        error_kind: "exhausted",
        attempts: 5,
        status: "pending_review",
        queue: queue.url,
        correlation_id: "corr-ac3-1",
        tenant_id: "t_42",
        last_error: { class: "Error", message: "ledger service unavailable" },
      });
      expect(row?.payload).toEqual(award("ac3-1", 9, "u-ac3"));
      expect(await effectsOf(bed.db, "ac3-1")).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
      expect(messagesIn(bed.emulator, "ac3-retries")).toBe(0);
      const alerts = bed.sink.events.filter((e) => (e.detail as { job_id: string }).job_id === "ac3-1");
      expect(alerts).toEqual([
        {
          eventBusName: OPS_BUS,
          source: "jobfence",
          detailType: "DeadLetterRecorded",
          detail: expect.objectContaining({
            id: row?.id,
            error_kind: "exhausted",
            attempts: 5,
            first_recorded: true,
          }),
        },
      ]);
    });

    it("a job that fails transiently and then succeeds applies once", async () => {
      let calls = 0;
      const flaky = bed.consumer(
        awardWith(async () => {
          if (++calls < 3) throw new Error("flaky");
        }),
      );
      const body = JSON.stringify(award("flaky-1", 2, "u-flaky"));
      expect(await invoke(flaky, [sqsRecord(body, { messageId: "flaky", receiveCount: 1 })])).toEqual([
        "flaky",
      ]);
      expect(await invoke(flaky, [sqsRecord(body, { messageId: "flaky", receiveCount: 2 })])).toEqual([
        "flaky",
      ]);
      expect(await invoke(flaky, [sqsRecord(body, { messageId: "flaky", receiveCount: 3 })])).toEqual([]);
      expect(await effectsOf(bed.db, "flaky-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    });

    it("a failed COMMIT is transient: nothing is applied and the record stays for retry", async () => {
      const commitFails = bed.consumer(
        awardWith(async (_job, tx) => {
          await tx.query("INSERT INTO public.deferred_check VALUES (1), (1)");
        }),
      );
      expect(
        await invoke(commitFails, [sqsRecord(JSON.stringify(award("commit-1")), { messageId: "commit" })]),
      ).toEqual(["commit"]);
      expect(await effectsOf(bed.db, "commit-1")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
    });

    it("work that swallows a failed statement is not counted as applied: COMMIT rolled back, record retried", async () => {
      const swallowing = bed.consumer(
        awardWith(async (_job, tx) => {
          await tx.query("SELECT 1 / 0").catch(() => {
            // the author "handles" the error and carries on: the transaction is already aborted
          });
        }),
      );
      const failures = await invoke(swallowing, [
        sqsRecord(JSON.stringify(award("swallow-1")), { messageId: "swallow" }),
      ]);
      expect(failures).toEqual(["swallow"]);
      expect(await effectsOf(bed.db, "swallow-1")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
    });

    it("a failed ChangeMessageVisibility still reports the record, so the queue's own timeout applies", async () => {
      const unreachable = localSqsClient("http://127.0.0.1:9"); // discard port: nothing listens
      const failing = bed.consumer(
        awardWith(async () => {
          throw new Error("transient");
        }),
        { sqs: unreachable },
      );
      expect(
        await invoke(failing, [sqsRecord(JSON.stringify(award("vis-1")), { messageId: "vis" })]),
      ).toEqual(["vis"]);
      expect(await effectsOf(bed.db, "vis-1")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
    });

    it("a fence TTL that does not outlive every wait of a copy (outbox, queues, drain) + retry window + 1 day is refused at start-up", () => {
      expect(() =>
        bed.consumer(awardPointsConsumer, {
          config: { databaseUrl: bed.db.url, opsBusName: OPS_BUS, fenceTtlSeconds: 4 * 86_400 },
        }),
      ).toThrow(
        // No queue URL yet: FIFO is assumed, where the two retentions add up.
        /fence TTL 345600 s .* must exceed .* queue retention 345600 s \+ backstop retention 1209600 s/,
      );
      // A copy waits in the backstop 14 days and in an outbox a day: the 7 days of earlier versions are refused.
      expect(() =>
        bed.consumer(awardPointsConsumer, {
          config: { databaseUrl: bed.db.url, opsBusName: OPS_BUS, fenceTtlSeconds: 7 * 86_400 },
        }),
      ).toThrow(/fence TTL 604800 s .* outbox deadline 86400 s .* backstop retention 1209600 s/);
      // On a FIFO queue the backstop's retention restarts at the move: the two add up.
      expect(() =>
        bed.consumer(awardPointsConsumer, {
          config: {
            databaseUrl: bed.db.url,
            opsBusName: OPS_BUS,
            fenceTtlSeconds: 17 * 86_400,
            queueUrl: "https://sqs.eu-west-1.amazonaws.com/000000000000/award-points.fifo",
          },
        }),
      ).toThrow(/queue retention 345600 s \+ backstop retention 1209600 s \(FIFO/);
      // A shorter backstop, declared, allows a shorter TTL.
      expect(() =>
        bed.consumer(awardPointsConsumer, {
          config: {
            databaseUrl: bed.db.url,
            opsBusName: OPS_BUS,
            fenceTtlSeconds: 7 * 86_400,
            backstopRetentionSeconds: 4 * 86_400,
            queueUrl: "https://sqs.eu-west-1.amazonaws.com/000000000000/award-points",
            outboxQueues: bed.followUpQueues,
          },
        }),
      ).not.toThrow();
      expect(() =>
        bed.consumer(
          {
            ...awardPointsConsumer,
            retry: { maxAttempts: 40, capSeconds: 43_200, rationale: "partner outages last days" },
          },
          { config: { databaseUrl: bed.db.url, opsBusName: OPS_BUS } },
        ),
      ).toThrow(/maximum retry window/);
    });

    it("a retry override without a rationale is refused at start-up", () => {
      expect(() =>
        bed.consumer({ ...awardPointsConsumer, retry: { maxAttempts: 3, rationale: "  " } }),
      ).toThrow(/rationale/);
      const ok = bed.consumer({
        ...awardPointsConsumer,
        retry: { maxAttempts: 3, rationale: "the partner API rate-limits hard; three tries is the contract" },
      });
      expect(ok.retryPolicy).toEqual({ maxAttempts: 3, baseSeconds: 30, capSeconds: 3600 });
    });
  });

  describe("dead letters", () => {
    it("AC4 a schema-invalid payload goes straight to dead letters with zero retries", async () => {
      const queue = await bed.queue("ac4-poison", { VisibilityTimeout: "30" });
      let workCalls = 0;
      const handler = bed.consumer(
        awardWith(async () => {
          workCalls++;
        }),
        { queueUrl: queue.url },
      );
      await sendMessage(bed.sqs, queue.url, {
        job_id: "ac4-1",
        tenant_id: "t_42",
        payload: { user_id: "u", points: -5 },
      });
      const delivery = await pollOnce(
        { sqs: bed.sqs, queueUrl: queue.url, queueArn: queue.arn },
        handler,
        lambdaContext("award-points"),
      );

      expect(delivery.failedIds).toEqual([]);
      expect(delivery.deletedIds).toHaveLength(1);
      expect(workCalls).toBe(0);
      const row = await deadLetter("ac4-1");
      expect(row).toMatchObject({
        error_kind: "poison",
        attempts: 1,
        correlation_id: "ac4-1",
        last_error: { class: "PoisonMessageError" },
      });
      expect((row?.last_error as { message?: string } | undefined)?.message).toMatch(
        /^invalid-payload: points/,
      );
      expect(messagesIn(bed.emulator, "ac4-poison")).toBe(0);
      expect(await effectsOf(bed.db, "ac4-1")).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
    });

    // The fourth column is the payload the row keeps (null: not a JSON object jsonb holds); the
    // body itself is always kept exactly as it was received.
    const nested = `${"[".repeat(10_000)}${"]".repeat(10_000)}`;
    const nulInId = JSON.stringify({
      job_id: "a\u0000b",
      tenant_id: "t",
      payload: { user_id: "u", points: 1 },
    });
    it.each([
      ["not JSON", "points: ten", undefined, null],
      ["an empty body", "", undefined, null],
      ["binary-ish bytes", "\u0001\u0002\u00ff\ufffe\u0007", undefined, null],
      ["a literal NUL", "hello\u0000world", undefined, null],
      ["a JSON array", "[1, 2, 3]", undefined, null],
      ["JSON null", "null", undefined, null],
      ["deep nesting", nested, undefined, null],
      [
        "an envelope without job_id",
        '{"tenant_id":"t","payload":{}}',
        undefined,
        { tenant_id: "t", payload: {} },
      ],
      ["a U+0000 inside job_id (text cannot store it)", nulInId, undefined, null],
      [
        "a U+0000 inside the payload's user_id",
        JSON.stringify({
          job_id: "poison-nul-user",
          tenant_id: "t",
          payload: { user_id: "u\u0000", points: 1 },
        }),
        "poison-nul-user",
        null,
      ],
      [
        "a job_id over 255 characters",
        JSON.stringify({ job_id: "j".repeat(256), tenant_id: "t", payload: {} }),
        undefined,
        { job_id: "j".repeat(256), tenant_id: "t", payload: {} },
      ],
      [
        "a blank job_id",
        JSON.stringify({ job_id: "  ", tenant_id: "t", payload: { user_id: "u", points: 1 } }),
        undefined,
        { job_id: "  ", tenant_id: "t", payload: { user_id: "u", points: 1 } },
      ],
      [
        "a missing payload",
        '{"job_id":"poison-np","tenant_id":"t"}',
        "poison-np",
        { job_id: "poison-np", tenant_id: "t" },
      ],
      [
        "a \\u0000 escape in the payload",
        '{"job_id":"poison-nul","tenant_id":"t","payload":{"user_id":"a\\u0000b","points":"x"}}',
        "poison-nul",
        null,
      ],
    ])(
      "a body with %s becomes one poison dead letter, acked, its body kept exactly",
      async (_, body, jobId, payload) => {
        const handler = bed.consumer(awardPointsConsumer);
        const record = sqsRecord(body);
        expect(await invoke(handler, [record])).toEqual([]);
        const row = await deadLetter(jobId ?? record.messageId);
        expect(row).toMatchObject({ error_kind: "poison", attempts: 1, status: "pending_review" });
        expect(row?.payload).toEqual(payload);
        expect(row).toBeDefined();
        expect(bodyOf(row as unknown as StoredBodyColumns)).toBe(body);
        expect(row?.body_form).toBe(body.includes("\u0000") ? "utf16" : "text");
      },
    );

    it("a huge body is stored whole", async () => {
      const handler = bed.consumer(awardPointsConsumer);
      const body = JSON.stringify({
        job_id: "poison-huge",
        tenant_id: "t",
        payload: { user_id: "x".repeat(300_000), points: 1 },
      });
      expect(await invoke(handler, [sqsRecord(body)])).toEqual([]);
      const row = await deadLetter("poison-huge");
      expect(row?.error_kind).toBe("poison");
      expect(JSON.stringify(row?.payload).length).toBeGreaterThan(300_000);
      expect(row?.body).toBe(body);
    });

    it("a PermanentJobError dead-letters at once as hard, applying nothing", async () => {
      const handler = bed.consumer(
        awardWith(async (_job, tx) => {
          await tx.query("SELECT 1");
          throw new PermanentJobError("user u-closed is closed");
        }),
      );
      expect(await invoke(handler, [sqsRecord(JSON.stringify(award("hard-1", 3, "u-closed")))])).toEqual([]);
      expect(await deadLetter("hard-1")).toMatchObject({
        error_kind: "hard",
        attempts: 1,
        last_error: { class: "PermanentJobError", message: "user u-closed is closed" },
      });
      expect(await effectsOf(bed.db, "hard-1")).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
    });

    it("a blank correlation_id counts as absent: the job id stands in, so the dead letter can be written", async () => {
      const handler = bed.consumer(
        awardWith(async () => {
          throw new PermanentJobError("no such user");
        }),
      );
      const body = JSON.stringify({ ...award("blank-corr"), correlation_id: " \t" });
      expect(await invoke(handler, [sqsRecord(body)])).toEqual([]);
      expect(await deadLetter("blank-corr")).toMatchObject({
        error_kind: "hard",
        correlation_id: "blank-corr",
      });
    });

    it.each([
      ["CJK characters", "一".repeat(10_000)],
      ["control characters", "\u0001\u0000".repeat(5_000)],
      ["an emoji cut in half by the bound", `${"a".repeat(1998)}${"😀".repeat(5)}`],
    ])("an error message of %s still fits the database's last_error check", async (label, message) => {
      const jobId = `big-error-${label.replaceAll(" ", "-")}`;
      const handler = bed.consumer(
        awardWith(async () => {
          throw new PermanentJobError(message);
        }),
      );
      expect(await invoke(handler, [sqsRecord(JSON.stringify(award(jobId)))])).toEqual([]);
      expect(await deadLetter(jobId)).toMatchObject({
        error_kind: "hard",
        last_error: { class: "PermanentJobError" },
      });
    });

    it("writing a dead letter is idempotent: a redelivery after a lost ack finds the same row", async () => {
      const handler = bed.consumer(awardPointsConsumer);
      const record = sqsRecord("not json at all", { messageId: "idem-1" });
      expect(await invoke(handler, [record])).toEqual([]);
      expect(
        await invoke(handler, [
          { ...record, attributes: { ...record.attributes, ApproximateReceiveCount: "2" } },
        ]),
      ).toEqual([]);
      const rows = await bed.db.withClient(
        async (c) => (await c.query("SELECT id FROM core.dead_letters WHERE job_id = 'idem-1'")).rows,
      );
      expect(rows).toHaveLength(1);
      const alerts = bed.sink.events.filter((e) => (e.detail as { job_id: string }).job_id === "idem-1");
      expect(alerts.map((a) => (a.detail as { first_recorded: boolean }).first_recorded)).toEqual([
        true,
        false,
      ]);
      expect(new Set(alerts.map((a) => (a.detail as { id: string }).id))).toEqual(new Set([rows[0].id]));
    });

    it("a failed dead-letter write leaves the message in the queue", async () => {
      // jobfence_ops may not insert dead letters: the database refuses the write for real.
      const { createPool } = await import("../../shared/db/pool.ts");
      const refused = bed.consumer(awardPointsConsumer, {
        pool: createPool({ connectionString: bed.db.url, role: "jobfence_ops" }),
      });
      expect(await invoke(refused, [sqsRecord("{broken", { messageId: "dlfail-1" })])).toEqual(["dlfail-1"]);
      expect(await deadLetter("dlfail-1")).toBeUndefined();
    });

    it("the configured dbRole is set on every connection of a pool the factory builds", async () => {
      const { createConsumer } = await import("../../shared/consumer.ts");
      const { localEventBridgeClient } = await import("../../local/aws-clients.ts");
      // As jobfence_ops, the dead-letter insert is refused: proof the role, not the login, is in force.
      const handler = createConsumer(awardPointsConsumer, {
        config: {
          databaseUrl: bed.db.url,
          opsBusName: OPS_BUS,
          dbRole: "jobfence_ops",
          outboxQueues: bed.followUpQueues,
        },
        sqs: bed.sqs,
        eventBridge: localEventBridgeClient(bed.sink.endpoint),
      });
      try {
        expect(await invoke(handler, [sqsRecord("{", { messageId: "role-1" })])).toEqual(["role-1"]);
        expect(await deadLetter("role-1")).toBeUndefined();
      } finally {
        await handler.pool.end();
      }
    });

    it.each(["reject-entries", "http-500"] as const)(
      "a failed alert (%s) is never thrown: the dead letter is recorded and the record acked",
      async (mode) => {
        bed.sink.setMode(mode);
        const handler = bed.consumer(awardPointsConsumer);
        const before = bed.sink.events.length;
        expect(await invoke(handler, [sqsRecord("{", { messageId: `alert-${mode}` })])).toEqual([]);
        expect(await deadLetter(`alert-${mode}`)).toMatchObject({
          error_kind: "poison",
          status: "pending_review",
        });
        expect(bed.sink.events.length).toBe(before);
      },
    );
  });

  describe("batches", () => {
    it("one record's failure never fails or re-runs its batch-mates' committed work", async () => {
      const failing = bed.consumer(
        awardWith(async (job) => {
          if (job.jobId === "iso-bad") throw new Error("this one fails");
        }),
      );
      const records = [
        sqsRecord(JSON.stringify(award("iso-1", 1, "u-iso")), { messageId: "iso-m1" }),
        sqsRecord(JSON.stringify(award("iso-bad", 1, "u-iso")), { messageId: "iso-m2" }),
        sqsRecord(JSON.stringify(award("iso-2", 1, "u-iso")), { messageId: "iso-m3" }),
      ];
      expect(await invoke(failing, records)).toEqual(["iso-m2"]);
      // Redelivering the whole batch (as after a timeout) changes nothing that committed.
      expect(await invoke(failing, records)).toEqual(["iso-m2"]);
      expect(await effectsOf(bed.db, "iso-1")).toMatchObject({ ledger: 1, fences: 1 });
      expect(await effectsOf(bed.db, "iso-2")).toMatchObject({ ledger: 1, fences: 1 });
      expect(await effectsOf(bed.db, "iso-bad")).toMatchObject({ ledger: 0, fences: 0 });
      expect(await balance("u-iso")).toBe(2);
    });

    it("FIFO: after a failure, the rest of that message group is reported and not run; other groups go on", async () => {
      const ran: string[] = [];
      const handler = bed.consumer(
        awardWith(async (job) => {
          ran.push(job.jobId);
          if (job.jobId === "fifo-a1") throw new Error("a1 fails");
        }),
      );
      const arn = "arn:aws:sqs:eu-west-1:000000000000:award-points.fifo";
      const rec = (job: string, group: string) =>
        sqsRecord(JSON.stringify(award(job, 1, `u-${job}`)), {
          messageId: `m-${job}`,
          groupId: group,
          queueArn: arn,
        });
      const failures = await invoke(handler, [
        rec("fifo-a1", "a"),
        rec("fifo-b1", "b"),
        rec("fifo-a2", "a"),
        rec("fifo-b2", "b"),
      ]);
      expect(failures).toEqual(["m-fifo-a1", "m-fifo-a2"]);
      expect(ran).toEqual(["fifo-a1", "fifo-b1", "fifo-b2"]);
      expect(await effectsOf(bed.db, "fifo-a2")).toMatchObject({ ledger: 0, fences: 0 });
    });

    it("FIFO: a poison record is dead-lettered and acked, and its group goes on", async () => {
      const handler = bed.consumer(awardPointsConsumer);
      const arn = "arn:aws:sqs:eu-west-1:000000000000:award-points.fifo";
      const failures = await invoke(handler, [
        sqsRecord("garbage", { messageId: "fifo-p1", groupId: "p", queueArn: arn }),
        sqsRecord(JSON.stringify(award("fifo-p2")), { messageId: "fifo-p2", groupId: "p", queueArn: arn }),
      ]);
      expect(failures).toEqual([]);
      expect(await effectsOf(bed.db, "fifo-p2")).toMatchObject({ ledger: 1 });
      expect(await deadLetter("fifo-p1")).toMatchObject({
        error_kind: "poison",
        message_attributes: expect.objectContaining({ message_group_id: "p" }),
      });
    });
  });

  describe("connections", () => {
    it("no connection leaks on any path: every pool is idle and no session is left in a transaction", async () => {
      for (const pool of bed.pools) {
        expect(pool.totalCount - pool.idleCount).toBe(0);
        expect(pool.waitingCount).toBe(0);
      }
      const stuck = await bed.db.withClient(
        async (c) =>
          (
            await c.query(
              "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
            )
          ).rows[0].n,
      );
      expect(stuck).toBe(0);
    });
  });
}
