/**
 * The statements of bulk operations (migration 0012): the matched set a plan binds, and the
 * operation rows the API creates and cancels and the worker advances. Each function is one statement.
 */
import type { Queryable } from "../queryable.ts";
import {
  type DeadLetterSummaryRow,
  type KeysetPosition,
  SUMMARY_COLUMNS,
  utc,
} from "./dead-letter-columns.ts";
import {
  type BulkFilterColumns,
  OPS_DEAD_LETTERS,
  sqlWhere,
  type WhereClause,
  whereOf,
} from "./dead-letter-filter.ts";
import { REPLAY_COLUMNS, type ReplayRow } from "./replay-queries.ts";

/** The pending rows a filter matches up to `bound` (inclusive), after `after` (exclusive). */
export function pendingSetWhere(
  filter: BulkFilterColumns,
  bound?: KeysetPosition,
  after?: KeysetPosition,
): WhereClause {
  const where = whereOf(
    { ...filter, status: "pending_review" },
    after ? { position: after, direction: "newer" } : undefined,
  );
  if (bound) {
    where.params.push(bound.createdAt, bound.id);
    const n = where.params.length;
    where.conditions.push(`(created_at, id) <= ($${n - 1}::timestamptz, $${n}::uuid)`);
  }
  return where;
}

/** What a plan binds: how many rows, which (an order-free checksum of their ids), and the last one. */
export interface MatchedSet {
  readonly matched: number;
  /**
   * XOR over the rows of 64 bits of MD5(key, id), as text: equal sets, equal checksums. Keyed with a
   * secret of the deployment's, so nobody who can choose dead-letter ids can build another set with
   * the same checksum.
   */
  readonly checksum: string;
  readonly bound: KeysetPosition | null;
  /** Of the matched rows, the replay decisions the fences give today (replayDecision's rule). */
  readonly superseded: number;
  readonly conflicts: number;
  /** Of the rows without a fence, how many are `outlived`: skipped unless the replay forces them. */
  readonly outlived: number;
  /** Of the rows a replay would send (no fence), how many carry no readable job (no job fingerprint). */
  readonly unreadable: number;
  /** Whether any matched row's queue is FIFO (they take no per-message delay). */
  readonly anyFifo: boolean;
}

/**
 * The pending set `filter` matches now, or up to `bound`; `checksumKey` keys its checksum. Two
 * statements (the aggregate, and a backward index probe for the last row): call it in one snapshot
 * (a REPEATABLE READ transaction) so they describe the same set.
 */
