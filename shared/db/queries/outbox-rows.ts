/**
 * The relays' statements on the outbox (migrations 0015, 0019): deleting what was sent, and the
 * scheduled relay's claim, retry bookkeeping, move to the dead letters and gauges. A consumer's
 * login may read its own rows but neither change nor delete any: every write goes through a
 * function that acts only on rows a relay may (core.outbox_claim, core.outbox_sent,
 * core.outbox_retry, core.outbox_undelivered), so a work that calls them through tx.query in its
 * fence transaction can remove no other job's follow-up.
 */
import type { LastError } from "../../errors/last-error.ts";
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

/**
 * Deletes the rows that were sent; returns how many were still there. On a connection with no
 * transaction open (the relay after COMMIT) the rows named; inside the scheduled relay's transaction
 * only those it claimed (core.outbox_sent).
 */
export async function deleteSentFollowUps(
  db: Queryable,
  consumer: string,
  keys: readonly OutboxKey[],
): Promise<number> {
  if (keys.length === 0) return 0;
  const { rows } = await db.query<{ n: number }>("SELECT core.outbox_sent($1, $2::text[], $3::text[]) AS n", [
    consumer,
    keys.map((k) => k.target),
    keys.map((k) => k.jobId),
  ]);
  return rows[0]?.n ?? 0;
}

const CLAIM_DUE = `
  SELECT target, job_id, parent_job_id, tenant_id, correlation_id, body, job_fingerprint, group_id, traceparent,
         attempts, created_at, expired
    FROM core.outbox_claim($1, $2)`;

/**
 * Locks up to `limit` due rows of the consumer, oldest due first, skipping rows another relay holds,
 * and marks them claimed by this transaction: the first statement of the transaction that then
 * deletes, reschedules or moves them (core.outbox_claim refuses any later one).
 */
export async function claimDueFollowUps(
  db: Queryable,
  consumer: string,
  limit: number,
): Promise<OutboxRow[]> {
  const { rows } = await db.query<OutboxRow>(CLAIM_DUE, [consumer, limit]);
  return rows;
}

const RESCHEDULE = "SELECT core.outbox_retry($1, $2, $3, $4, $5::jsonb)";

/** Counts a failed send of a row this transaction claimed and sets when it is tried again. */
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
 * Moves a row this transaction claimed into core.dead_letters as `undelivered`, for its target, with
 * `queueUrl` (which must be one a replay of the target may use) and, for a FIFO target, the message
 * group it was sent with; the dead letter records the row's sender, parent and key. Undefined when
 * the row was gone. The database refuses a row whose provenance fails (core.follow_up_fault).
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
