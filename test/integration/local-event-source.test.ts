/**
 * The local event source does not hide what SQS and Lambda do to a consumer:
 *
 * - FIFO batching (local/sqs-emulator.ts): one receive returns several messages of a message
 *   group, in send order, as SQS does (fauxqs alone returns one per group); a group with a message
 *   in flight gives nothing more until it is deleted or visible again; messages made visible again
 *   come back in send order with their receive count up; the redrive to a dead-letter queue still
 *   happens after maxReceiveCount.
 * - Invocation timeouts (local/event-source.ts, local/poller.ts): a handler that outlives the
 *   function timeout deletes nothing, and its whole batch comes back after the visibility timeout.
 */
import {
  ChangeMessageVisibilityBatchCommand,
  ChangeMessageVisibilityCommand,
  DeleteMessageCommand,
  type Message,
  ReceiveMessageCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import type { SQSBatchResponse, SQSEvent } from "aws-lambda";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LOCAL_REGION, localSqsClient } from "../../local/aws-clients.ts";
import { deliver, type QueueSource, receiveRecords } from "../../local/event-source.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { type InvocationTimeout, startPoller } from "../../local/poller.ts";
import { type SqsEmulator, startSqsEmulator } from "../../local/sqs-emulator.ts";
import { createSqsClient } from "../../shared/aws/clients.ts";
import { createQueue, messagesIn, sendMessage, type TestQueue } from "../support/sqs.ts";

let emulator: SqsEmulator;
let sqs: SQSClient;

beforeAll(async () => {
  emulator = await startSqsEmulator();
  sqs = localSqsClient(emulator.endpoint);
});

afterAll(async () => {
  sqs?.destroy();
  await emulator?.stop();
});

let queues = 0;
/** A fresh queue name for each test. */
const queueName = (base: string) => `${base}-${++queues}`;

/** A FIFO queue (content-based deduplication); returns it with its name. */
async function fifoQueue(
  base: string,
  attributes: Record<string, string> = {},
): Promise<TestQueue & { name: string }> {
  const name = `${queueName(base)}.fifo`;
  const queue = await createQueue(sqs, emulator.endpoint, name, {
    FifoQueue: "true",
    ContentBasedDeduplication: "true",
    VisibilityTimeout: "30",
    ...attributes,
  });
  return { ...queue, name };
}

/** Sends each body to its group (`g1` goes to group `g`), one SendMessage each, in the order given. */
async function sendToGroups(queueUrl: string, bodies: readonly string[]): Promise<void> {
  for (const body of bodies) await sendMessage(sqs, queueUrl, body, { groupId: body.replace(/\d+$/, "") });
}

/** One ReceiveMessage, no waiting, every attribute. */
async function receive(queueUrl: string, max = 10): Promise<Message[]> {
  const { Messages = [] } = await sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: queueUrl,
      MaxNumberOfMessages: max,
      WaitTimeSeconds: 0,
      MessageSystemAttributeNames: ["All"],
    }),
  );
  return Messages;
}

/** Bodies by message group, each group's in the order received. */
function bodiesByGroup(messages: readonly Message[]): Record<string, string[]> {
  const groups: Record<string, string[]> = {};
  for (const m of messages) {
    const group = m.Attributes?.MessageGroupId ?? "?";
    groups[group] = [...(groups[group] ?? []), m.Body ?? ""];
  }
  return groups;
}

const bodies = (messages: readonly Message[]) => messages.map((m) => m.Body);
const receiveCounts = (messages: readonly Message[]) =>
  messages.map((m) => m.Attributes?.ApproximateReceiveCount);

async function makeVisible(queueUrl: string, messages: readonly Message[]): Promise<void> {
  const { Failed = [] } = await sqs.send(
    new ChangeMessageVisibilityBatchCommand({
      QueueUrl: queueUrl,
      Entries: messages.map((m, i) => ({
        Id: String(i),
        ReceiptHandle: m.ReceiptHandle as string,
        VisibilityTimeout: 0,
      })),
    }),
  );
  expect(Failed).toEqual([]);
}

async function remove(queueUrl: string, message: Message | undefined): Promise<void> {
  await sqs.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: message?.ReceiptHandle }));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls until the queue hands something out (or `ms` pass). */
async function receiveWhenVisible<T extends unknown[]>(next: () => Promise<T>, ms = 5000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const got = await next();
    if (got.length > 0 || Date.now() > deadline) return got;
    await sleep(50);
  }
}

