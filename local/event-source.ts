/**
 * What Lambda's SQS event source mapping does, one batch at a time: receive with every attribute,
 * hand the handler a real-shaped SQS event, and delete exactly the records it did not report in
 * `batchItemFailures`; an invocation that outlives the function timeout deletes nothing, so the
 * whole batch comes back after the visibility timeout. The local stack's poller loops over it;
 * tests call it directly.
 */
import {
  DeleteMessageBatchCommand,
  type Message,
  ReceiveMessageCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import type { Context, SQSBatchResponse, SQSEvent, SQSMessageAttributes, SQSRecord } from "aws-lambda";
import { AWS_CLIENT_DEFAULTS } from "../shared/aws/clients.ts";
import { LOCAL_REGION } from "./aws-clients.ts";

/** An SQS-triggered handler, as the consumer factory returns it. */
export type SqsHandler = (event: SQSEvent, context: Context) => Promise<SQSBatchResponse>;

/** Which queue to poll and how. */
export interface QueueSource {
  readonly sqs: SQSClient;
  readonly queueUrl: string;
  readonly queueArn: string;
  /** @default 10 */
  readonly batchSize?: number;
  /** Long-poll wait. @default 0 */
  readonly waitSeconds?: number;
}

/** What one delivery did. */
export interface DeliveryResult {
  readonly received: readonly SQSRecord[];
  /**
   * The records that come back after the visibility timeout: those the handler reported in
   * `batchItemFailures`, or every record when the invocation timed out.
   */
  readonly failedIds: readonly string[];
  readonly deletedIds: readonly string[];
  /** Whether the function timeout passed before the handler returned (nothing was deleted). */
  readonly timedOut: boolean;
}

/** Options of {@link deliver}. */
export interface DeliverOptions {
  /**
   * The function timeout, in milliseconds from the start of the invocation.
   * @default what the context's `getRemainingTimeInMillis()` says when the invocation starts; no
   * timeout for a context without that clock
   */
  readonly timeoutMs?: number;
}

/** Converts a received message to the record shape Lambda delivers. */
export function toSqsRecord(message: Message, queueArn: string): SQSRecord {
  const attributes = message.Attributes ?? {};
  const messageAttributes: SQSMessageAttributes = {};
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    messageAttributes[name] = {
      dataType: value.DataType ?? "String",
      ...(value.StringValue !== undefined ? { stringValue: value.StringValue } : {}),
      ...(value.BinaryValue !== undefined
        ? { binaryValue: Buffer.from(value.BinaryValue).toString("base64") }
        : {}),
      stringListValues: [],
      binaryListValues: [],
    };
  }
  return {
    messageId: message.MessageId ?? "",
    receiptHandle: message.ReceiptHandle ?? "",
    body: message.Body ?? "",
    attributes: {
      ApproximateReceiveCount: attributes.ApproximateReceiveCount ?? "1",
      SentTimestamp: attributes.SentTimestamp ?? String(Date.now()),
      SenderId: attributes.SenderId ?? "local",
      ApproximateFirstReceiveTimestamp: attributes.ApproximateFirstReceiveTimestamp ?? String(Date.now()),
      ...(attributes.MessageGroupId !== undefined ? { MessageGroupId: attributes.MessageGroupId } : {}),
      ...(attributes.MessageDeduplicationId !== undefined
        ? { MessageDeduplicationId: attributes.MessageDeduplicationId }
        : {}),
      ...(attributes.SequenceNumber !== undefined ? { SequenceNumber: attributes.SequenceNumber } : {}),
    },
    messageAttributes,
    md5OfBody: message.MD5OfBody ?? "",
    eventSource: "aws:sqs",
    eventSourceARN: queueArn,
    awsRegion: LOCAL_REGION,
  };
}

