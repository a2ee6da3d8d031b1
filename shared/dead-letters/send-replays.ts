/**
 * Sending replayed messages to SQS for a bulk operation: grouped by queue, packed into
 * SendMessageBatch calls by count (10) and by size (SQS caps a batch's total at 1 MiB, bodies and
 * attributes together), and a message too large for any batch sent alone. Packing is pure; sending
 * is the impure edge.
 */
import { SendMessageBatchCommand, SendMessageCommand, type SQSClient } from "@aws-sdk/client-sqs";
import { TransientSendError } from "../errors.ts";
import type { ReplayMessage } from "./replay-message.ts";

/** SQS's limits on one SendMessageBatch. */
export const SQS_BATCH_LIMITS = Object.freeze({ entries: 10, bytes: 1_048_576 });

/**
 * A message's size as SQS counts it against the batch total: the body's UTF-8 bytes, and for each
 * attribute its name, its data type and its value.
 */
export function messageSize(message: ReplayMessage): number {
  let size = Buffer.byteLength(message.MessageBody ?? "", "utf8");
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    size += Buffer.byteLength(name, "utf8") + Buffer.byteLength(value.DataType ?? "", "utf8");
    if (value.StringValue !== undefined) size += Buffer.byteLength(value.StringValue, "utf8");
    if (value.BinaryValue !== undefined) size += value.BinaryValue.byteLength;
  }
  return size;
}

/** A batch to send: entries that fit one SendMessageBatch, or one message to send alone. */
export type Pack<T> =
  | { readonly kind: "batch"; readonly items: T[] }
  | { readonly kind: "alone"; readonly item: T };

/**
 * Packs items in order: a batch is closed when the next item would take it past either limit. An
 * item larger than the byte limit by itself is sent alone (SQS then takes or refuses it on its own
 * merits, without failing nine others with it).
 */
export function packBatches<T>(
  items: readonly T[],
  sizeOf: (item: T) => number,
  limits: { entries: number; bytes: number } = SQS_BATCH_LIMITS,
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
    if (size > limits.bytes) {
      packs.push({ kind: "alone", item });
      continue;
    }
    if (current.length === limits.entries || bytes + size > limits.bytes) close();
    current.push(item);
    bytes += size;
  }
  close();
  return packs;
}

/** One message to send for a dead letter. */
export interface OutgoingReplay {
  readonly id: string;
  readonly queue: string;
  readonly message: ReplayMessage;
}

/** Whether an SDK error is worth retrying the same request for. */
function isTransient(error: unknown): boolean {
  const e = error as { $fault?: string; $retryable?: unknown; name?: string; code?: string };
  if (e?.$fault === "server" || e?.$retryable) return true;
  return /Timeout|Throttl|Networking|ECONN|EPIPE|ENOTFOUND|EAI_AGAIN|socket hang up/i.test(
    `${e?.name} ${e?.code}`,
  );
}

/**
 * Why SQS did not take a message, in words an operator can act on: never the queue URL, never
 * SQS's own text (both go to the log).
 */
export function sendFailureReason(error: unknown): string {
  const name = `${(error as { name?: string })?.name ?? ""} ${(error as { Code?: string })?.Code ?? ""}`;
  if (/NonExistentQueue|QueueDoesNotExist/i.test(name))
    return "its queue does not exist (deleted or renamed)";
  if (/AccessDenied|NotAuthorized|KmsAccessDenied|KMS/i.test(name))
    return "the API is not allowed to send to its queue";
  if (isTransient(error)) return "SQS could not be reached in time";
  return "SQS refused the message";
}

/** An error SQS gave, as an operator may see it: its code, never the queue URL. */
function codeOf(error: unknown): string {
  const e = error as { name?: string; Code?: string };
  return e?.Code ?? e?.name ?? "Error";
}

/**
 * Sends every message; returns the dead letters SQS refused, with SQS's error code. Throws
 * {@link TransientSendError} when a call failed for a reason that may pass: what was sent before it
 * is sent again on the retry, which the fence absorbs.
 */
export async function sendReplays(
  sqs: SQSClient,
  replays: readonly OutgoingReplay[],
): Promise<Map<string, string>> {
  const refused = new Map<string, string>();
  for (const [queue, queued] of Map.groupBy(replays, (r) => r.queue)) {
    for (const pack of packBatches(queued, (r) => messageSize(r.message))) {
      try {
        if (pack.kind === "alone") {
          await sqs.send(new SendMessageCommand({ QueueUrl: queue, ...pack.item.message }));
          continue;
        }
        const result = await sqs.send(
          new SendMessageBatchCommand({
            QueueUrl: queue,
            Entries: pack.items.map((r, i) => ({ Id: String(i), ...r.message })),
          }),
        );
        for (const failed of result.Failed ?? []) {
          const replay = pack.items[Number(failed.Id)];
          if (!replay) continue;
          if (!failed.SenderFault)
            throw new TransientSendError(`SQS failed an entry on its side (${failed.Code})`);
          refused.set(replay.id, `SQS refused the message: ${failed.Code ?? "error"}`);
        }
      } catch (error) {
        if (error instanceof TransientSendError) throw error;
        if (isTransient(error))
          throw new TransientSendError(`SQS could not be reached (${codeOf(error)})`, { cause: error });
        const items = pack.kind === "alone" ? [pack.item] : pack.items;
        for (const r of items) refused.set(r.id, `SQS refused the message: ${codeOf(error)}`);
      }
    }
  }
  return refused;
}
