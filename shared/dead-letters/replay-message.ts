/**
 * The message a replay sends: the body exactly as it was received (same job_id, correlation_id and
 * payload, byte for byte), its message attributes, and on a FIFO queue its message group. Pure.
 */
import { randomBytes } from "node:crypto";
import type { MessageAttributeValue, SendMessageBatchRequestEntry } from "@aws-sdk/client-sqs";
import { bodyOf, type StoredBodyColumns } from "../db/stored-body.ts";
import { replayDeduplicationId } from "../producer/fifo-ids.ts";
import { messageSize, SQS_SEND_LIMITS } from "../sqs/batches.ts";
import { isFifoQueue } from "../sqs/queue-url.ts";
import { TRACEPARENT_ATTRIBUTE } from "../tracing/trace-context.ts";

/** What a replay needs of a dead letter. */
export interface ReplaySource extends StoredBodyColumns {
  readonly id: string;
  readonly job_id: string;
  readonly queue: string;
  readonly message_attributes: Record<string, unknown>;
}

/** A message to send: SendMessageBatch's entry without its batch-local Id. */
export type ReplayMessage = Omit<SendMessageBatchRequestEntry, "Id">;

/** Lambda's record shape of a message attribute, as the harness stored it. */
interface StoredAttribute {
  dataType?: unknown;
  stringValue?: unknown;
  binaryValue?: unknown;
}

/** The SQS message attributes to send again, from the stored Lambda-shaped ones. */
export function replayAttributes(stored: Record<string, unknown>): Record<string, MessageAttributeValue> {
  const attributes: Record<string, MessageAttributeValue> = {};
  const source = (stored.message_attributes ?? {}) as Record<string, StoredAttribute>;
  for (const [name, value] of Object.entries(source)) {
    if (typeof value?.dataType !== "string") continue;
    if (typeof value.stringValue === "string") {
      attributes[name] = { DataType: value.dataType, StringValue: value.stringValue };
    } else if (typeof value.binaryValue === "string") {
      attributes[name] = { DataType: value.dataType, BinaryValue: Buffer.from(value.binaryValue, "base64") };
    }
  }
  return attributes;
}

/**
 * The full message, with `traceparent` (the replay's trace context) when given. On a FIFO queue it
 * keeps its message group (ordering) and gets a deduplication id of this replay attempt
 * (replayDeduplicationId: the dead letter's id and a fresh nonce), so it is never dropped as a
 * duplicate of the job's original send, nor of an earlier attempt whose answer was lost: a copy
 * that attempt did deliver may have failed again and merged into the row, which this attempt then
 * resolves. The fence absorbs an extra copy when the job applies.
 */
export function replayMessage(source: ReplaySource, traceparent: string | null = null): ReplayMessage {
  const received = replayAttributes(source.message_attributes);
  // The replay's own trace context, continuing the dead letter's trace, replaces the one it came
  // with, unless the attribute would make a message SQS took too large to be taken again.
  const traced =
    traceparent === null
      ? received
      : { ...received, [TRACEPARENT_ATTRIBUTE]: { DataType: "String", StringValue: traceparent } };
  const fits =
    messageSize({ MessageBody: bodyOf(source), MessageAttributes: traced }) <= SQS_SEND_LIMITS.messageBytes;
  const attributes = fits ? traced : received;
  const message: ReplayMessage = { MessageBody: bodyOf(source) };
  if (Object.keys(attributes).length > 0) message.MessageAttributes = attributes;
  if (isFifoQueue(source.queue)) {
    const group = source.message_attributes.message_group_id;
    message.MessageGroupId =
      typeof group === "string" && group.length > 0 ? group : source.job_id.slice(0, 128);
    message.MessageDeduplicationId = replayDeduplicationId(source.id, randomBytes(12).toString("base64url"));
  }
  return message;
}
