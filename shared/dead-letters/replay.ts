/**
 * Replay and discard (SPEC §6). Each decision locks the dead letter, so of a concurrent replay and
 * discard exactly one wins and the other finds it no longer pending (409).
 *
 * Replay: lock → (fence exists → superseded, nothing sent) → SendMessage the stored envelope →
 * mark replayed → COMMIT. A crash between the send and the commit leaves the row pending, and a
 * second replay sends again: the fence makes that harmless (SPEC §6).
 */
import { SendMessageBatchCommand, SendMessageCommand, type SQSClient } from "@aws-sdk/client-sqs";
import type pg from "pg";
import {
  countReplayMatches,
  fenceKey,
  fencesOf,
  lockDeadLetter,
  lockReplayBatch,
  type ReplayRow,
  type Resolution,
  resolveDeadLetters,
  statusOf,
} from "../db/queries/replay-queries.ts";
import { inTransaction } from "../db/transaction.ts";
import {
  DeadLetterConflictError,
  DeadLetterNotFoundError,
  ReplayConflictError,
  ReplaySendError,
} from "../errors.ts";
import { faultHook } from "../fault-points.ts";
import { API_LIMITS, type BulkReplayRequest } from "./api-schemas.ts";
import { decodeCursor, encodeCursor } from "./cursor.ts";
import { replayMessage } from "./replay-message.ts";
import { DEAD_LETTER_STATUS } from "./status.ts";

/** What replay and discard need. */
export interface ReplayDeps {
  readonly pool: pg.Pool;
  readonly sqs: SQSClient;
}

/** SQS takes at most 10 messages per SendMessageBatch. */
const SQS_BATCH = 10;

/** What a replay does with a pending dead letter, given its job's fence. */
export type ReplayDecision = "send" | "superseded" | "conflict";

/**
 * A fence that exists means the job was applied. The row is `superseded` when it is that job (same
 * fingerprint, or either side has none: a fence from before fingerprints, a body whose envelope
 * could not be read); a row carrying another job under the same id is a conflict, and sending it
 * would only record it again as one. Without a fence the row is sent.
 */
export function replayDecision(
  row: { job_fingerprint: Buffer | null },
  fence: Buffer | null | undefined,
): ReplayDecision {
  if (fence === undefined) return "send";
  if (fence === null || row.job_fingerprint === null || fence.equals(row.job_fingerprint))
    return "superseded";
  return "conflict";
}

