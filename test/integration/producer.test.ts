/**
 * The producer side against the real SQS emulator: sendJobs on standard and FIFO queues, its
 * batches within SQS's limits (fauxqs refuses a batch over 1 MiB as SQS does, and a message over
 * the queue's MaximumMessageSize per entry), every job arriving exactly once, per-entry and
 * whole-request failures, and `npm run send` (local/send.ts) with its refusals.
 *
 * Two behaviours the emulator cannot produce are injected with a client middleware: an entry SQS
 * fails on its own side (SenderFault false), and throttling. Everything else is the emulator's.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  type Message,
  type MessageAttributeValue,
  RequestThrottled,
  SendMessageBatchCommand,
  type SendMessageBatchCommandInput,
  type SendMessageBatchCommandOutput,
  type SendMessageBatchRequestEntry,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { localSqsClient } from "../../local/aws-clients.ts";
import { runSend, type SendableConsumer } from "../../local/send.ts";
import { type SqsEmulator, startSqsEmulator } from "../../local/sqs-emulator.ts";
import type { StackInfo } from "../../local/stack.ts";
import { BODY_FORM } from "../../shared/db/stored-body.ts";
import { replayMessage } from "../../shared/dead-letters/replay-message.ts";
import { jobFingerprint } from "../../shared/envelope/fingerprint.ts";
import { SendRefusedError } from "../../shared/errors/sending.ts";
import { sendFollowUps } from "../../shared/outbox/relay.ts";
import { fifoDeduplicationId, HASHED_TOKEN_PREFIX, sqsToken } from "../../shared/producer/fifo-ids.ts";
import type { JobEnvelope } from "../../shared/producer/job-envelope.ts";
import { deriveJobId } from "../../shared/producer/job-id.ts";
import { type JobToSend, SEND_FAILURE_CODE, sendJobs } from "../../shared/producer/send-jobs.ts";
import { createQueue, queueDepth, receiveAll, type TestQueue } from "../support/sqs.ts";

const MiB = 1_048_576;

let emulator: SqsEmulator;
let sqs: SQSClient;
let tmp: string;
const clients: SQSClient[] = [];

beforeAll(async () => {
  emulator = await startSqsEmulator();
  sqs = localSqsClient(emulator.endpoint);
  tmp = await mkdtemp(join(tmpdir(), "jobfence-producer-"));
});

afterAll(async () => {
  for (const client of clients) client.destroy();
  sqs?.destroy();
  await emulator?.stop();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

let queues = 0;
async function queue(base: string, attributes: Record<string, string> = {}): Promise<TestQueue> {
  const fifo = base.endsWith(".fifo");
  const name = `${fifo ? base.slice(0, -5) : base}-${++queues}${fifo ? ".fifo" : ""}`;
  return createQueue(sqs, emulator.endpoint, name, fifo ? { FifoQueue: "true", ...attributes } : attributes);
}

/** A client of its own, so a test's middlewares stay its own. */
function client(endpoint = emulator.endpoint): SQSClient {
  const created = localSqsClient(endpoint);
  clients.push(created);
  return created;
}

/** No waiting between attempts; the waits asked for are kept. */
function noWait() {
  const waits: number[] = [];
  return { waits, sleep: async (ms: number) => void waits.push(ms) };
}

/** Records every SendMessageBatch as it goes to the wire (after any injection). */
function recordBatches(target: SQSClient): SendMessageBatchRequestEntry[][] {
  const calls: SendMessageBatchRequestEntry[][] = [];
  target.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === "SendMessageBatchCommand")
        calls.push([...((args.input as SendMessageBatchCommandInput).Entries ?? [])]);
      return next(args);
    },
    { step: "initialize", priority: "low", name: "recordBatches" },
  );
  return calls;
}

/**
 * Makes SQS fail the entries `fails` picks on its own side (SenderFault false): they are taken out
 * of the request before it is sent, so SQS really never gets them, and reported in `Failed`.
 */
function failOnSqsSide(
  target: SQSClient,
  fails: (entry: SendMessageBatchRequestEntry, call: number) => boolean,
): { readonly calls: number } {
  let call = 0;
  target.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== "SendMessageBatchCommand") return next(args);
      call++;
      const input = args.input as SendMessageBatchCommandInput;
      const entries = input.Entries ?? [];
      const failing = entries.filter((entry) => fails(entry, call));
      const kept = entries.filter((entry) => !failing.includes(entry));
      const result =
        kept.length > 0
          ? await next({ ...args, input: { ...input, Entries: kept } })
          : { output: { Successful: [], Failed: [], $metadata: {} }, response: {} };
      const output = result.output as SendMessageBatchCommandOutput;
      output.Failed = [
        ...(output.Failed ?? []),
        ...failing.map((entry) => ({
          Id: entry.Id,
          SenderFault: false,
          Code: "InternalError",
          Message: "injected: SQS failed this entry on its side",
        })),
      ];
      return result as typeof result & { output: never };
    },
    { step: "initialize", priority: "high", name: "failOnSqsSide" },
  );
  return {
    get calls() {
      return call;
    },
  };
}

