/**
 * The fence transaction's `BEGIN` and fence insert, sent as one round trip. Round trips are what a fence costs
 * (the insert itself is cheap), so the fence rides on the BEGIN the transaction needs anyway:
 * with it, a per-record transaction makes exactly as many round trips as the same work with no
 * fence (BEGIN, the work's statements, COMMIT).
 *
 * Several statements in one message need PostgreSQL's simple query protocol, which takes no bound
 * parameters, so the values are rendered as literals with pg's `escapeLiteral` (quotes doubled;
 * a backslash makes it an E'' literal, so the result is the same whatever
 * `standard_conforming_strings` is). What reaches it is already a validated envelope: text with no
 * U+0000 (the simple protocol's statement is a C string), a consumer name of `[a-z0-9-]`, and an
 * integer TTL. `test/integration/begin-with-fences.test.ts` feeds it hostile ids.
 *
 * The fence names its consumer by the registry's id (`consumer_id`, migration 0016). The insert
 * takes it from the registry by name inside the statement, `(SELECT core.consumer_id(…))` in the
 * select list of an `INSERT … SELECT … FROM (VALUES …)`: one uncorrelated subquery, so one probe
 * of the registry per statement, not per fence. A consumer the registry does not have is an error
 * from `core.consumer_id` (SQLSTATE 23503), never NULL and never zero rows: an insert that wrote no
 * fence would read as "every job a duplicate", and the jobs would be acked without being applied.
 *
 * The insert is `ON CONFLICT DO NOTHING`: a duplicate is an answer, not an error, so
 * it neither aborts the transaction (a batch's other records go on) nor writes an ERROR line to the
 * server's log (docs/performance.md compares it with a plain INSERT). Several fences (batch commit)
 * are inserted in job-id order, so two transactions whose batches share jobs take the fences' locks
 * in the same order and queue behind each other instead of deadlocking (the VALUES list is read in
 * the order written, and nothing between it and the insert reorders it).
 *
 * Each inserted row also returns the transaction's id, which the insert has just assigned: the
 * harness checks at COMMIT that it commits this transaction and no other. That costs neither a
 * round trip nor a statement. When no fence was inserted there is no id to check (and no work runs
 * in that transaction). A duplicate pays a round trip: {@link fenceFingerprints} reads the
 * fingerprints of the fences that were already there, to tell a repeat from a conflict.
 *
 * Between BEGIN and the insert, the same message sets `jobfence.fence_scope` for the transaction to
 * {@link FENCE_SCOPE} and returns it: a fence inserted while it is set can be committed only by the
 * harness's checked COMMIT (migration 0023's deferred trigger), and that check compares the scope
 * the transaction commits with against the one returned here.
 */
import pg from "pg";
import { FINGERPRINT_BYTES } from "../../envelope/fingerprint.ts";

/**
 * The role and search_path a statement runs with, as one text: what the fence transaction began
 * with, compared again at its COMMIT (core.fence_commit_check). `%I` quotes the role where needed,
 * so no two pairs give the same text.
 */
export const FENCE_SCOPE =
  "pg_catalog.format('%I %s', current_user, pg_catalog.current_setting('search_path'))";

/**
 * A batch's scope: {@link FENCE_SCOPE}, every server setting's value (as a digest; extensions' and
 * placeholders' dotted names aside, which appear as their libraries load) and whether the session
 * has a temporary relation. Batch-mates share the transaction, so one work's SET LOCAL (a DateStyle,
 * a TimeZone, standard_conforming_strings) or temporary table (which would shadow a table of the
 * same name for the next work) must not reach a later record's work: the COMMIT check then finds the
 * scope changed, the batch fails without a culprit, and each record is redone alone.
 */
export const BATCH_FENCE_SCOPE = `pg_catalog.format('%s %s %s', ${FENCE_SCOPE},
    (SELECT pg_catalog.md5(pg_catalog.string_agg(s.name || '=' || s.setting, ',' ORDER BY s.name))
       FROM pg_catalog.pg_settings AS s WHERE s.name NOT LIKE '%.%'),
    EXISTS (SELECT FROM pg_catalog.pg_class AS c WHERE c.relnamespace = pg_catalog.pg_my_temp_schema()))`;

