/** SPEC §3: the fence insert. No row back means another delivery of the job already committed. */
import type { Queryable } from "../queryable.ts";

const SQL = `
  INSERT INTO core.processed_jobs (job_id, consumer, tenant_id, processed_at, expires_at)
  VALUES ($1, $2, $3, now(), now() + make_interval(secs => $4))
  ON CONFLICT (job_id, consumer) DO NOTHING
  RETURNING 1`;

/** The fence of one job. */
export interface FenceRow {
  readonly jobId: string;
  readonly consumer: string;
  readonly tenantId: string;
  /** `expires_at = processed_at + ttl` (SPEC §7). */
  readonly ttlSeconds: number;
}

/**
 * Inserts the fence inside the caller's transaction. Returns false for a duplicate. A concurrent
 * transaction holding the same fence makes this wait (bounded by lock_timeout) until it commits
 * (then: duplicate) or rolls back (then: inserted).
 */
export async function insertFence(tx: Queryable, fence: FenceRow): Promise<boolean> {
  const result = await tx.query(SQL, [fence.jobId, fence.consumer, fence.tenantId, fence.ttlSeconds]);
  return result.rowCount === 1;
}