/** Throttles the first `times` SendMessageBatch calls (Infinity: all), as SQS's RequestThrottled. */
function throttle(target: SQSClient, times: number) {
  let calls = 0;
  target.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === "SendMessageBatchCommand" && calls++ < times)
        throw new RequestThrottled({
          message: "Rate exceeded (injected)",
          $metadata: { httpStatusCode: 400 },
        });
      return next(args);
    },
    { step: "initialize", priority: "high", name: "throttle" },
  );
}

/** A message's size as SQS documents it, written here independently of the library's. */
function sqsSize(entry: SendMessageBatchRequestEntry): number {
  let size = Buffer.byteLength(entry.MessageBody ?? "", "utf8");
  for (const [name, value] of Object.entries(entry.MessageAttributes ?? {})) {
    size += Buffer.byteLength(name) + Buffer.byteLength(value.DataType ?? "");
    size += value.StringValue !== undefined ? Buffer.byteLength(value.StringValue) : 0;
    size += value.BinaryValue?.byteLength ?? 0;
  }
  return size;
}

function expectWithinLimits(calls: SendMessageBatchRequestEntry[][]) {
  for (const entries of calls) {
    expect(entries.length).toBeGreaterThan(0);
    expect(entries.length).toBeLessThanOrEqual(10);
    expect(entries.reduce((sum, entry) => sum + sqsSize(entry), 0)).toBeLessThanOrEqual(MiB);
  }
}

function job(jobId: string, payload: unknown = { n: 1 }, extra: Partial<JobToSend> = {}): JobToSend {
  return { envelope: { job_id: jobId, tenant_id: "t_1", payload }, ...extra };
}

/** A job whose body is exactly `bytes` long. */
function jobOfSize(jobId: string, bytes: number, extra: Partial<JobToSend> = {}): JobToSend {
  const bare = JSON.stringify({ job_id: jobId, tenant_id: "t_1", payload: { pad: "" } }).length;
  const sized = job(jobId, { pad: "x".repeat(bytes - bare) }, extra);
  expect(Buffer.byteLength(JSON.stringify(sized.envelope))).toBe(bytes);
  return sized;
}

/** What a queue holds, by job id: each body parsed, with the message. */
async function arrived(queueUrl: string): Promise<Map<string, Message[]>> {
  const byJob = new Map<string, Message[]>();
  for (const message of await receiveAll(sqs, queueUrl)) {
    const jobId = (JSON.parse(message.Body ?? "{}") as JobEnvelope).job_id;
    byJob.set(jobId, [...(byJob.get(jobId) ?? []), message]);
  }
  return byJob;
}

/** Every job arrived exactly once, carrying the body it was sent with. */
async function expectArrivedOnce(queueUrl: string, jobs: readonly JobToSend[]) {
  const byJob = await arrived(queueUrl);
  expect([...byJob.keys()].sort()).toEqual(jobs.map((j) => j.envelope.job_id).sort());
  for (const sent of jobs) {
    const messages = byJob.get(sent.envelope.job_id) ?? [];
    expect(messages).toHaveLength(1);
    expect(messages[0]?.Body).toBe(JSON.stringify(sent.envelope));
  }
  return byJob;
}