describe("FIFO receives", () => {
  it("one receive returns several messages of each group, each group in send order", async () => {
    const queue = await fifoQueue("fifo-batch");
    await sendToGroups(queue.url, ["g1", "h1", "g2", "g3", "h2"]);

    const first = await receive(queue.url, 10);
    expect(first).toHaveLength(5);
    expect(bodiesByGroup(first)).toEqual({ g: ["g1", "g2", "g3"], h: ["h1", "h2"] });
    expect(receiveCounts(first)).toEqual(["1", "1", "1", "1", "1"]);
    expect(await receive(queue.url, 10)).toEqual([]);
  });

  it("a receive takes no more than MaxNumberOfMessages, and the rest of a group waits for it", async () => {
    const queue = await fifoQueue("fifo-max");
    await sendToGroups(queue.url, ["g1", "g2", "g3"]);

    expect(bodies(await receive(queue.url, 2))).toEqual(["g1", "g2"]);
    // g3 is ready, but its group has messages in flight.
    expect(await receive(queue.url, 10)).toEqual([]);
  });

  it("a group with a message in flight gives nothing more until it is deleted or visible again", async () => {
    const queue = await fifoQueue("fifo-lock");
    await sendToGroups(queue.url, ["g1", "g2", "g3", "h1", "h2"]);
    const first = await receive(queue.url, 10);
    const g = first.filter((m) => m.Attributes?.MessageGroupId === "g");
    expect(bodies(g)).toEqual(["g1", "g2", "g3"]);

    // Deleting the first of g releases nothing: the rest of g is in flight.
    await remove(queue.url, g[0]);
    expect(await receive(queue.url, 10)).toEqual([]);
    expect(messagesIn(emulator, queue.name)).toBe(4);

    // One of them visible again while another is still in flight: the group still gives nothing.
    await makeVisible(queue.url, [g[2] as Message]);
    expect(await receive(queue.url, 10)).toEqual([]);

    // All of g visible again: g's messages come back, in send order, received a second time.
    await makeVisible(queue.url, [g[1] as Message]);
    const again = await receive(queue.url, 10);
    expect(bodies(again)).toEqual(["g2", "g3"]);
    expect(receiveCounts(again)).toEqual(["2", "2"]);
  });

  it("visibility set to 0 for all of a group's messages makes them receivable again in order", async () => {
    const queue = await fifoQueue("fifo-visible");
    await sendToGroups(queue.url, ["g1", "g2", "g3", "h1", "h2"]);
    const first = await receive(queue.url, 10);
    const g = first.filter((m) => m.Attributes?.MessageGroupId === "g");

    // One at a time, in send order (fauxqs alone puts each back at the head of its group).
    for (const m of g) {
      await sqs.send(
        new ChangeMessageVisibilityCommand({
          QueueUrl: queue.url,
          ReceiptHandle: m.ReceiptHandle,
          VisibilityTimeout: 0,
        }),
      );
    }
    const again = await receive(queue.url, 10);
    expect(bodies(again)).toEqual(["g1", "g2", "g3"]); // h's are still in flight
    expect(receiveCounts(again)).toEqual(["2", "2", "2"]);
  });

  it("messages whose visibility lapses come back in send order", async () => {
    const queue = await fifoQueue("fifo-lapse", { VisibilityTimeout: "1" });
    await sendToGroups(queue.url, ["g1", "g2", "g3"]);
    expect(bodies(await receive(queue.url, 10))).toEqual(["g1", "g2", "g3"]);

    const again = await receiveWhenVisible(() => receive(queue.url, 10));
    expect(bodies(again)).toEqual(["g1", "g2", "g3"]);
    expect(receiveCounts(again)).toEqual(["2", "2", "2"]);
  });

  it("the redrive to the dead-letter queue still happens after maxReceiveCount", async () => {
    const dlq = await fifoQueue("fifo-dlq");
    const queue = await fifoQueue("fifo-redrive", {
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlq.arn, maxReceiveCount: 2 }),
    });
    await sendToGroups(queue.url, ["g1", "g2", "h1"]);

    for (const round of [1, 2]) {
      const got = await receive(queue.url, 10);
      expect(bodiesByGroup(got)).toEqual({ g: ["g1", "g2"], h: ["h1"] });
      expect(receiveCounts(got)).toEqual(["1", "1", "1"].map(() => String(round)));
      await makeVisible(queue.url, got);
    }
    // The third receive would be the third: every message moves to the dead-letter queue instead.
    expect(await receive(queue.url, 10)).toEqual([]);
    expect(messagesIn(emulator, queue.name)).toBe(0);
    const dead = await receive(dlq.url, 10);
    expect(bodiesByGroup(dead)).toEqual({ g: ["g1", "g2"], h: ["h1"] });
  });

  it("a standard queue's receive is unchanged", async () => {
    const name = queueName("standard-batch");
    const queue = await createQueue(sqs, emulator.endpoint, name);
    for (const body of ["a", "b", "c"]) await sendMessage(sqs, queue.url, body);
    expect((await receive(queue.url, 10)).map((m) => m.Body).sort()).toEqual(["a", "b", "c"]);
    expect(await receive(queue.url, 10)).toEqual([]);
  });
});

