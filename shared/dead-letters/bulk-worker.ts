/**
 * The bulk-operations worker: runs the operations the API started, one chunk at a time, at each
 * operation's rate. A Lambda on a one-minute schedule in AWS, a timer in the local stack.
 *
 * One chunk is one transaction: lock the operation (SKIP LOCKED, so workers share operations), lock
 * the next rows of its set, decide and send (replay) or resolve (discard), record the resolutions,
 * the rows left pending and the operation's progress, COMMIT. A crash anywhere in it rolls all of
 * it back: the chunk runs again, its sends repeat (the fence absorbs them; FIFO queues drop them by
 * deduplication id within five minutes) and no row is skipped, because the cursor only moves in
 * the same commit as the rows it passes.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import type { SQSClient } from "@aws-sdk/client-sqs";
import type pg from "pg";
import {
  claimDueOperation,
  lockOperationChunk,
  msUntilDue,
  type OperationRow,
  recordChunk,
  recordChunkFailure,
  recordSkips,
  type SkipReason,
} from "../db/queries/bulk-operations.ts";
import { fenceKey, fencesOf, type Resolution, resolveDeadLetters } from "../db/queries/replay-queries.ts";
import { inTransaction } from "../db/transaction.ts";
import { TransientSendError } from "../errors/dead-letter.ts";
import { describeError } from "../errors/last-error.ts";
import { faultHook } from "../fault-points.ts";
import { replayTraceparent } from "../tracing/spans.ts";
import { forcedReason, replayDecision } from "./replay.ts";
import { replayMessage } from "./replay-message.ts";
import { sendReplays } from "./send-replays.ts";

/** What the worker runs on: a login granted jobfence_ops. */
export interface BulkWorkerDeps {
  readonly pool: pg.Pool;
  readonly sqs: SQSClient;
  readonly logger?: Pick<Logger, "warn" | "info">;
}

/** Rows per chunk at most: a replay chunk is ten SendMessageBatch calls, a discard one UPDATE. */
export const CHUNK_LIMITS = Object.freeze({ replay: 100, discard: 500 });

/** How long a worker waits when every due operation is held by another worker. */
const BUSY_RECHECK_MS = 200;

/** Chunk failures in a row after which an operation is marked failed. */
export const CHUNK_FAILURES_ALLOWED = 10;

/**
 * Rows per chunk: about one second's worth at the operation's rate, so pacing is smooth, within
 * the kind's limit.
 */
export function chunkSize(kind: OperationRow["kind"], ratePerSecond: number): number {
  return Math.max(1, Math.min(CHUNK_LIMITS[kind], Math.ceil(ratePerSecond)));
}

/**
 * The longest pause after a chunk, in seconds. At the API's slowest rate (API_LIMITS.minRatePerSecond)
 * a chunk is one row and the pause 100 seconds; the cap holds whatever a row stores, so the pause
 * is always an interval PostgreSQL can add (a rate of 1e-40 once made it 1e40 seconds, and every
 * chunk rolled back with "interval out of range").
 */
export const MAX_CHUNK_PAUSE_SECONDS = 3600;

/** How long an operation waits after a chunk of `rows` at `ratePerSecond`: rows / rate, capped. */
export function chunkPauseSeconds(rows: number, ratePerSecond: number): number {
  if (rows <= 0) return 0;
  const pause = rows / ratePerSecond;
  return Number.isFinite(pause) && pause >= 0
    ? Math.min(pause, MAX_CHUNK_PAUSE_SECONDS)
    : MAX_CHUNK_PAUSE_SECONDS;
}

/** What one run of the worker did. */
export interface WorkerReport {
  chunks: number;
  rows: number;
  failedChunks: number;
}

/**
 * Runs due chunks until `budgetMs` is spent or `signal` aborts, waiting for the next operation
 * that comes due in between; returns when nothing runs and nothing is due within the budget.
 */
export async function runBulkOperations(
  deps: BulkWorkerDeps,
  options: { budgetMs: number; signal?: AbortSignal },
): Promise<WorkerReport> {
  const deadline = Date.now() + options.budgetMs;
  const report: WorkerReport = { chunks: 0, rows: 0, failedChunks: 0 };
  while (Date.now() < deadline && !options.signal?.aborted) {
    const ran = await runChunk(deps);
    if (ran.kind === "ran") {
      report.chunks += 1;
      report.rows += ran.rows;
      continue;
    }
    if (ran.kind === "failed") {
      report.failedChunks += 1;
      continue;
    }
    const wait = await msUntilDue(deps.pool);
    const left = deadline - Date.now();
    if (wait === undefined || wait >= left) break;
    // Due now but nothing claimed: another worker holds it for a chunk; look again shortly
    // rather than spin on the database.
    await sleep(wait > 0 ? wait : BUSY_RECHECK_MS, options.signal);
  }
  return report;
}