describe("sendJobs on a standard queue", () => {
  it("sends every job once and answers in input order with SQS's message ids", async () => {
    const target = await queue("producer-std");
    const c = client();
    const calls = recordBatches(c);
    const jobs = Array.from({ length: 25 }, (_, i) => job(`job-${i}`, { n: i }));
    const result = await sendJobs(c, target.url, jobs);
    expect(result.failed).toEqual([]);
    expect(result.sent.map((s) => s.jobId)).toEqual(jobs.map((j) => j.envelope.job_id));
    expect(calls.map((entries) => entries.length)).toEqual([10, 10, 5]);
    const byJob = await expectArrivedOnce(target.url, jobs);
    for (const sent of result.sent) expect(byJob.get(sent.jobId)?.[0]?.MessageId).toBe(sent.messageId);
  });

  it("splits jobs totalling over 1 MiB into batches within the limits, and every job arrives once", async () => {
    const target = await queue("producer-large");
    // The emulator refuses a batch over 1 MiB, as SQS does: the test below tests the real limit.
    const four = [0, 1, 2, 3].map((i) => jobOfSize(`raw-${i}`, 300_000));
    await expect(
      sqs.send(
        new SendMessageBatchCommand({
          QueueUrl: target.url,
          Entries: four.map((j, i) => ({ Id: String(i), MessageBody: JSON.stringify(j.envelope) })),
        }),
      ),
    ).rejects.toMatchObject({ name: "BatchRequestTooLong" });

    const c = client();
    const calls = recordBatches(c);
    const attribute: Record<string, MessageAttributeValue> = {
      trace: { DataType: "String", StringValue: "t".repeat(200) },
    };
    const jobs = [
      ...Array.from({ length: 12 }, (_, i) => jobOfSize(`big-${i}`, 300_000)),
      ...Array.from({ length: 15 }, (_, i) => job(`small-${i}`)),
      // Exactly the limit, as SQS counts it, is allowed.
      jobOfSize("exactly-1MiB", MiB),
    ];
    const result = await sendJobs(c, target.url, jobs);
    expect(result.failed).toEqual([]);
    expect(result.sent.map((s) => s.jobId)).toEqual(jobs.map((j) => j.envelope.job_id));
    expect(calls.length).toBeGreaterThanOrEqual(6);
    expectWithinLimits(calls);

    // Two bodies that would fit one batch if the attributes were left out of the count: counted
    // as SQS counts them, they need two, and the emulator takes both.
    const halves = ["half-a", "half-b"].map((id) => jobOfSize(id, MiB / 2 - 100, { attributes: attribute }));
    calls.length = 0;
    const halvesResult = await sendJobs(c, target.url, halves);
    expect(halvesResult.failed).toEqual([]);
    expect(calls.map((entries) => entries.length)).toEqual([1, 1]);
    expectWithinLimits(calls);
    await expectArrivedOnce(target.url, [...jobs, ...halves]);
  });

  it("fails a job over 1 MiB without sending it, and the others arrive", async () => {
    const target = await queue("producer-oversize");
    const c = client();
    const calls = recordBatches(c);
    const jobs = [job("before"), jobOfSize("huge", MiB + 1), job("after")];
    const result = await sendJobs(c, target.url, jobs);
    expect(result.sent.map((s) => s.jobId)).toEqual(["before", "after"]);
    expect(result.failed).toEqual([
      {
        jobId: "huge",
        code: SEND_FAILURE_CODE.tooLarge,
        message: `the message is ${MiB + 1} bytes as SQS counts them; at most ${MiB} can be sent`,
        senderFault: true,
      },
    ]);
    expect(calls.flat().map((e) => JSON.parse(e.MessageBody ?? "").job_id)).toEqual(["before", "after"]);
    await expectArrivedOnce(target.url, [jobs[0] as JobToSend, jobs[2] as JobToSend]);
  });

  it("returns an entry SQS refuses as the sender's fault, without retrying it, and the rest arrive", async () => {
    // A queue that takes at most 1 KiB a message: SQS fails the larger entry, not the batch.
    const target = await queue("producer-small-max", { MaximumMessageSize: "1024" });
    const c = client();
    const calls = recordBatches(c);
    const jobs = [job("a"), jobOfSize("too-big-for-the-queue", 2000), job("b")];
    const result = await sendJobs(c, target.url, jobs, { sleep: noWait().sleep });
    expect(result.sent.map((s) => s.jobId)).toEqual(["a", "b"]);
    expect(result.failed).toHaveLength(1);
    expect(result.failed[0]).toMatchObject({
      jobId: "too-big-for-the-queue",
      code: "InvalidParameterValue",
      senderFault: true,
    });
    expect(result.failed[0]?.message).toMatch(/shorter than 1024 bytes/);
    expect(calls).toHaveLength(1);
    await expectArrivedOnce(target.url, [jobs[0] as JobToSend, jobs[2] as JobToSend]);

    // Told the queue's limit, sendJobs fails the job itself, without a call.
    const told = client();
    const toldCalls = recordBatches(told);
    const again = await sendJobs(told, target.url, [jobs[1] as JobToSend], { maxMessageBytes: 1024 });
    expect(again.failed).toMatchObject([
      { jobId: "too-big-for-the-queue", code: SEND_FAILURE_CODE.tooLarge },
    ]);
    expect(toldCalls).toEqual([]);
  });

  it("retries an entry SQS fails on its own side, and it arrives once", async () => {
    const target = await queue("producer-sqs-side");
    const c = client();
    failOnSqsSide(c, (entry, call) => call === 1 && entry.MessageBody?.includes('"flaky"') === true);
    const calls = recordBatches(c);
    const { waits, sleep } = noWait();
    const jobs = [job("steady-1"), job("flaky"), job("steady-2")];
    const result = await sendJobs(c, target.url, jobs, { sleep });
    expect(result.failed).toEqual([]);
    expect(result.sent.map((s) => s.jobId)).toEqual(["steady-1", "flaky", "steady-2"]);
    expect(calls.map((entries) => entries.map((e) => JSON.parse(e.MessageBody ?? "").job_id))).toEqual([
      ["steady-1", "steady-2"],
      ["flaky"],
    ]);
    expect(waits).toHaveLength(1);
    await expectArrivedOnce(target.url, jobs);
  });

  it("gives up on an entry SQS keeps failing after the bounded attempts, with backoff between them", async () => {
    const target = await queue("producer-sqs-side-always");
    const c = client();
    const injected = failOnSqsSide(c, (entry) => entry.MessageBody?.includes('"doomed"') === true);
    const calls = recordBatches(c);
    const { waits, sleep } = noWait();
    const result = await sendJobs(c, target.url, [job("doomed"), job("fine")], {
      sleep,
      random: () => 0.5,
      retry: { maxAttempts: 3, baseDelayMs: 100, maxDelayMs: 1000 },
    });
    expect(result.sent.map((s) => s.jobId)).toEqual(["fine"]);
    expect(result.failed).toEqual([
      {
        jobId: "doomed",
        code: "InternalError",
        message: "injected: SQS failed this entry on its side",
        senderFault: false,
      },
    ]);
    // Three calls: the first sent "fine"; the two retries only "doomed", which the injection took
    // out again, so only the first reached SQS.
    expect(injected.calls).toBe(3);
    expect(calls.map((entries) => entries.length)).toEqual([1]);
    expect(waits).toEqual([50, 100]);
    await expectArrivedOnce(target.url, [job("fine")]);
  });

  it("retries a throttled call; throttled throughout, its jobs come back failed, not thrown", async () => {
    const target = await queue("producer-throttled");
    const c = client();
    throttle(c, 2);
    const { waits, sleep } = noWait();
    const jobs = Array.from({ length: 12 }, (_, i) => job(`t-${i}`));
    const result = await sendJobs(c, target.url, jobs, { sleep });
    expect(result.failed).toEqual([]);
    expect(waits).toHaveLength(2);
    await expectArrivedOnce(target.url, jobs);

    const always = client();
    throttle(always, Number.POSITIVE_INFINITY);
    const late = await sendJobs(always, target.url, [job("late-1"), job("late-2")], {
      sleep,
      retry: { maxAttempts: 2 },
    });
    expect(late.sent).toEqual([]);
    expect(late.failed).toEqual(
      ["late-1", "late-2"].map((jobId) => ({
        jobId,
        code: "RequestThrottled",
        message: "Rate exceeded (injected)",
        senderFault: false,
      })),
    );
    expect(await queueDepth(sqs, target.url)).toBe(12); // the first twelve, in flight
  });

  it("an unreachable SQS: retried, then every job comes back failed, not the sender's fault", async () => {
    const port = await closedPort();
    const target = await queue("producer-unreachable");
    const c = client(`http://127.0.0.1:${port}`);
    const { waits, sleep } = noWait();
    const result = await sendJobs(c, target.url, [job("x"), job("y")], { sleep, retry: { maxAttempts: 3 } });
    expect(result.sent).toEqual([]);
    expect(result.failed.map((f) => [f.jobId, f.code, f.senderFault])).toEqual([
      ["x", "ECONNREFUSED", false],
      ["y", "ECONNREFUSED", false],
    ]);
    expect(waits).toHaveLength(2);
  });

  it("a queue that does not exist: not retried, each job failed as the sender's fault", async () => {
    const c = client();
    const calls = recordBatches(c);
    const result = await sendJobs(c, `${emulator.endpoint}/000000000000/no-such-queue`, [job("x")], {
      sleep: noWait().sleep,
    });
    expect(result.failed).toMatchObject([{ jobId: "x", senderFault: true }]);
    expect(result.failed[0]?.code).toBe("QueueDoesNotExist");
    expect(calls).toHaveLength(1);
  });

  it("refuses the whole call, sending nothing, for a missing or empty job_id or two jobs under one", async () => {
    const target = await queue("producer-refused");
    const c = client();
    const calls = recordBatches(c);
    const missing = { envelope: { tenant_id: "t_1", payload: {} } } as unknown as JobToSend;
    for (const jobs of [
      [job("a"), missing],
      [job("a"), job("")],
      [job("a"), job("b"), job("a", { other: true })],
    ]) {
      await expect(sendJobs(c, target.url, jobs)).rejects.toBeInstanceOf(SendRefusedError);
    }
    await expect(sendJobs(c, target.url, [job("a")], { maxMessageBytes: MiB + 1 })).rejects.toThrow(
      /maxMessageBytes/,
    );
    expect(calls).toEqual([]);
    expect(await queueDepth(sqs, target.url)).toBe(0);
  });
});

