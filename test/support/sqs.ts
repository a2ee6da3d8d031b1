/**
 * The tests' one set of SQS helpers: creating a queue, sending one message or many, receiving
 * what a queue holds and counting it, through the SQS API (so they work against the in-process
 * emulator, a proxy in front of it, or a stack in another process), plus an exact count read from
 * the in-process emulator itself.
 */
import {
  GetQueueAttributesCommand,
  type Message,
  type MessageAttributeValue,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import type { SqsEmulator } from "../../local/sqs-emulator.ts";
import { createTestQueue } from "../../testing/queue.ts";

/** A queue the test created. */
export interface TestQueue {
  readonly url: string;
  readonly arn: string;
}

/**
 * Creates a queue and returns its URL under `endpoint` (the emulator's, or a proxy's in front of
 * it) and its ARN. The URL is path-style: the emulator's own URLs name a host that does not resolve.
 */
export async function createQueue(
  sqs: SQSClient,
  endpoint: string,
  name: string,
  attributes: Record<string, string> = {},
): Promise<TestQueue> {
  // The testing kit's: one way to address an emulator queue.
  const { url, arn } = await createTestQueue(sqs, endpoint, name, attributes);
  return { url, arn };
}

/** What {@link sendMessage} may set beside the body. */
export interface SendOptions {
  readonly groupId?: string;
  readonly dedupId?: string;
  readonly attributes?: Record<string, MessageAttributeValue>;
}

/** Sends one message: a string as it is, anything else as JSON. Returns its MessageId. */
export async function sendMessage(
  sqs: SQSClient,
  queueUrl: string,
  body: unknown,
  options: SendOptions = {},
): Promise<string> {
  const sent = await sqs.send(
    new SendMessageCommand({
      QueueUrl: queueUrl,
      MessageBody: typeof body === "string" ? body : JSON.stringify(body),
      ...(options.groupId ? { MessageGroupId: options.groupId } : {}),
      ...(options.dedupId ? { MessageDeduplicationId: options.dedupId } : {}),
      ...(options.attributes ? { MessageAttributes: options.attributes } : {}),
    }),
  );
  if (!sent.MessageId) throw new Error("SendMessage returned no MessageId");
  return sent.MessageId;
}

/** Sends every body, ten per SendMessageBatch; throws if any entry failed. */
export async function sendBatch(sqs: SQSClient, queueUrl: string, bodies: readonly string[]): Promise<void> {
  for (let i = 0; i < bodies.length; i += 10) {
    const result = await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: bodies.slice(i, i + 10).map((body, j) => ({ Id: String(j), MessageBody: body })),
      }),
    );
    if (result.Failed && result.Failed.length > 0)
      throw new Error(`SendMessageBatch failed: ${JSON.stringify(result.Failed)}`);
  }
}

/** Receives every ready message of a queue, with all attributes (they stay in flight for five minutes). */
export async function receiveAll(sqs: SQSClient, queueUrl: string): Promise<Message[]> {
  const messages: Message[] = [];
  for (let round = 0; round < 100; round++) {
    const { Messages = [] } = await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: 10,
        VisibilityTimeout: 300,
        WaitTimeSeconds: 0,
        MessageAttributeNames: ["All"],
        MessageSystemAttributeNames: ["All"],
      }),
    );
    if (Messages.length === 0) return messages;
    messages.push(...Messages);
  }
  throw new Error(`${queueUrl} did not run dry`);
}

/** A queue's messages by state, as GetQueueAttributes reports them. */
export interface QueueCounts {
  readonly visible: number;
  /** Received and not deleted. */
  readonly inFlight: number;
  readonly delayed: number;
}

/** A queue's visible, in-flight and delayed message counts. */
export async function queueCounts(sqs: SQSClient, queueUrl: string): Promise<QueueCounts> {
  const { Attributes: a = {} } = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
      ],
    }),
  );
  return {
    visible: Number(a.ApproximateNumberOfMessages ?? 0),
    inFlight: Number(a.ApproximateNumberOfMessagesNotVisible ?? 0),
    delayed: Number(a.ApproximateNumberOfMessagesDelayed ?? 0),
  };
}

/** Messages a queue still holds: visible, in flight and delayed. */
export async function queueDepth(sqs: SQSClient, queueUrl: string): Promise<number> {
  const c = await queueCounts(sqs, queueUrl);
  return c.visible + c.inFlight + c.delayed;
}

/** Waits until the queue holds nothing (visible, in flight or delayed); throws with the counts after `timeoutMs`. */
export async function waitForEmptyQueue(
  sqs: SQSClient,
  queueUrl: string,
  timeoutMs = 30_000,
): Promise<QueueCounts> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const counts = await queueCounts(sqs, queueUrl);
    if (counts.visible + counts.inFlight + counts.delayed === 0) return counts;
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${queueUrl} to drain; last: ${JSON.stringify(counts)}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/**
 * Messages a queue of the in-process emulator holds (ready, delayed and in flight), read from the
 * emulator itself without touching them: exact, and synchronous.
 */
export function messagesIn(emulator: SqsEmulator, queueName: string): number {
  const queue = emulator.server.inspectQueue(queueName);
  if (!queue) throw new Error(`the emulator has no queue ${queueName}`);
  return queue.messages.ready.length + queue.messages.delayed.length + queue.messages.inflight.length;
}
