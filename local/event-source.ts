/**
 * What Lambda's SQS event source mapping does, one batch at a time: receive with every attribute,
 * hand the handler a real-shaped SQS event, and delete exactly the records it did not report in
 * `batchItemFailures`. The local stack's poller loops over it; tests call it directly.
 */
import {
  DeleteMessageBatchCommand,
  type Message,
  ReceiveMessageCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import type { Context, SQSBatchResponse, SQSEvent, SQSMessageAttributes, SQSRecord } from "aws-lambda";
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
  readonly failedIds: readonly string[];
  readonly deletedIds: readonly string[];
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
  const received = await source.sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: source.queueUrl,
      MaxNumberOfMessages: source.batchSize ?? 10,
      WaitTimeSeconds: source.waitSeconds ?? 0,
      MessageSystemAttributeNames: ["All"],
      MessageAttributeNames: ["All"],
    }),
    signal ? { abortSignal: signal } : {},
  );
  return (received.Messages ?? []).map((m) => toSqsRecord(m, source.queueArn));
}

/** Invokes the handler with the records and deletes those it did not report as failures. */
export async function deliver(
  source: QueueSource,
  records: readonly SQSRecord[],
  handler: SqsHandler,
  context: Context,
): Promise<DeliveryResult> {
  if (records.length === 0) return { received: [], failedIds: [], deletedIds: [] };
  const response = await handler({ Records: [...records] }, context);
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
  return { received: records, failedIds, deletedIds: toDelete.map((r) => r.messageId) };
}

/** Receives one batch and delivers it. */
export async function pollOnce(
  source: QueueSource,
  handler: SqsHandler,
  context: Context,
): Promise<DeliveryResult> {
  return deliver(source, await receiveRecords(source), handler, context);
}