export async function matchedSet(
  db: Queryable,
  filter: BulkFilterColumns,
  checksumKey: string,
  bound?: KeysetPosition,
): Promise<MatchedSet> {
  const where = pendingSetWhere(filter, bound);
  const key = `$${where.params.length + 1}::text`;
  // One pass over the set (an index-only scan where the covering index serves the filter),
  // joined to the fences for the replay decision; no intermediate result is kept.
  const { rows } = await db.query<{
    matched: string;
    checksum: string | null;
    superseded: string;
    conflicts: string;
    unreadable: string;
    any_fifo: boolean | null;
  }>(
    `SELECT count(*) AS matched,
            bit_xor(('x' || left(md5(${key} || m.id::text), 16))::bit(64)::bigint)::text AS checksum,
            count(*) FILTER (WHERE p.job_id IS NOT NULL
                               AND (p.fingerprint IS NULL OR m.job_fingerprint IS NULL
                                    OR uuid_send(p.fingerprint) = m.job_fingerprint)) AS superseded,
            count(*) FILTER (WHERE uuid_send(p.fingerprint) <> m.job_fingerprint) AS conflicts,
            count(*) FILTER (WHERE p.job_id IS NULL AND m.job_fingerprint IS NULL) AS unreadable,
            bool_or(m.queue LIKE '%.fifo') AS any_fifo
       FROM (SELECT id, job_id, consumer, job_fingerprint, queue FROM ${OPS_DEAD_LETTERS} ${sqlWhere(where)}) AS m
       LEFT JOIN core.consumer_roles c ON c.consumer = m.consumer
       LEFT JOIN core.processed_jobs p ON p.job_id = m.job_id AND p.consumer_id = c.id`,
    [...where.params, checksumKey],
  );
  const last = await db.query<{ created_at: string; id: string }>(
    `SELECT ${utc("created_at")} AS created_at, id FROM ${OPS_DEAD_LETTERS} ${sqlWhere(where)}
      ORDER BY dead_letters.created_at DESC, dead_letters.id DESC LIMIT 1`,
    where.params,
  );
  // Outlived rows are rare: counted apart, through the (error_kind, created_at) index, so the pass
  // above stays an index-only scan of the covering index, which holds no error_kind.
  const outlivedRows = await db.query<{ outlived: string }>(
    `SELECT count(*) AS outlived FROM ${OPS_DEAD_LETTERS}
      ${sqlWhere({ conditions: [...where.conditions, "dead_letters.error_kind = 'outlived'"], params: where.params })}
        AND NOT EXISTS (SELECT 1 FROM core.consumer_roles AS c
                          JOIN core.processed_jobs AS p ON p.consumer_id = c.id AND p.job_id = dead_letters.job_id
                         WHERE c.consumer = dead_letters.consumer)`,
    where.params,
  );
  const row = rows[0];
  const found = last.rows[0];
  return {
    matched: Number(row?.matched ?? 0),
    checksum: row?.checksum ?? "0",
    bound: found ? { createdAt: found.created_at, id: found.id } : null,
    superseded: Number(row?.superseded ?? 0),
    conflicts: Number(row?.conflicts ?? 0),
    outlived: Number(outlivedRows.rows[0]?.outlived ?? 0),
    unreadable: Number(row?.unreadable ?? 0),
    anyFifo: row?.any_fifo === true,
  };
}

/** The first `size` rows of the pending set, oldest first, as the list shows them. */
export async function pendingSample(
  db: Queryable,
  filter: BulkFilterColumns,
  size: number,
): Promise<DeadLetterSummaryRow[]> {
  const where = pendingSetWhere(filter);
  const { rows } = await db.query<DeadLetterSummaryRow>(
    `SELECT ${SUMMARY_COLUMNS} FROM ${OPS_DEAD_LETTERS} ${sqlWhere(where)}
      ORDER BY dead_letters.created_at, dead_letters.id LIMIT ${Number(size)}`,
    where.params,
  );
  return rows;
}

/**
 * Pending rows `filter` matches that lie after `bound` (a plan's last row): recorded since the plan,
 * so not part of the set it confirmed.
 */
export async function pendingAfter(
  db: Queryable,
  filter: BulkFilterColumns,
  bound: KeysetPosition,
): Promise<number> {
  const where = pendingSetWhere(filter, undefined, bound);
  const { rows } = await db.query<{ newer: string }>(
    `SELECT count(*) AS newer FROM ${OPS_DEAD_LETTERS} ${sqlWhere(where)}`,
    where.params,
  );
  return Number(rows[0]?.newer ?? 0);
}

/** Pending dead letters in all, from the trigger-maintained counts. */
export async function pendingTotal(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ total: string | null }>(
    "SELECT sum(count) AS total FROM core.dead_letter_counts WHERE status = 'pending_review'",
  );
  return Number(rows[0]?.total ?? 0);
}

/** An operation as stored; timestamps as RFC 3339 text with microseconds. */
export interface OperationRow {
  id: string;
  kind: "replay" | "discard";
  status: "running" | "completed" | "cancelled" | "failed";
  filter: Record<string, unknown>;
  reason: string | null;
  /** A replay that sends `outlived` rows too, with `reason` (migration 0021). */
  force_outlived: boolean;
  delay_seconds: number;
  rate_per_second: number;
  planned: number;
  cursor_position: number;
  processed: number;
  replayed: number;
  superseded: number;
  discarded: number;
  conflicts: number;
  failed: number;
  chunk_failures: number;
  last_error: string | null;
  submitted_by: string;
  submitted_at: string;
  cancelled_by: string | null;
  finished_at: string | null;
  updated_at: string;
  next_run_at: string;
}

