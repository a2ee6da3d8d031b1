/** One bounded batch of TTL cleanup, and the remaining backlog, through the cleanup functions (migration 0005). */
import type { Queryable } from "../queryable.ts";

/** Deletes up to `batchSize` expired fences in its own short transaction; returns how many. */
export async function deleteExpiredFences(db: Queryable, batchSize: number): Promise<number> {
  const { rows } = await db.query<{ deleted: number }>("SELECT core.delete_expired_fences($1) AS deleted", [
    batchSize,
  ]);
  return rows[0]?.deleted ?? 0;
}

/** Expired fences kept because a pending dead letter names their job (migration 0010), up to `cap`. */
export async function heldFenceCount(db: Queryable, cap: number): Promise<number> {
  const { rows } = await db.query<{ held: number }>("SELECT core.held_fence_count($1) AS held", [cap]);
  return rows[0]?.held ?? 0;
}

/** Expired fences still present that the cleanup can delete, counted up to `cap`. */
export async function expiredFenceBacklog(db: Queryable, cap: number): Promise<number> {
  const { rows } = await db.query<{ backlog: number }>("SELECT core.expired_fence_backlog($1) AS backlog", [
    cap,
  ]);
  return rows[0]?.backlog ?? 0;
}

/**
 * Deletes up to `batchSize` attempt-ledger rows untouched for longer than SQS keeps a message (14
 * days: their message can no longer be delivered); returns how many (migration 0009).
 */
export async function deleteStaleAttempts(db: Queryable, batchSize: number): Promise<number> {
  const { rows } = await db.query<{ deleted: number }>("SELECT core.delete_stale_attempts($1) AS deleted", [
    batchSize,
  ]);
  return rows[0]?.deleted ?? 0;
}

/**
 * Deletes up to `batchSize` step checkpoints that no copy of their job can need any more: past
 * their expiry, their job's fence expired or absent, no dead letter of the job pending or lately
 * resolved (migration 0027); returns how many.
 */
export async function deleteExpiredSteps(db: Queryable, batchSize: number): Promise<number> {
  const { rows } = await db.query<{ deleted: number }>("SELECT core.delete_expired_steps($1) AS deleted", [
    batchSize,
  ]);
  return rows[0]?.deleted ?? 0;
}