describe("sendJobs on a FIFO queue", () => {
  it("groups by tenant (or groupId), deduplicates by job id and fingerprint, and keeps each group's order", async () => {
    const target = await queue("producer.fifo");
    const longId = `order-${"9".repeat(200)}`;
    const jobs: JobToSend[] = [
      { envelope: { job_id: "a-1", tenant_id: "t_a", payload: { n: 1 } } },
      { envelope: { job_id: "b-1", tenant_id: "t_b", payload: { n: 2 } } },
      { envelope: { job_id: "a-2", tenant_id: "t_a", payload: { n: 3 } } },
      { envelope: { job_id: "u-1", tenant_id: "t_a", payload: { n: 4 } }, groupId: "user 7" },
      { envelope: { job_id: longId, tenant_id: "t_b", payload: { n: 5 } } },
      { envelope: { job_id: "a-3", tenant_id: "t_a", payload: { n: 6 } } },
    ];
    const first = await sendJobs(sqs, target.url, jobs);
    expect(first.failed).toEqual([]);

    // Sent again within the deduplication window: SQS takes each, with its first message id, and
    // enqueues nothing more.
    const again = await sendJobs(sqs, target.url, jobs);
    expect(again.failed).toEqual([]);
    expect(again.sent).toEqual(first.sent);

    const messages = await receiveAll(sqs, target.url);
    expect(messages).toHaveLength(jobs.length);
    const seen = messages.map((m) => ({
      jobId: (JSON.parse(m.Body ?? "") as JobEnvelope).job_id,
      group: m.Attributes?.MessageGroupId,
      dedup: m.Attributes?.MessageDeduplicationId,
      sequence: BigInt(m.Attributes?.SequenceNumber ?? "0"),
    }));
    const byJob = new Map(seen.map((s) => [s.jobId, s]));
    const dedupOf = (index: number) => {
      const { envelope } = jobs[index] as JobToSend;
      return fifoDeduplicationId(envelope.job_id, jobFingerprint(envelope.tenant_id, envelope.payload));
    };
    expect(byJob.get("a-1")).toMatchObject({ group: "t_a", dedup: dedupOf(0) });
    expect(byJob.get("a-1")?.dedup).toMatch(/^a-1:[A-Za-z0-9_-]{22}$/);
    expect(byJob.get("b-1")).toMatchObject({ group: "t_b", dedup: dedupOf(1) });
    expect(byJob.get("u-1")).toMatchObject({ group: sqsToken("user 7"), dedup: dedupOf(3) });
    expect(byJob.get(longId)?.dedup).toBe(dedupOf(4));
    expect(byJob.get(longId)?.dedup?.startsWith(HASHED_TOKEN_PREFIX)).toBe(true);
    const inOrder = (group: string) =>
      seen
        .filter((s) => s.group === group)
        .sort((x, y) => (x.sequence < y.sequence ? -1 : 1))
        .map((s) => s.jobId);
    expect(inOrder("t_a")).toEqual(["a-1", "a-2", "a-3"]);
  });

  it("an entry SQS's answer leaves out is sent again, and the deduplication id keeps it once", async () => {
    const target = await queue("producer-lost-answer.fifo");
    const c = client();
    let call = 0;
    // SQS takes every entry, but the answer to the first call loses one of them.
    c.middlewareStack.add(
      (next, context) => async (args) => {
        const result = await next(args);
        if (context.commandName === "SendMessageBatchCommand" && ++call === 1) {
          const output = result.output as SendMessageBatchCommandOutput;
          output.Successful = output.Successful?.filter((entry) => entry.Id !== "1");
        }
        return result;
      },
      { step: "initialize", priority: "high", name: "loseAnswer" },
    );
    const jobs = [job("kept-1"), job("answer-lost"), job("kept-2")];
    const result = await sendJobs(c, target.url, jobs, { sleep: noWait().sleep });
    expect(result.failed).toEqual([]);
    expect(call).toBe(2);
    await expectArrivedOnce(target.url, jobs);
  });

  it("delivers a different job sent under a used job id within the window, and still drops a resend of the same job", async () => {
    // Deduplicated by job id alone, SQS would report the second job sent and drop it: the fence
    // would never see it, and no conflict would be recorded.
    const target = await queue("producer-conflict.fifo");
    const first: JobToSend = { envelope: { job_id: "pay-1", tenant_id: "t_a", payload: { cents: 100 } } };
    const other: JobToSend = { envelope: { job_id: "pay-1", tenant_id: "t_a", payload: { cents: 900 } } };
    const otherTenant: JobToSend = {
      envelope: { job_id: "pay-1", tenant_id: "t_b", payload: { cents: 100 } },
    };
    // The same job, its keys in another order and a correlation id: the same fingerprint.
    const resend: JobToSend = {
      envelope: { correlation_id: "retry-2", payload: { cents: 100.0 }, tenant_id: "t_a", job_id: "pay-1" },
    };
    for (const job of [first, other, otherTenant, resend, first]) {
      const result = await sendJobs(sqs, target.url, [job]);
      expect(result.failed).toEqual([]);
    }
    const bodies = (await receiveAll(sqs, target.url)).map((m) => JSON.parse(m.Body ?? ""));
    expect(bodies.map((b) => [b.tenant_id, b.payload.cents]).sort()).toEqual([
      ["t_a", 100],
      ["t_a", 900],
      ["t_b", 100],
    ]);
  });

  it("the relay deduplicates follow-ups by job id and fingerprint too", async () => {
    const target = await queue("relay-conflict.fifo");
    const row = (cents: number) => ({
      target: "ledger",
      jobId: "ledger:follow-up-1",
      body: JSON.stringify({ job_id: "ledger:follow-up-1", tenant_id: "t_a", payload: { cents } }),
      tenantId: "t_a",
      groupId: null,
      traceparent: null,
    });
    for (const followUp of [row(1), row(2), row(1)]) {
      const report = await sendFollowUps(sqs, { ledger: target.url }, [followUp]);
      expect(report.failed).toEqual([]);
    }
    const messages = await receiveAll(sqs, target.url);
    expect(messages.map((m) => JSON.parse(m.Body ?? "").payload.cents).sort()).toEqual([1, 2]);
    expect(messages.map((m) => m.Attributes?.MessageDeduplicationId).sort()).toEqual(
      [1, 2]
        .map((cents) => fifoDeduplicationId("ledger:follow-up-1", jobFingerprint("t_a", { cents })))
        .sort(),
    );
  });

  it("a replay is not dropped as a duplicate of the job's send, and one replay attempt sent twice (an SDK retry) arrives once", async () => {
    const target = await queue("replay-after-send.fifo");
    const job: JobToSend = { envelope: { job_id: "pay-2", tenant_id: "t_a", payload: { cents: 5 } } };
    expect((await sendJobs(sqs, target.url, [job])).failed).toEqual([]);
    const message = replayMessage({
      id: "6f1c2f9e-8d4b-4c55-9a0e-1e2f3a4b5c6d",
      job_id: "pay-2",
      queue: target.url,
      message_attributes: { message_group_id: "t_a" },
      body_form: BODY_FORM.text,
      body: JSON.stringify(job.envelope),
      body_utf16: null,
    });
    for (let i = 0; i < 2; i++)
      await sqs.send(
        new SendMessageBatchCommand({ QueueUrl: target.url, Entries: [{ Id: "0", ...message }] }),
      );
    const messages = await receiveAll(sqs, target.url);
    expect(messages.map((m) => m.Body)).toEqual([JSON.stringify(job.envelope), JSON.stringify(job.envelope)]);
  });

  it("splits over 1 MiB on FIFO too, and every job arrives once", async () => {
    const target = await queue("producer-large.fifo");
    const c = client();
    const calls = recordBatches(c);
    const jobs = Array.from({ length: 7 }, (_, i) => jobOfSize(`fifo-big-${i}`, 400_000));
    const result = await sendJobs(c, target.url, jobs);
    expect(result.failed).toEqual([]);
    expect(calls.map((entries) => entries.length)).toEqual([2, 2, 2, 1]);
    expectWithinLimits(calls);
    await expectArrivedOnce(target.url, jobs);
  });
});

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe("npm run send (local/send.ts)", () => {
  const notes = z.object({ text: z.string().min(1) });
  const consumers: SendableConsumer[] = [
    {
      definition: {
        name: "award-points",
        payload: z.object({ user_id: z.string(), points: z.number().int().positive() }),
      },
    },
    { definition: { name: "notes", payload: notes } },
    { definition: { name: "ordered", payload: notes } },
  ];
  let dirs = 0;

  /** A local dir whose stack.json points at the emulator, with a queue per consumer given. */
  async function stack(queueUrls: Record<string, string>, endpoint = emulator.endpoint): Promise<string> {
    const dir = join(tmp, `stack-${++dirs}`);
    const { mkdir } = await import("node:fs/promises");
    await mkdir(dir, { recursive: true });
    const info: Partial<StackInfo> = {
      sqsEndpoint: endpoint,
      region: "eu-west-1",
      queues: Object.fromEntries(
        Object.entries(queueUrls).map(([name, url]) => [name, { url, backstopUrl: `${url}-backstop` }]),
      ),
    };
    await writeFile(join(dir, "stack.json"), JSON.stringify(info));
    return dir;
  }

  async function run(argv: string[], localDir: string, key = "fixed-key") {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runSend(argv, {
      out: (line) => out.push(line),
      err: (line) => err.push(line),
      localDir,
      consumers,
      randomKey: () => key,
      sendOptions: { sleep: async () => {} },
    });
    return { code, out: out.join("\n"), err: err.join("\n") };
  }

  it("sends one checked job with a derived id, says how to send it again, and does", async () => {
    const target = await queue("send-award");
    const dir = await stack({ "award-points": target.url });
    const first = await run(["award-points", '{"user_id":"u-1","points":5}'], dir, "k-1");
    expect(first.err).toBe("");
    expect(first.code).toBe(0);
    const jobId = deriveJobId("award-points", "k-1", 1);
    expect(first.out).toContain("sending 1 award-points job to");
    expect(first.out).toContain("job id derived from key k-1: pass --key k-1 to send the same job again");
    expect(first.out).toMatch(new RegExp(`sent {4}${jobId} {2}message \\S+`));
    expect(first.out).toContain("1 sent, 0 failed");

    const again = await run(["award-points", '{"user_id":"u-1","points":5}', "--key", "k-1"], dir, "other");
    expect(again.code).toBe(0);
    expect(again.out).toContain(`sent    ${jobId}`);

    // The same job twice on a standard queue: two messages, one job id; the fence absorbs the second.
    const messages = await receiveAll(sqs, target.url);
    expect(messages.map((m) => JSON.parse(m.Body ?? ""))).toEqual([
      { job_id: jobId, tenant_id: "t_local", payload: { user_id: "u-1", points: 5 } },
      { job_id: jobId, tenant_id: "t_local", payload: { user_id: "u-1", points: 5 } },
    ]);
  });

  it("takes --job-id, --tenant, --correlation-id, and --count with ids from the key", async () => {
    const target = await queue("send-notes");
    const dir = await stack({ notes: target.url });
    const named = await run(
      ["notes", '{"text":"hi"}', "--job-id", "note-1", "--tenant", "t_9", "--correlation-id", "req-1"],
      dir,
    );
    expect(named.code).toBe(0);
    expect(named.out).not.toContain("derived");
    const counted = await run(["notes", '{"text":"hi"}', "--count", "3", "--key", "batch-7"], dir);
    expect(counted.code).toBe(0);
    expect(counted.out).toContain("pass --key batch-7 --count 3 to send the same jobs again");
    const ids = [1, 2, 3].map((n) => deriveJobId("notes", "batch-7", n));
    expect(counted.out).toContain("3 sent, 0 failed");

    const bodies = (await receiveAll(sqs, target.url)).map((m) => JSON.parse(m.Body ?? ""));
    expect(bodies).toContainEqual({
      job_id: "note-1",
      tenant_id: "t_9",
      correlation_id: "req-1",
      payload: { text: "hi" },
    });
    expect(bodies.map((b) => b.job_id).sort()).toEqual(["note-1", ...ids].sort());
  });

  it("sends to a FIFO consumer with the tenant as the group", async () => {
    const target = await queue("send-ordered.fifo");
    const dir = await stack({ ordered: target.url });
    const result = await run(["ordered", '{"text":"one"}', "--tenant", "t_f", "--count", "2"], dir);
    expect(result.code).toBe(0);
    const messages = await receiveAll(sqs, target.url);
    expect(messages.map((m) => m.Attributes?.MessageGroupId)).toEqual(["t_f", "t_f"]);
    expect(messages.map((m) => m.Attributes?.MessageDeduplicationId)).toEqual(
      [1, 2].map((n) =>
        fifoDeduplicationId(deriveJobId("ordered", "fixed-key", n), jobFingerprint("t_f", { text: "one" })),
      ),
    );
  });

  it("exits 1 and prints each job SQS refused", async () => {
    const target = await queue("send-small-max", { MaximumMessageSize: "1024" });
    const dir = await stack({ notes: target.url });
    const result = await run(["notes", JSON.stringify({ text: "x".repeat(2000) }), "--job-id", "big"], dir);
    expect(result.code).toBe(1);
    expect(result.err).toMatch(/^failed {2}big {2}InvalidParameterValue: .*\(the job is at fault: fix it\)$/);
    expect(result.out).toContain("0 sent, 1 failed");
  });

  it("refuses, exit 2 and nothing sent: usage, unknown consumer, bad JSON, invalid payload or id, no stack", async () => {
    const target = await queue("send-refusals");
    const dir = await stack({ notes: target.url });
    const cases: [string[], string, RegExp][] = [
      [["notes"], dir, /a consumer and a payload are required[\s\S]*usage: npm run send/],
      [["notes", "{}", "--count", "2", "--job-id", "j"], dir, /--job-id names one job/],
      [
        ["nobody", "{}"],
        dir,
        /no consumer "nobody"; the registry \(functions\/consumers.ts\) has: award-points, notes, ordered/,
      ],
      [["notes", "{text:"], dir, /the payload is not JSON/],
      [
        ["notes", '{"text":""}'],
        dir,
        /notes would refuse this job \(invalid-payload\):\n {2}payload\.text: /,
      ],
      [
        ["notes", '{"text":"a"}', "--job-id", " "],
        dir,
        /\(invalid-envelope\):\n {2}job_id: must not be blank/,
      ],
      [["notes", '{"text":"a"}', "--tenant", "t".repeat(256)], dir, /tenant_id: must be at most 255/],
      [
        ["notes", '{"text":"a"}'],
        join(tmp, "no-stack-here"),
        /no running local stack found \(.*stack\.json\): start one with npm start/,
      ],
      [["award-points", '{"user_id":"u","points":1}'], dir, /has no queue for award-points/],
    ];
    for (const [argv, localDir, message] of cases) {
      const result = await run(argv, localDir);
      expect({ argv, code: result.code }).toEqual({ argv, code: 2 });
      expect(result.err).toMatch(message);
      expect(result.out).toBe("");
    }

    // A stack.json left behind by a stack that is no longer running.
    const stale = await stack({ notes: target.url }, `http://127.0.0.1:${await closedPort()}`);
    const result = await run(["notes", '{"text":"a"}'], stale);
    expect(result.code).toBe(2);
    expect(result.err).toMatch(/does not answer at http:\/\/127\.0\.0\.1:\d+ .*: start it with npm start/);

    expect(await queueDepth(sqs, target.url)).toBe(0);
  });

  it("--raw and --raw-file send the body unchanged and unchecked; wrong combinations and unusable bodies are refused", async () => {
    const target = await queue("send-raw");
    const dir = await stack({ notes: target.url });
    const bodies = [
      '{"job_id": "half',
      "not JSON at all",
      '{"job_id":"j","tenant_id":"t","payload":{"text":""}}',
      "é ✓ \\u0000",
    ];
    for (const body of bodies) {
      const result = await run(["notes", "--raw", body], dir);
      expect(result.err).toBe("");
      expect(result.code).toBe(0);
      expect(result.out).toMatch(
        /^sending a raw body of \d+ bytes to .*, unchecked\nsent {4}message \S+\na body notes cannot read is dead-lettered as poison/,
      );
    }
    const file = join(tmp, "raw-body.txt");
    await writeFile(file, "line one\nline two\n");
    expect((await run(["notes", "--raw-file", file], dir)).code).toBe(0);
    expect((await receiveAll(sqs, target.url)).map((m) => m.Body)).toEqual([
      ...bodies,
      "line one\nline two\n",
    ]);

    const depth = await queueDepth(sqs, target.url); // received, not deleted
    const notUtf8 = join(tmp, "raw-latin1.bin");
    await writeFile(notUtf8, Buffer.from([0x63, 0x61, 0x66, 0xe9]));
    const cases: [string[], RegExp][] = [
      [["notes", "--raw", "x", "--raw-file", file], /give --raw or --raw-file, not both/],
      [["notes", "{}", "--raw", "x"], /give the consumer only, no payload/],
      [["notes", "--raw", "x", "--job-id", "j"], /--job-id builds a job; a raw body is sent as it is/],
      [["notes", "--raw", ""], /the body is empty/],
      [["notes", "--raw-file", join(tmp, "missing.txt")], /cannot read .*missing\.txt \(ENOENT\)/],
      [["notes", "--raw-file", notUtf8], /raw-latin1\.bin is not UTF-8 text/],
      [["nobody", "--raw", "x"], /no consumer "nobody"/],
    ];
    for (const [argv, message] of cases) {
      const result = await run(argv, dir);
      expect({ argv, code: result.code }).toEqual({ argv, code: 2 });
      expect(result.err).toMatch(message);
    }
    expect(await queueDepth(sqs, target.url)).toBe(depth);
  });

  it("uses the registry of functions/consumers.ts by default", async () => {
    const target = await queue("send-registry");
    const dir = await stack({ "award-points": target.url });
    const out: string[] = [];
    const err: string[] = [];
    const io = { out: (l: string) => out.push(l), err: (l: string) => err.push(l), localDir: dir };
    expect(await runSend(["award-points", '{"user_id":"u","points":0}'], io)).toBe(2);
    expect(err.join("\n")).toMatch(/payload\.points: /);
    expect(await runSend(["award-points", '{"user_id":"u","points":3}'], io)).toBe(0);
    expect(await queueDepth(sqs, target.url)).toBe(1);
  });
});
