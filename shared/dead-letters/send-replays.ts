/**
 * Sending replayed messages to SQS for a bulk operation: grouped by queue and packed into
 * SendMessageBatch calls by SQS's rules (shared/sqs/batches.ts). The one policy of its own is for a
 * message over SQS's single-message limit: it is sent alone, so that SQS refuses it on its own
 * (InvalidParameterValue, a sender's fault: the dead letter is reported refused) without failing
 * nine others with it. This is the impure edge.
 */
import { SendMessageBatchCommand, SendMessageCommand, type SQSClient } from "@aws-sdk/client-sqs";
import { TransientSendError } from "../errors/dead-letter.ts";
import { messageSize, packBatches } from "../sqs/batches.ts";
import { errorCode, isTransientSendError } from "../sqs/send-errors.ts";
import type { ReplayMessage } from "./replay-message.ts";

/** One message to send for a dead letter. */
export interface OutgoingReplay {
  readonly id: string;
  readonly queue: string;
  readonly message: ReplayMessage;
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
  if (isTransientSendError(error)) return "SQS could not be reached in time";
  return "SQS refused the message";
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
        if (pack.kind === "oversize") {
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
        if (isTransientSendError(error))
          throw new TransientSendError(`SQS could not be reached (${errorCode(error)})`, { cause: error });
        const items = pack.kind === "oversize" ? [pack.item] : pack.items;
        for (const r of items) refused.set(r.id, `SQS refused the message: ${errorCode(error)}`);
      }
    }
  }
  return refused;
}
