/**
 * SQS's rules for SendMessageBatch, and how a list of messages is cut into calls that keep to them.
 * Pure.
 *
 * SQS takes at most 10 entries per batch, and at most 1 MiB (1,048,576 bytes) both for one message
 * and for a batch's total, counting each message's body and, for each attribute, its name, data
 * type and value ({@link messageSize}). A batch over the total is refused whole
 * (BatchRequestTooLong), which would fail nine good messages with one large one, so packing never
 * makes one. A message over the single limit fits no batch: packing sets it apart, and each caller
 * decides what to do with it (the producer fails it without a call; a replay sends it alone, for
 * SQS to refuse on its own).
 */
import type { SendMessageBatchRequestEntry } from "@aws-sdk/client-sqs";

/** The limits packing keeps to. */
export interface BatchLimits {
  /** Entries per batch. */
  readonly entries: number;
  /** A batch's total size. */
  readonly batchBytes: number;
  /** One message's size; may be lowered to a queue's MaximumMessageSize. */
  readonly messageBytes: number;
}

/** SQS's own limits. */
export const SQS_SEND_LIMITS: BatchLimits = Object.freeze({
  entries: 10,
  batchBytes: 1_048_576,
  messageBytes: 1_048_576,
});

/** What of a message SQS counts against the limits. */
export type SizedMessage = Pick<SendMessageBatchRequestEntry, "MessageBody" | "MessageAttributes">;

/**
 * A message's size as SQS counts it, alone and against the batch total: the body's UTF-8 bytes,
 * and for each attribute its name, its data type and its value.
 */
export function messageSize(message: SizedMessage): number {
  let size = Buffer.byteLength(message.MessageBody ?? "", "utf8");
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    size += Buffer.byteLength(name, "utf8") + Buffer.byteLength(value.DataType ?? "", "utf8");
    if (value.StringValue !== undefined) size += Buffer.byteLength(value.StringValue, "utf8");
    if (value.BinaryValue !== undefined) size += value.BinaryValue.byteLength;
  }
  return size;
}

/** One step of a packing: a batch within every limit, or one item over the single-message limit. */
export type Pack<T> =
  | { readonly kind: "batch"; readonly items: readonly T[] }
  | { readonly kind: "oversize"; readonly item: T };

/**
 * Packs items in input order: a batch is closed when the next item would take it past the entry
 * count or the byte total. An item over the message limit (or the batch total) is an `oversize`
 * pack of its own: it does not close the batch being filled, so it comes before that batch. Every
 * item is in exactly one pack, and the batches' items are in input order.
 */
export function packBatches<T>(
  items: readonly T[],
  sizeOf: (item: T) => number,
  limits: BatchLimits = SQS_SEND_LIMITS,
): Pack<T>[] {
  const packs: Pack<T>[] = [];
  let current: T[] = [];
  let bytes = 0;
  const close = () => {
    if (current.length > 0) packs.push({ kind: "batch", items: current });
    current = [];
    bytes = 0;
  };
  for (const item of items) {
    const size = sizeOf(item);
    if (size > limits.messageBytes || size > limits.batchBytes) {
      packs.push({ kind: "oversize", item });
      continue;
    }
    if (current.length === limits.entries || bytes + size > limits.batchBytes) close();
    current.push(item);
    bytes += size;
  }
  close();
  return packs;
}