/** Runs the chunk of the operation due soonest, if one is due. */
export async function runChunk(
  deps: BulkWorkerDeps,
): Promise<{ kind: "idle" } | { kind: "ran"; rows: number } | { kind: "failed"; operationId: string }> {
  let claimed: OperationRow | undefined;
  try {
    return await inTransaction(deps.pool, async (tx) => {
      claimed = await claimDueOperation(tx);
      if (!claimed) return { kind: "idle" as const };
      const rows = await runClaimedChunk(deps, tx, claimed);
      return { kind: "ran" as const, rows };
    });
  } catch (error) {
    if (!claimed) throw error;
    // The chunk rolled back: nothing it resolved or counted stands. Back off and try again.
    const description = describeError(error);
    const text =
      error instanceof TransientSendError ? error.message : `${description.class}: ${description.message}`;
    deps.logger?.warn("bulk operation chunk failed; it will be retried", {
      operation_id: claimed.id,
      error: description,
    });
    await recordChunkFailure(deps.pool, claimed.id, text, CHUNK_FAILURES_ALLOWED);
    return { kind: "failed", operationId: claimed.id };
  }
}

async function runClaimedChunk(deps: BulkWorkerDeps, tx: pg.PoolClient, op: OperationRow): Promise<number> {
  const size = chunkSize(op.kind, op.rate_per_second);
  const rows = await lockOperationChunk(tx, op.id, op.cursor_position, size);
  const last = rows.at(-1);
  const counts = { replayed: 0, superseded: 0, discarded: 0, conflicts: 0, failed: 0 };
  const resolutions: Resolution[] = [];
  const skips: Array<{ id: string; reason: SkipReason; detail: string }> = [];

  if (op.kind === "discard") {
    for (const row of rows) resolutions.push({ id: row.id, status: "discarded", reason: op.reason ?? "" });
  } else {
    const fences = await fencesOf(tx, rows);
    const toSend = [];
    for (const row of rows) {
      const force = op.force_outlived && op.reason !== null ? { reason: op.reason } : undefined;
      const decision = replayDecision(row, fences.get(fenceKey(row)), force);
      if (decision === "superseded") resolutions.push({ id: row.id, status: "superseded" });
      else if (decision === "conflict") {
        skips.push({
          id: row.id,
          reason: "conflict",
          detail: "the job was applied with another payload under this job_id",
        });
      } else if (decision === "outlived") {
        skips.push({
          id: row.id,
          reason: "outlived",
          detail:
            "outlived: a copy older than its job's fence lifetime, and the job has no fence (it may have been applied " +
            "and its fence cleaned); nothing was sent. Replay it with force_outlived and a reason, or discard it",
        });
      } else if (decision === "foreign-queue") {
        skips.push({
          id: row.id,
          reason: "foreign-queue",
          detail: "the dead letter names a queue that is not registered for its consumer; nothing was sent",
        });
      } else if (decision === "unproven-follow-up") {
        skips.push({
          id: row.id,
          reason: "unproven-follow-up",
          detail:
            `an undelivered follow-up whose provenance fails: ${row.provenance_fault}; nothing was sent`.slice(
              0,
              1000,
            ),
        });
      } else toSend.push(row);
    }
    const refused = await sendReplays(
      deps.sqs,
      toSend.map((row) => ({
        id: row.id,
        queue: row.queue,
        message: {
          ...replayMessage(row, replayTraceparent(row.message_attributes, row.queue, row.id)),
          ...(op.delay_seconds > 0 ? { DelaySeconds: op.delay_seconds } : {}),
        },
      })),
    );
    if (faultHook) await faultHook("replay:after-send", { jobIds: toSend.map((r) => r.job_id) });
    for (const row of toSend) {
      const why = refused.get(row.id);
      if (why === undefined) {
        const force = op.force_outlived && op.reason !== null ? { reason: op.reason } : undefined;
        resolutions.push({ id: row.id, status: "replayed", ...forcedReason(row, force) });
      } else skips.push({ id: row.id, reason: "send-failed", detail: why });
    }
  }

  const changed = await resolveDeadLetters(tx, resolutions, op.submitted_by);
  for (const r of resolutions) if (changed.has(r.id)) counts[r.status] += 1;
  for (const s of skips) counts[s.reason === "conflict" ? "conflicts" : "failed"] += 1;
  await recordSkips(tx, op.id, skips);
  await recordChunk(tx, op.id, {
    lastPosition: last ? last.position : null,
    rows: rows.length,
    pauseSeconds: chunkPauseSeconds(rows.length, op.rate_per_second),
    ...counts,
    // Done when the set's last row is passed, or when fewer rows were left than a chunk takes.
    done: rows.length < size || (last?.position ?? 0) >= op.planned,
  });
  return rows.length;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}
