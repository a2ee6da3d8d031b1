/**
 * Replay and discard (docs/design.md §6). Each decision locks the dead letter, so of a concurrent replay and
 * discard exactly one wins and the other finds it no longer pending (409).
 *
 * Replay: lock → (fence exists → superseded, nothing sent) → SendMessage the stored envelope →
 * mark replayed → COMMIT. A crash between the send and the commit leaves the row pending, and a
 * second replay sends again: the fence makes that harmless. A body no consumer can read (not JSON,
 * not a valid envelope) is sent all the same; the answer's `note` says it will come back as poison
 * (replay-note.ts).
 */
import { SendMessageCommand, type SQSClient } from "@aws-sdk/client-sqs";
import type pg from "pg";
import {
  fenceKey,
  fencesOf,
  lockDeadLetter,
  resolveDeadLetters,
  statusOf,
} from "../db/queries/replay-queries.ts";
import { inTransaction } from "../db/transaction.ts";
import {
  DeadLetterConflictError,
  DeadLetterNotFoundError,
  FollowUpProvenanceError,
  ReplayConflictError,
  ReplayOutlivedError,
  ReplayQueueRefusedError,
  ReplaySendError,
} from "../errors/dead-letter.ts";
import { ERROR_KIND } from "../errors/error-kind.ts";
import { HttpProblem } from "../errors/http.ts";
import { faultHook } from "../fault-points.ts";
import { replayTraceparent } from "../tracing/spans.ts";
import { replayMessage } from "./replay-message.ts";
import { replayNote, unreadableReason } from "./replay-note.ts";
import { sendFailureReason } from "./send-replays.ts";
import { DEAD_LETTER_STATUS } from "./status.ts";

/** What replay and discard need. */
export interface ReplayDeps {
  readonly pool: pg.Pool;
  readonly sqs: SQSClient;
}

/** What a replay does with a pending dead letter, given its job's fence. */
export type ReplayDecision =
  | "send"
  | "superseded"
  | "conflict"
  | "foreign-queue"
  | "unproven-follow-up"
  | "outlived";

/** The operator's override for `outlived` rows: replay them anyway, for this reason. */
export interface ForceOutlived {
  readonly reason: string;
}

/**
 * A fence that exists means the job was applied. The row is `superseded` when it is that job (same
 * fingerprint, or either side has none: a fence from before fingerprints, a body whose envelope
 * could not be read); a row carrying another job under the same id is a conflict, and sending it
 * would only record it again as one. Without a fence the row is sent, unless it names a queue not
 * registered for its consumer (`foreign-queue`: the consumer wrote the queue, and it could be
 * another consumer's), is an undelivered follow-up whose provenance fails (`unproven-follow-up`:
 * another consumer could have forged it, and the replay would deliver it with the operator's
 * rights; no override sends it), or it is `outlived` (a copy older than its fence's lifetime:
 * without a fence nothing tells whether the job was applied and its fence cleaned) and the
 * operator did not force it.
 */
export function replayDecision(
  row: {
    job_fingerprint: Buffer | null;
    queue_allowed: boolean;
    provenance_fault?: string | null;
    error_kind?: string;
  },
  fence: Buffer | null | undefined,
  force?: ForceOutlived,
): ReplayDecision {
  if (fence === undefined) {
    if (!row.queue_allowed) return "foreign-queue";
    if (row.provenance_fault != null) return "unproven-follow-up";
    return row.error_kind === ERROR_KIND.outlived && force === undefined ? "outlived" : "send";
  }
  if (fence === null || row.job_fingerprint === null || fence.equals(row.job_fingerprint))
    return "superseded";
  return "conflict";
}

/** When an outlived row's copy was first sent, as the database recorded it deciding the kind. */
export function outlivedCopySentAt(attributes: Record<string, unknown>): string | null {
  const outlived = attributes.outlived as { copy_sent_at?: unknown } | undefined;
  return typeof outlived?.copy_sent_at === "string" ? outlived.copy_sent_at : null;
}