// ORDER BY below names the table's columns: the select list renders the timestamps as text under
// the same names, and an unqualified name would sort by that text instead of using the indexes.
const OPERATION_COLUMNS = `id, kind, status, filter, reason, force_outlived, delay_seconds, rate_per_second, planned::int AS planned,
  cursor_position::int AS cursor_position,
  processed::int AS processed, replayed::int AS replayed, superseded::int AS superseded, discarded::int AS discarded,
  conflicts::int AS conflicts, failed::int AS failed, chunk_failures, last_error, submitted_by,
  ${utc("submitted_at")} AS submitted_at, cancelled_by, ${utc("finished_at")} AS finished_at,
  ${utc("updated_at")} AS updated_at, ${utc("next_run_at")} AS next_run_at`;

/** What creating an operation records. */
export interface NewOperation {
  readonly kind: "replay" | "discard";
  readonly filter: BulkFilterColumns;
  readonly reason: string | null;
  /** Replay `outlived` rows too; needs `reason`. @default false */
  readonly forceOutlived?: boolean;
  readonly delaySeconds: number;
  readonly ratePerSecond: number;
  readonly planned: number;
  /** SHA-256 of the plan token that confirmed it, if one did. */
  readonly planTokenDigest: Buffer | null;
  readonly submittedBy: string;
}

export async function insertOperation(db: Queryable, op: NewOperation): Promise<OperationRow> {
  const { rows } = await db.query<OperationRow>(
    `INSERT INTO core.bulk_operations
            (kind, filter, reason, delay_seconds, rate_per_second, planned, plan_token_digest, submitted_by,
             force_outlived)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     RETURNING ${OPERATION_COLUMNS}`,
    [
      op.kind,
      JSON.stringify(op.filter),
      op.reason,
      op.delaySeconds,
      op.ratePerSecond,
      op.planned,
      op.planTokenDigest,
      op.submittedBy,
      op.forceOutlived ?? false,
    ],
  );
  return rows[0] as OperationRow;
}

/**
 * The running operation of `kind` whose filter is `filter` as core.bulk_filter_digest reads filters
 * (key order does not matter, nor the message's case), if any: the one the unique index
 * bulk_operations_one_running_per_filter (migrations 0028, 0030) refused a second start for.
 */
export async function runningOperationId(
  db: Queryable,
  kind: "replay" | "discard",
  filter: BulkFilterColumns,
): Promise<string | undefined> {
  const { rows } = await db.query<{ id: string }>(
    `SELECT id FROM core.bulk_operations
      WHERE status = 'running' AND kind = $1 AND filter_digest = core.bulk_filter_digest($2::jsonb)`,
    [kind, JSON.stringify(filter)],
  );
  return rows[0]?.id;
}

/**
 * Writes an operation's set: the pending rows `filter` matches up to `bound`, numbered in
 * (created_at, id) order. Run in the snapshot that counted them, so it writes the rows counted.
 */
export async function insertOperationItems(
  db: Queryable,
  operationId: string,
  filter: BulkFilterColumns,
  bound: KeysetPosition,
): Promise<number> {
  const where = pendingSetWhere(filter, bound);
  where.params.push(operationId);
  const { rowCount } = await db.query(
    `INSERT INTO core.bulk_operation_items (operation_id, position, dead_letter_id)
     SELECT $${where.params.length}::uuid, row_number() OVER (ORDER BY created_at, id), id
       FROM ${OPS_DEAD_LETTERS} ${sqlWhere(where)}`,
    where.params,
  );
  return rowCount ?? 0;
}