/** Marks the transaction as a fence transaction, with the scope it began with (for this transaction only). */
function markFenceTransaction(scopeSql: string): string {
  return `SELECT pg_catalog.set_config('jobfence.fence_scope', ${scopeSql}, true) AS scope`;
}

/** The fences of one transaction. */
export interface FenceSet {
  /** The consumer's name: the second half of every fence key. */
  readonly consumer: string;
  /** `expires_at = processed_at + ttl` (docs/design.md §7.1); a positive whole number. */
  readonly ttlSeconds: number;
  /** One entry per job; a job id given twice is inserted once. */
  readonly jobs: ReadonlyArray<FenceRow>;
}

/** One job's fence. */
export interface FenceRow {
  readonly jobId: string;
  readonly tenantId: string;
  /** The job's fingerprint (16 bytes, `jobFingerprint`). */
  readonly fingerprint: Buffer;
}

/** What the insert did. */
export interface FencesInserted {
  /** The job ids whose fence this transaction now holds; any other is a duplicate. */
  readonly fresh: Set<string>;
  /** The transaction's id (xid8 as text), or null when no fence was inserted. */
  readonly xid: string | null;
  /** The role and search_path the transaction began with ({@link FENCE_SCOPE}; a batch's, {@link BATCH_FENCE_SCOPE}). */
  readonly scope: string;
  /** The expression the scope was read with, and is read with again at the COMMIT check. @default FENCE_SCOPE */
  readonly scopeSql?: string;
}

/**
 * Opens a transaction on `client` and inserts the fences; returns the job ids whose fence this
 * transaction now holds. An id not returned is a duplicate: another delivery of it committed (a
 * concurrent holder makes this wait, bounded by lock_timeout, until it commits or rolls back); the
 * transaction stays usable for the others. On an error the transaction is left open and aborted:
 * the caller rolls back.
 */
export async function beginWithFences(client: pg.ClientBase, fences: FenceSet): Promise<FencesInserted> {
  const byId = new Map<string, FenceRow>();
  for (const job of fences.jobs) if (!byId.has(job.jobId)) byId.set(job.jobId, job);
  if (byId.size === 0) throw new RangeError("a fence set needs at least one job");
  // Sorted here (UTF-16 order: any order works, as long as every transaction uses the same one);
  // PostgreSQL inserts a VALUES list in the order written, and needs no sort of its own.
  const rows = [...byId].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, job]) => row(job));
  const scopeSql = rows.length > 1 ? BATCH_FENCE_SCOPE : FENCE_SCOPE;
  const results = (await client.query(
    `BEGIN;\n${markFenceTransaction(scopeSql)};\n${fenceInsert(fences.consumer, fences.ttlSeconds, rows)}`,
  )) as unknown as [
    unknown,
    pg.QueryResult<{ scope: string }>,
    pg.QueryResult<{ job_id: string; xid: string }>,
  ];
  const scope = Array.isArray(results) ? results[1]?.rows[0]?.scope : undefined;
  const inserted = Array.isArray(results) ? results[2] : undefined;
  if (!inserted || scope === undefined)
    throw new RangeError("BEGIN and the fence insert returned no results");
  return {
    fresh: new Set(inserted.rows.map((r) => r.job_id)),
    xid: inserted.rows[0]?.xid ?? null,
    scope,
    scopeSql,
  };
}

/**
 * The harness's COMMIT of a transaction {@link beginWithFences} opened, as one message: the check
 * that it is still that transaction with the role and search_path it began with, and that every
 * fence of `fresh` (the fences it inserted and did not withdraw) is still there, which marks it
 * for the fences' deferred trigger (migration 0023), then COMMIT. Any other COMMIT of a transaction
 * that inserted a fence fails. With `reset`, the check also resets the session before the COMMIT
 * ({@link RESET_FENCE_SESSION}). With no fence inserted there is nothing to check.
 */
