/**
 * The relays' statements on the outbox (migration 0015): deleting what was sent, and the scheduled
 * relay's scan, retry bookkeeping, move to the dead letters and gauges. Row-level security limits
 * a consumer's login to its own rows; `consumer` is passed so the plans use the due index.
 */
import type { LastError } from "../../dead-letters/last-error.ts";
import type { Queryable } from "../queryable.ts";

/** An outbox row as a relay reads it back. */
export interface OutboxRow {
  readonly target: string;
  readonly job_id: string;
  readonly parent_job_id: string;
  readonly tenant_id: string;
  readonly correlation_id: string;
  readonly body: string;
  readonly job_fingerprint: Buffer;
  readonly group_id: string | null;
  readonly traceparent: string | null;
  readonly attempts: number;
  readonly created_at: Date;
  /**
   * Whether the row is past its `send_by` deadline (migration 0021), by the database's clock: a
   * relay must not send it, the target's fence may be gone.
   */
  readonly expired: boolean;
}

/** A row's key. */
export interface OutboxKey {
  readonly target: string;
  readonly jobId: string;
}

const DELETE_SENT = `
  DELETE FROM core.outbox AS o
   USING unnest($2::text[], $3::text[]) AS sent (target, job_id)
   WHERE o.consumer = $1 AND o.target = sent.target AND o.job_id = sent.job_id`;

/** Deletes the rows that were sent; returns how many were still there. */
export async function deleteSentFollowUps(
  db: Queryable,
  consumer: string,
  keys: readonly OutboxKey[],
): Promise<number> {
  if (keys.length === 0) return 0;
  const { rowCount } = await db.query(DELETE_SENT, [
    consumer,
    keys.map((k) => k.target),
    keys.map((k) => k.jobId),
  ]);
  return rowCount ?? 0;
}

const CLAIM_DUE = `
  SELECT target, job_id, parent_job_id, tenant_id, correlation_id, body, job_fingerprint, group_id, traceparent,
         attempts, created_at, send_by <= now() AS expired
    FROM core.outbox
   WHERE consumer = $1 AND next_attempt_at <= now()
   ORDER BY next_attempt_at
   LIMIT $2
     FOR UPDATE SKIP LOCKED`;

/**
 * Locks up to `limit` due rows of the consumer, oldest due first, skipping rows another relay holds:
 * run inside the transaction that then deletes or reschedules them.
 */
export async function claimDueFollowUps(
  db: Queryable,
  consumer: string,
  limit: number,
): Promise<OutboxRow[]> {
  const { rows } = await db.query<OutboxRow>(CLAIM_DUE, [consumer, limit]);
  return rows;
}

const RESCHEDULE = `
  UPDATE core.outbox
     SET attempts = least(attempts + 1, 1000), next_attempt_at = now() + make_interval(secs => $4), last_error = $5::jsonb
   WHERE consumer = $1 AND target = $2 AND job_id = $3`;

/** Counts a failed send of the row and sets when it is tried again. */
export async function rescheduleFollowUp(
  db: Queryable,
  consumer: string,
  key: OutboxKey,
  delaySeconds: number,
  error: LastError,
): Promise<void> {
  await db.query(RESCHEDULE, [consumer, key.target, key.jobId, delaySeconds, JSON.stringify(error)]);
}

/** The dead letter an undelivered follow-up became. */
export interface UndeliveredDeadLetter {
  readonly id: string;
  /** False when the same body was already pending review. */
  readonly created: boolean;
}

/**
 * Moves the row into core.dead_letters as `undelivered`, for its target, with `queueUrl` (which
 * must be one a replay of the target may use) and, for a FIFO target, the message group it was sent
 * with. Undefined when the row was gone.
 */
export async function moveToUndelivered(
  db: Queryable,
  consumer: string,
  key: OutboxKey,
  queueUrl: string,
  messageGroup: string | null,
  error: LastError,
): Promise<UndeliveredDeadLetter | undefined> {
  const { rows } = await db.query<{ id: string; created: boolean }>(
    "SELECT id, created FROM core.outbox_undelivered($1, $2, $3, $4, $5, $6::jsonb)",
    [consumer, key.target, key.jobId, queueUrl, messageGroup, JSON.stringify(error)],
  );
  return rows[0];
}

/** The consumer's outbox as gauges: rows waiting, and the age of the oldest. */
export interface OutboxGauge {
  readonly rows: number;
  readonly oldestAgeSeconds: number;
}

const GAUGE = `
  SELECT count(*)::int AS rows, coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest
    FROM core.outbox WHERE consumer = $1`;

/** How many of the consumer's rows wait, and since when. */
export async function outboxGauge(db: Queryable, consumer: string): Promise<OutboxGauge> {
  const { rows } = await db.query<{ rows: number; oldest: number }>(GAUGE, [consumer]);
  return { rows: rows[0]?.rows ?? 0, oldestAgeSeconds: rows[0]?.oldest ?? 0 };
}