/**
 * Locks the next `limit` rows of an operation's set that are still pending, in the set's order,
 * after `position`. It waits for a row a concurrent decision holds (bounded by the pool's
 * lock_timeout) rather than skipping it: a skipped row whose replay then failed would stay pending
 * behind the cursor, never handled. A row that decision resolved no longer matches and is left
 * out, and LIMIT fills from the rows after it.
 */
export async function lockOperationChunk(
  tx: Queryable,
  operationId: string,
  position: number,
  limit: number,
): Promise<Array<ReplayRow & { position: number }>> {
  const { rows } = await tx.query<ReplayRow & { position: number }>(
    `SELECT i.position::int AS position, ${REPLAY_COLUMNS}
       FROM core.bulk_operation_items i JOIN core.dead_letters d ON d.id = i.dead_letter_id
      WHERE i.operation_id = $1 AND i.position > $2 AND d.status = 'pending_review'
      ORDER BY i.position LIMIT ${Number(limit)} FOR UPDATE OF d`,
    [operationId, position],
  );
  return rows;
}

export async function getOperation(db: Queryable, id: string): Promise<OperationRow | undefined> {
  const { rows } = await db.query<OperationRow>(
    `SELECT ${OPERATION_COLUMNS} FROM core.bulk_operations WHERE id = $1`,
    [id],
  );
  return rows[0];
}

/** Operations newest first. */
export async function listOperations(
  db: Queryable,
  options: { status?: string; kind?: string; limit: number },
): Promise<OperationRow[]> {
  const { rows } = await db.query<OperationRow>(
    `SELECT ${OPERATION_COLUMNS} FROM core.bulk_operations
      WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR kind = $2)
      ORDER BY bulk_operations.submitted_at DESC, bulk_operations.id DESC LIMIT ${Number(options.limit)}`,
    [options.status ?? null, options.kind ?? null],
  );
  return rows;
}

/** Cancels a running operation by `actor`; undefined when it is not running (or does not exist). */
export async function cancelOperation(
  db: Queryable,
  id: string,
  actor: string,
): Promise<OperationRow | undefined> {
  // Waits for a chunk in flight (it holds the row), so a cancel answered is one no chunk follows.
  const { rows } = await db.query<OperationRow>(
    `UPDATE core.bulk_operations SET status = 'cancelled', cancelled_by = $2, finished_at = now()
      WHERE id = $1 AND status = 'running'
      RETURNING ${OPERATION_COLUMNS}`,
    [id, actor],
  );
  return rows[0];
}

/**
 * Why a bulk operation left a dead letter pending: its job was applied with another payload, SQS
 * refused the send, it names a queue not registered for its consumer, or it is an undelivered
 * follow-up whose provenance fails (migration 0019).
 */
export type SkipReason = "conflict" | "send-failed" | "foreign-queue" | "unproven-follow-up" | "outlived";

/** The dead letters an operation left pending, and why. */
export interface OperationSkip {
  dead_letter_id: string;
  reason: SkipReason;
  detail: string;
  at: string;
}

export async function operationSkips(db: Queryable, id: string, limit: number): Promise<OperationSkip[]> {
  const { rows } = await db.query<OperationSkip>(
    `SELECT dead_letter_id, reason, detail, ${utc("at")} AS at FROM core.bulk_operation_skips
      WHERE operation_id = $1 ORDER BY bulk_operation_skips.at, dead_letter_id LIMIT ${Number(limit)}`,
    [id],
  );
  return rows;
}

/**
 * Takes the running operation due soonest, locked for one chunk. SKIP LOCKED: workers running at
 * once share the operations instead of queueing on one.
 */
export async function claimDueOperation(tx: Queryable): Promise<OperationRow | undefined> {
  const { rows } = await tx.query<OperationRow>(
    `SELECT ${OPERATION_COLUMNS} FROM core.bulk_operations
      WHERE status = 'running' AND next_run_at <= now()
      ORDER BY bulk_operations.next_run_at LIMIT 1 FOR UPDATE SKIP LOCKED`,
  );
  return rows[0];
}