export function fenceCommit(
  inserted: Pick<FencesInserted, "xid" | "scope" | "fresh" | "scopeSql">,
  reset = false,
): string {
  const { xid, scope, fresh, scopeSql = FENCE_SCOPE } = inserted;
  if (xid === null) return `${reset ? RESET_FENCE_SESSION : "SELECT"};\nCOMMIT`;
  // Spliced into the SQL: it must be the digits PostgreSQL sent.
  if (!/^\d+$/.test(xid)) throw new RangeError(`not a transaction id: ${xid}`);
  const fences = `ARRAY[${[...fresh].map((id) => pg.escapeLiteral(id)).join(", ")}]::text[]`;
  return `SELECT core.fence_commit_check('${xid}'::xid8, ${pg.escapeLiteral(scope)}, ${scopeSql}, ${reset}, ${fences});\nCOMMIT`;
}

/**
 * Undoes what a work may have changed of its pooled session (settings, role, LISTEN, session
 * advisory locks, cursors WITH HOLD, temporary objects, prepared statements: migration 0023), so
 * the next job on the connection finds it as the pool opened it.
 */
export const RESET_FENCE_SESSION = "SELECT core.reset_fence_session()";

/**
 * The fingerprints of existing fences (NULL for a fence written before fingerprints), by job id.
 * Run inside the fence transaction after the insert: the insert waited for any concurrent holder,
 * so what it found is committed and visible to this later statement.
 */
export async function fenceFingerprints(
  client: pg.ClientBase,
  consumer: string,
  jobIds: readonly string[],
): Promise<Map<string, Buffer | null>> {
  const { rows } = await client.query<{ job_id: string; fingerprint: Buffer | null }>(
    `SELECT p.job_id, uuid_send(p.fingerprint) AS fingerprint
       FROM core.consumer_roles AS c JOIN core.processed_jobs AS p ON p.consumer_id = c.id
      WHERE c.consumer = $1 AND p.job_id = ANY ($2::text[])`,
    [consumer, jobIds],
  );
  return new Map(rows.map((r) => [r.job_id, r.fingerprint]));
}

/**
 * The insert of these VALUES rows. The consumer's id, `processed_at` and `expires_at` are the same
 * for every fence of the statement, so they are written once, in the select list. `expires_at` is
 * the start of the current minute plus the TTL plus one minute: never before `now() + ttl` (a fence
 * outlives its TTL by under a minute), and the same for every fence written in one minute, so the
 * expires_at index stores each value once (B-tree deduplication) instead of once per row
 * (docs/performance.md, "Fence storage", has what that saves).
 */
function fenceInsert(consumer: string, ttlSeconds: number, rows: readonly string[]): string {
  if (!Number.isSafeInteger(ttlSeconds) || ttlSeconds < 1) {
    throw new RangeError(`ttlSeconds must be a positive whole number, got ${ttlSeconds}`);
  }
  return `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, fingerprint, processed_at, expires_at)
SELECT v.job_id, (SELECT core.consumer_id(${pg.escapeLiteral(consumer)})), v.tenant_id, v.fingerprint, now(),
       date_trunc('minute', now()) + make_interval(secs => ${ttlSeconds + 60})
  FROM (VALUES ${rows.join(",\n")}) AS v (job_id, tenant_id, fingerprint)
ON CONFLICT (job_id, consumer_id) DO NOTHING RETURNING job_id, pg_current_xact_id()::text AS xid`;
}

/** One fence's VALUES row, every value a literal. */
function row(job: FenceRow): string {
  if (job.fingerprint.length !== FINGERPRINT_BYTES) {
    throw new RangeError(`a fence fingerprint is ${FINGERPRINT_BYTES} bytes, got ${job.fingerprint.length}`);
  }
  const literal = pg.escapeLiteral;
  // Hex digits only, so the literal needs no escaping. The column is uuid (16 bytes, no header).
  const fingerprint = `'${job.fingerprint.toString("hex")}'::uuid`;
  return `(${literal(job.jobId)}, ${literal(job.tenantId)}, ${fingerprint})`;
}