describe("invocation timeouts", () => {
  /** A standard queue whose messages come back 1 s after a receive, with `count` messages in it. */
  async function queueWith(base: string, count: number): Promise<QueueSource & { name: string }> {
    const name = queueName(base);
    const queue = await createQueue(sqs, emulator.endpoint, name, { VisibilityTimeout: "1" });
    for (let i = 0; i < count; i++) await sendMessage(sqs, queue.url, `m${i}`);
    return { sqs, queueUrl: queue.url, queueArn: queue.arn, name };
  }

  const never = (): Promise<SQSBatchResponse> => new Promise(() => {});

  it("a handler that never resolves times out: nothing is deleted, the batch comes back", async () => {
    const source = await queueWith("timeout", 2);
    const records = await receiveRecords(source);
    expect(records).toHaveLength(2);

    const started = Date.now();
    const result = await deliver(source, records, never, lambdaContext("hangs", 30_000), { timeoutMs: 200 });
    const elapsed = Date.now() - started;
    expect(result.timedOut).toBe(true);
    expect(result.deletedIds).toEqual([]);
    expect([...result.failedIds].sort()).toEqual(records.map((r) => r.messageId).sort());
    expect(elapsed).toBeGreaterThanOrEqual(190);
    expect(elapsed).toBeLessThan(1000);

    // Still in flight, not deleted: nothing to receive until the visibility timeout passes.
    expect(messagesIn(emulator, source.name)).toBe(2);
    expect(await receiveRecords(source)).toEqual([]);
    const again = await receiveWhenVisible(() => receiveRecords(source));
    expect(again.map((r) => r.messageId).sort()).toEqual(records.map((r) => r.messageId).sort());
    expect(again.map((r) => r.attributes.ApproximateReceiveCount)).toEqual(["2", "2"]);
  });

  it("without timeoutMs the function timeout is the context's remaining time", async () => {
    const source = await queueWith("timeout-context", 1);
    const records = await receiveRecords(source);
    const result = await deliver(source, records, never, lambdaContext("hangs", 200));
    expect(result.timedOut).toBe(true);
    expect(result.deletedIds).toEqual([]);
    expect(messagesIn(emulator, source.name)).toBe(1);
  });

  it("a handler that returns in time is delivered as before", async () => {
    const source = await queueWith("in-time", 2);
    const records = await receiveRecords(source);
    const failing = records[0]?.messageId as string;
    const result = await deliver(
      source,
      records,
      async () => {
        await sleep(20);
        return { batchItemFailures: [{ itemIdentifier: failing }] };
      },
      lambdaContext("quick", 30_000),
      { timeoutMs: 1000 },
    );
    expect(result).toMatchObject({ timedOut: false, failedIds: [failing] });
    expect(result.deletedIds).toEqual([records[1]?.messageId]);
    expect(messagesIn(emulator, source.name)).toBe(1);
  });

  it("a handler's error before the timeout still fails the delivery", async () => {
    const source = await queueWith("throws", 1);
    const records = await receiveRecords(source);
    await expect(
      deliver(source, records, async () => Promise.reject(new Error("boom")), lambdaContext("throws"), {
        timeoutMs: 1000,
      }),
    ).rejects.toThrow("boom");
    expect(messagesIn(emulator, source.name)).toBe(1);
  });

  it("the poller reports a timed-out invocation and goes on", async () => {
    const source = await queueWith("poller-timeout", 2);
    const timeouts: InvocationTimeout[] = [];
    const errors: unknown[] = [];
    const invocations: SQSEvent[] = [];
    const poller = startPoller({
      source: { ...source, waitSeconds: 1 },
      handler: async (event) => {
        invocations.push(event);
        if (invocations.length === 1) return never();
        return { batchItemFailures: [] };
      },
      functionName: "poller-timeout",
      concurrency: 1,
      timeoutSeconds: 0.2,
      onError: (error) => errors.push(error),
      onTimeout: (timeout) => timeouts.push(timeout),
    });
    try {
      const deadline = Date.now() + 10_000;
      while (messagesIn(emulator, source.name) > 0 && Date.now() < deadline) await sleep(50);
    } finally {
      await poller.stop();
    }
    expect(errors).toEqual([]);
    expect(timeouts).toHaveLength(1);
    expect(timeouts[0]).toMatchObject({ functionName: "poller-timeout", timeoutMs: 200 });
    expect(timeouts[0]?.records).toHaveLength(2);
    expect(messagesIn(emulator, source.name)).toBe(0);
    // The batch came back once the visibility timeout passed: the later invocations saw it again.
    const redelivered = invocations.slice(1).flatMap((e) => e.Records);
    expect(redelivered.map((r) => r.attributes.ApproximateReceiveCount)).toEqual(["2", "2"]);
  });

  it("a long poll is not cut short by the client's request timeout", async () => {
    const source = await queueWith("long-poll", 0);
    const quick = createSqsClient({
      endpoint: emulator.endpoint,
      region: LOCAL_REGION,
      credentials: { accessKeyId: "local", secretAccessKey: "local" },
      maxAttempts: 1,
      requestTimeoutMs: 300,
    });
    try {
      const started = Date.now();
      expect(await receiveRecords({ ...source, sqs: quick, waitSeconds: 1 })).toEqual([]);
      expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    } finally {
      quick.destroy();
    }
  });
});