/** Milliseconds until the next running operation is due (0 when one is), or undefined when none runs. */
export async function msUntilDue(db: Queryable): Promise<number | undefined> {
  // Clamped here, not with SQL's greatest(): greatest ignores a NULL, so with no operation running
  // it answered 0, "one is due now", and a worker polled the table until its budget ran out.
  const { rows } = await db.query<{ ms: number | null }>(
    `SELECT (extract(epoch FROM min(next_run_at) - now()) * 1000)::float8 AS ms
       FROM core.bulk_operations WHERE status = 'running'`,
  );
  const ms = rows[0]?.ms;
  return ms === null || ms === undefined ? undefined : Math.max(0, ms);
}

/** What one chunk did. */
export interface ChunkProgress {
  /** The set position of the chunk's last row; null for an empty chunk. */
  readonly lastPosition: number | null;
  readonly rows: number;
  /** Seconds before the operation is due again (the worker's pacing policy). */
  readonly pauseSeconds: number;
  readonly replayed: number;
  readonly superseded: number;
  readonly discarded: number;
  readonly conflicts: number;
  readonly failed: number;
  /** The set is exhausted: the operation completes. */
  readonly done: boolean;
}

/**
 * Records a chunk in the operation, in the chunk's transaction, and paces it: not due again before
 * `pauseSeconds` after it was due (or now, if it ran late), so a resumed operation does not burst.
 */
export async function recordChunk(tx: Queryable, id: string, progress: ChunkProgress): Promise<void> {
  await tx.query(
    `UPDATE core.bulk_operations
        SET cursor_position = greatest(cursor_position, coalesce($2::bigint, cursor_position)),
            processed = processed + $3, replayed = replayed + $4, superseded = superseded + $5,
            discarded = discarded + $6, conflicts = conflicts + $7, failed = failed + $8,
            chunk_failures = 0, last_error = NULL,
            next_run_at = greatest(next_run_at, now()) + make_interval(secs => $10),
            status = CASE WHEN $9 THEN 'completed' ELSE status END,
            finished_at = CASE WHEN $9 THEN now() ELSE finished_at END
      WHERE id = $1`,
    [
      id,
      progress.lastPosition,
      progress.rows,
      progress.replayed,
      progress.superseded,
      progress.discarded,
      progress.conflicts,
      progress.failed,
      progress.done,
      progress.pauseSeconds,
    ],
  );
}

/**
 * Records a chunk that could not run (its transaction rolled back): tried again after a backoff
 * of 2^failures seconds (at most a minute); after `failAfter` failures in a row the operation fails.
 */
export async function recordChunkFailure(
  db: Queryable,
  id: string,
  error: string,
  failAfter: number,
): Promise<void> {
  await db.query(
    `UPDATE core.bulk_operations
        SET chunk_failures = chunk_failures + 1, last_error = left($2, 1000),
            next_run_at = now() + make_interval(secs => least(60, 2 ^ (chunk_failures + 1))),
            status = CASE WHEN chunk_failures + 1 >= $3 THEN 'failed' ELSE status END,
            finished_at = CASE WHEN chunk_failures + 1 >= $3 THEN now() ELSE finished_at END
      WHERE id = $1 AND status = 'running'`,
    [id, error, failAfter],
  );
}

/** Records the rows a chunk left pending, and why. */
export async function recordSkips(
  tx: Queryable,
  operationId: string,
  skips: ReadonlyArray<{ id: string; reason: SkipReason; detail: string }>,
): Promise<void> {
  if (skips.length === 0) return;
  await tx.query(
    `INSERT INTO core.bulk_operation_skips (operation_id, dead_letter_id, reason, detail)
     SELECT $1, s.id, s.reason, left(s.detail, 1000) FROM unnest($2::uuid[], $3::text[], $4::text[]) AS s(id, reason, detail)
     ON CONFLICT DO NOTHING`,
    [operationId, skips.map((s) => s.id), skips.map((s) => s.reason), skips.map((s) => s.detail)],
  );
}
