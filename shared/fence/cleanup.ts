/**
 * TTL cleanup (docs/design.md §7.2): deletes expired fences (then the step checkpoints and attempt
 * ledger rows nothing can need any more, and the ops API's expired idempotency keys) in bounded batches, each its own short
 * transaction, until none are left or the time budget is spent. Safe to run twice at once: the
 * batches skip rows the other run holds. Never deletes a fence whose expires_at is in the future.
 */

import { setTimeout as sleep } from "node:timers/promises";
import {
  deleteExpiredFences,
  deleteExpiredSteps,
  deleteStaleAttempts,
  expiredFenceBacklog,
  heldFenceCount,
} from "../db/queries/delete-expired-fences.ts";
import { deleteExpiredIdempotencyKeys } from "../db/queries/idempotency-keys.ts";
import type { Queryable } from "../db/queryable.ts";
import { faultHook } from "../fault-points.ts";

/** Named defaults of {@link runFenceCleanup}. */
export const CLEANUP_DEFAULTS = Object.freeze({
  /**
   * Rows per batch, and the pause after each full one. Chosen by bench/cleanup.ts (expired fences
   * deleted under concurrent fence inserts, durable); the figures are in docs/performance.md, "TTL
   * cleanup". Unpaced, large batches delete fastest but lift the inserts' COMMIT tail, because
   * every commit waits for a WAL flush that now carries a batch's deletes; smaller batches with
   * short pauses are no better (each is still a flush the commits queue behind, and there are more
   * of them); large batches spaced by a pause keep the rate above the target at a fraction of the
   * cost to the inserts. A batch holds its row locks only briefly, and nothing normally waits on an
   * expired fence.
   */
  batchSize: 20_000,
  pauseMs: 250,
  /** The backlog is counted up to this many rows. */
  backlogCap: 1_000_000,
});

/** Options of {@link runFenceCleanup}. */
export interface FenceCleanupOptions {
  readonly db: Queryable;
  /** Milliseconds the run may take; it stops after the batch in progress when they are spent. */
  readonly budgetMs: number;
  /** @default CLEANUP_DEFAULTS.batchSize */
  readonly batchSize?: number;
  /**
   * Milliseconds to wait after each full batch before the next: spreads the deletes' WAL over
   * time so concurrent commits are not queued behind it. @default CLEANUP_DEFAULTS.pauseMs
   */
  readonly pauseMs?: number;
  /** @default CLEANUP_DEFAULTS.backlogCap */
  readonly backlogCap?: number;
  /** Monotonic clock in ms. @default performance.now */
  readonly clock?: () => number;
}

/** What a run did. */
export interface FenceCleanupReport {
  readonly deleted: number;
  readonly batches: number;
  /** Expired fences left when the run stopped (capped at backlogCap). */
  readonly backlog: number;
  /**
   * Expired fences kept because a pending dead letter names their job (capped at backlogCap): a
   * replay must find them, or it would apply the job again. They go once the dead letter is resolved.
   */
  readonly held: number;
  /** Attempt-ledger rows of messages SQS can no longer deliver, deleted after the fences (one batch a run). */
  readonly staleAttemptsDeleted: number;
  /**
   * Step checkpoints no copy of their job can need any more (migration 0027), deleted after the
   * fences, in batches while the budget lasts.
   */
  readonly stepsDeleted: number;
  /** The ops API's idempotency keys past their 24 hours (migration 0028), deleted last while the budget lasts. */
  readonly idempotencyKeysDeleted: number;
  /** Why it stopped: a batch came back short (nothing expired was left to take), or the budget was spent. */
  readonly stoppedBy: "empty" | "budget";
  readonly elapsedMs: number;
}

export async function runFenceCleanup(options: FenceCleanupOptions): Promise<FenceCleanupReport> {
  const batchSize = options.batchSize ?? CLEANUP_DEFAULTS.batchSize;
  const pauseMs = options.pauseMs ?? CLEANUP_DEFAULTS.pauseMs;
  const clock = options.clock ?? (() => performance.now());
  const started = clock();
  let deleted = 0;
  let batches = 0;
  let stoppedBy: FenceCleanupReport["stoppedBy"] = "budget";
  while (clock() - started < options.budgetMs) {
    const deleting = deleteExpiredFences(options.db, batchSize);
    if (faultHook) await faultHook("cleanup:in-flight", {});
    const count = await deleting;
    batches++;
    deleted += count;
    if (count < batchSize) {
      stoppedBy = "empty";
      break;
    }
    if (pauseMs > 0) {
      // A pause the budget cannot hold ends the run: the next batch would only come unpaced.
      if (clock() - started + pauseMs >= options.budgetMs) break;
      await sleep(pauseMs);
    }
  }
  // One batch a run is ample: a ledger row exists only for a message that failed or was redelivered.
  const staleAttemptsDeleted =
    clock() - started < options.budgetMs ? await deleteStaleAttempts(options.db, batchSize) : 0;
  let stepsDeleted = 0;
  while (clock() - started < options.budgetMs) {
    const count = await deleteExpiredSteps(options.db, batchSize);
    stepsDeleted += count;
    if (count < batchSize) break;
  }
  let idempotencyKeysDeleted = 0;
  while (clock() - started < options.budgetMs) {
    const count = await deleteExpiredIdempotencyKeys(options.db, batchSize);
    idempotencyKeysDeleted += count;
    if (count < batchSize) break;
  }
  // Counted even after an "empty" stop: a short batch can also mean rows a concurrent run held.
  const cap = options.backlogCap ?? CLEANUP_DEFAULTS.backlogCap;
  const backlog = await expiredFenceBacklog(options.db, cap);
  const held = await heldFenceCount(options.db, cap);
  return {
    deleted,
    batches,
    staleAttemptsDeleted,
    stepsDeleted,
    idempotencyKeysDeleted,
    backlog,
    held,
    stoppedBy,
    elapsedMs: clock() - started,
  };
}