/** Replays one dead letter by `actor`. */
export async function replayDeadLetter(
  deps: ReplayDeps,
  id: string,
  actor: string,
): Promise<{ id: string; status: "replayed" | "superseded"; message_id: string | null }> {
  return inTransaction(deps.pool, async (tx) => {
    const row = await lockDeadLetter(tx, id);
    if (!row) throw new DeadLetterNotFoundError(id);
    if (row.status !== DEAD_LETTER_STATUS.pendingReview) throw new DeadLetterConflictError(id, row.status);

    const decision = replayDecision(row, (await fencesOf(tx, [row])).get(fenceKey(row)));
    if (decision === "conflict") throw new ReplayConflictError(id, row.job_id);
    if (decision === "superseded") {
      await resolveDeadLetters(tx, [{ id, status: "superseded" }], actor);
      return { id, status: "superseded" as const, message_id: null };
    }
    let messageId: string | undefined;
    try {
      const sent = await deps.sqs.send(
        new SendMessageCommand({ QueueUrl: row.queue, ...replayMessage(row) }),
      );
      messageId = sent.MessageId;
    } catch (error) {
      throw new ReplaySendError(`SQS refused the replay to ${row.queue}: ${(error as Error).message}`, {
        cause: error,
      });
    }
    if (faultHook) await faultHook("replay:after-send", { jobIds: [row.job_id] });
    await resolveDeadLetters(tx, [{ id, status: "replayed" }], actor);
    return { id, status: "replayed" as const, message_id: messageId ?? null };
  });
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

/** What a bulk replay call did, per dead letter. */
export interface BulkReplayResult {
  dry_run: boolean;
  matched: number;
  would_send?: number;
  sample?: Awaited<ReturnType<typeof countReplayMatches>>["sample"];
  conflicts?: number;
  outcomes?: Array<{
    id: string;
    outcome: "replayed" | "superseded" | "conflict" | "failed";
    error?: string;
  }>;
  next_cursor: string | null;
}

/**
 * Replays the pending dead letters a filter matches, oldest first, at most `limit` per call; the
 * returned cursor continues after the last one handled (including those that failed to send, so
 * a permanently failing queue cannot stall the walk). Safe to repeat: the fence absorbs doubles.
 */
export async function bulkReplay(
  deps: ReplayDeps,
  request: BulkReplayRequest,
  actor: string,
): Promise<BulkReplayResult> {
  const after = request.cursor ? decodeCursor(request.cursor, request.filter, "bulk-replay") : undefined;
  if (request.dry_run) {
    const counted = await countReplayMatches(deps.pool, request.filter, API_LIMITS.dryRunSample, after);
    return {
      dry_run: true,
      matched: counted.matched,
      would_send: counted.matched - counted.superseded - counted.conflicts,
      conflicts: counted.conflicts,
      sample: counted.sample,
      next_cursor: null,
    };
  }
  return inTransaction(deps.pool, async (tx) => {
    const rows = await lockReplayBatch(tx, request.filter, request.limit, after);
    const fences = await fencesOf(tx, rows);
    const decisions = new Map(rows.map((r) => [r.id, replayDecision(r, fences.get(fenceKey(r)))]));
    const superseded = rows.filter((r) => decisions.get(r.id) === "superseded");
    const toSend = rows.filter((r) => decisions.get(r.id) === "send");
    const failures = await sendAll(deps.sqs, toSend);
    if (faultHook) await faultHook("replay:after-send", { jobIds: toSend.map((r) => r.job_id) });

    const resolutions: Resolution[] = [
      ...superseded.map((r) => ({ id: r.id, status: "superseded" as const })),
      ...toSend.filter((r) => !failures.has(r.id)).map((r) => ({ id: r.id, status: "replayed" as const })),
    ];
    await resolveDeadLetters(tx, resolutions, actor);
    const outcomes = rows.map((r) => {
      const failure = failures.get(r.id);
      if (failure !== undefined) return { id: r.id, outcome: "failed" as const, error: failure };
      const decision = decisions.get(r.id);
      if (decision === "conflict") {
        return { id: r.id, outcome: "conflict" as const, error: "the job was applied with another payload" };
      }
      return {
        id: r.id,
        outcome: decision === "superseded" ? ("superseded" as const) : ("replayed" as const),
      };
    });
    const last = rows.at(-1);
    return {
      dry_run: false,
      matched: rows.length,
      outcomes,
      next_cursor:
        rows.length === request.limit && last
          ? encodeCursor({ createdAt: last.created_at, id: last.id }, request.filter, "bulk-replay")
          : null,
    };
  });
}

/** Sends each row's message with SendMessageBatch, ten per call per queue; returns the failures by id. */
async function sendAll(sqs: SQSClient, rows: readonly ReplayRow[]): Promise<Map<string, string>> {
  const failures = new Map<string, string>();
  const byQueue = Map.groupBy(rows, (r) => r.queue);
  for (const [queue, queued] of byQueue) {
    for (let start = 0; start < queued.length; start += SQS_BATCH) {
      const chunk = queued.slice(start, start + SQS_BATCH);
      try {
        const result = await sqs.send(
          new SendMessageBatchCommand({
            QueueUrl: queue,
            Entries: chunk.map((r, i) => ({ Id: String(i), ...replayMessage(r) })),
          }),
        );
        for (const failed of result.Failed ?? []) {
          const row = chunk[Number(failed.Id)];
          if (row)
            failures.set(row.id, `${failed.Code ?? "error"}: ${failed.Message ?? "SQS refused the message"}`);
        }
      } catch (error) {
        for (const row of chunk) failures.set(row.id, (error as Error).message);
      }
    }
  }
  return failures;
}