/**
 * Replays one dead letter by `actor`, optionally delayed (SQS DelaySeconds; standard queues only).
 * An `outlived` one is refused ({@link ReplayOutlivedError}) unless `forceOutlived` gives the
 * operator's reason, which is recorded with the resolution.
 * A send SQS refuses is a {@link ReplaySendError} whose message names no queue and quotes nothing of
 * SQS's: those are in its cause, for the log.
 */
export async function replayDeadLetter(
  deps: ReplayDeps,
  id: string,
  actor: string,
  options: { delaySeconds?: number; forceOutlived?: ForceOutlived } = {},
): Promise<{ id: string; status: "replayed" | "superseded"; message_id: string | null; note?: string }> {
  return inTransaction(deps.pool, async (tx) => {
    const row = await lockDeadLetter(tx, id);
    if (!row) throw new DeadLetterNotFoundError(id);
    if (row.status !== DEAD_LETTER_STATUS.pendingReview) throw new DeadLetterConflictError(id, row.status);

    const decision = replayDecision(
      row,
      (await fencesOf(tx, [row])).get(fenceKey(row)),
      options.forceOutlived,
    );
    if (decision === "conflict") throw new ReplayConflictError(id, row.job_id);
    if (decision === "foreign-queue") throw new ReplayQueueRefusedError(id, row.consumer);
    if (decision === "unproven-follow-up")
      throw new FollowUpProvenanceError(id, row.sender, String(row.provenance_fault));
    if (decision === "outlived") {
      throw new ReplayOutlivedError(id, row.job_id, outlivedCopySentAt(row.message_attributes));
    }
    if (decision === "superseded") {
      await resolveDeadLetters(tx, [{ id, status: "superseded" }], actor);
      return { id, status: "superseded" as const, message_id: null };
    }
    const message = replayMessage(row, replayTraceparent(row.message_attributes, row.queue, row.id));
    const delaySeconds = options.delaySeconds ?? 0;
    if (delaySeconds > 0) {
      if (message.MessageGroupId !== undefined) {
        throw new HttpProblem(
          "invalidRequest",
          "this dead letter's queue is FIFO, which takes no per-message delay; replay it without delay_seconds",
        );
      }
      message.DelaySeconds = delaySeconds;
    }
    let messageId: string | undefined;
    try {
      const sent = await deps.sqs.send(new SendMessageCommand({ QueueUrl: row.queue, ...message }));
      messageId = sent.MessageId;
    } catch (error) {
      throw new ReplaySendError(
        `the replayed message was not sent: ${sendFailureReason(error)}. The dead letter is still pending; try again once that is fixed.`,
        { cause: error },
      );
    }
    if (faultHook) await faultHook("replay:after-send", { jobIds: [row.job_id] });
    await resolveDeadLetters(
      tx,
      [{ id, status: "replayed", ...forcedReason(row, options.forceOutlived) }],
      actor,
    );
    // A body no consumer can read comes back as poison: the answer says so.
    const unreadable = message.MessageBody === undefined ? null : unreadableReason(message.MessageBody);
    return {
      id,
      status: "replayed" as const,
      message_id: messageId ?? null,
      ...(unreadable === null ? {} : { note: replayNote(unreadable) }),
    };
  });
}

/** The reason a replay records: the operator's override, on an outlived row only (the database requires it there and refuses it elsewhere). */
export function forcedReason(
  row: { error_kind: string },
  force: ForceOutlived | undefined,
): { reason?: string } {
  return row.error_kind === ERROR_KIND.outlived && force !== undefined ? { reason: force.reason } : {};
}

/** Discards one pending dead letter by `actor`, with its reason. */
export async function discardDeadLetter(
  pool: pg.Pool,
  id: string,
  reason: string,
  actor: string,
): Promise<{ id: string; status: "discarded"; reason: string }> {
  // One UPDATE: it waits for a concurrent replay's lock, then finds the row no longer pending.
  const changed = await resolveDeadLetters(pool, [{ id, status: "discarded", reason }], actor);
  if (changed.has(id)) return { id, status: "discarded", reason };
  const status = await statusOf(pool, id);
  if (status === undefined) throw new DeadLetterNotFoundError(id);
  throw new DeadLetterConflictError(id, status);
}