/** Receives up to one batch; an empty receive returns no records and does not invoke the handler. */
export async function receiveRecords(source: QueueSource, signal?: AbortSignal): Promise<SQSRecord[]> {
  const waitSeconds = source.waitSeconds ?? 0;
  const received = await source.sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: source.queueUrl,
      MaxNumberOfMessages: source.batchSize ?? 10,
      WaitTimeSeconds: waitSeconds,
      MessageSystemAttributeNames: ["All"],
      MessageAttributeNames: ["All"],
    }),
    {
      ...(signal ? { abortSignal: signal } : {}),
      // A long poll is answered only after up to waitSeconds: the client's request timeout
      // (shared/aws/clients.ts) counts from the end of the wait.
      ...(waitSeconds > 0
        ? { requestTimeout: waitSeconds * 1000 + AWS_CLIENT_DEFAULTS.requestTimeoutMs }
        : {}),
    },
  );
  return (received.Messages ?? []).map((m) => toSqsRecord(m, source.queueArn));
}

/** The function timeout of an invocation starting now, or undefined for none. */
function functionTimeoutMs(context: Context, options: DeliverOptions): number | undefined {
  if (options.timeoutMs !== undefined) return options.timeoutMs;
  const remaining =
    typeof context?.getRemainingTimeInMillis === "function" ? context.getRemainingTimeInMillis() : undefined;
  return remaining !== undefined && Number.isFinite(remaining) ? remaining : undefined;
}

const TIMED_OUT = Symbol("timed out");

/**
 * Invokes the handler with the records and deletes those it did not report as failures.
 *
 * The handler races the function timeout. When the timeout wins, nothing is deleted, as with
 * Lambda: the invocation failed, so the whole batch (records the handler finished included) comes
 * back after the visibility timeout. Unlike Lambda, which freezes and then discards the execution
 * environment, the handler's promise may go on running in this process, and what it does later
 * (a commit, a ChangeMessageVisibility) still happens; its eventual result or error is ignored.
 */
export async function deliver(
  source: QueueSource,
  records: readonly SQSRecord[],
  handler: SqsHandler,
  context: Context,
  options: DeliverOptions = {},
): Promise<DeliveryResult> {
  if (records.length === 0) return { received: [], failedIds: [], deletedIds: [], timedOut: false };
  const timeoutMs = functionTimeoutMs(context, options);
  const invocation = Promise.resolve().then(() => handler({ Records: [...records] }, context));
  let response: SQSBatchResponse | undefined;
  if (timeoutMs === undefined) {
    response = await invocation;
  } else {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<typeof TIMED_OUT>((resolve) => {
      timer = setTimeout(() => resolve(TIMED_OUT), Math.max(0, timeoutMs));
    });
    let outcome: SQSBatchResponse | typeof TIMED_OUT;
    try {
      outcome = await Promise.race([invocation, timeout]);
    } finally {
      clearTimeout(timer);
    }
    if (outcome === TIMED_OUT) {
      invocation.catch(() => {}); // a rejection after the timeout has no one to tell
      return {
        received: records,
        failedIds: records.map((r) => r.messageId),
        deletedIds: [],
        timedOut: true,
      };
    }
    response = outcome;
  }
  const failedIds = (response?.batchItemFailures ?? []).map((f) => f.itemIdentifier);
  const failed = new Set(failedIds);
  const toDelete = records.filter((r) => !failed.has(r.messageId));
  if (toDelete.length > 0) {
    const result = await source.sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl: source.queueUrl,
        Entries: toDelete.map((r, i) => ({ Id: String(i), ReceiptHandle: r.receiptHandle })),
      }),
    );
    if (result.Failed && result.Failed.length > 0) {
      throw new Error(
        `could not delete ${result.Failed.length} processed message(s): ${result.Failed[0]?.Message}`,
      );
    }
  }
  return { received: records, failedIds, deletedIds: toDelete.map((r) => r.messageId), timedOut: false };
}

/** Receives one batch and delivers it. */
export async function pollOnce(
  source: QueueSource,
  handler: SqsHandler,
  context: Context,
  options: DeliverOptions = {},
): Promise<DeliveryResult> {
  return deliver(source, await receiveRecords(source), handler, context, options);
}
