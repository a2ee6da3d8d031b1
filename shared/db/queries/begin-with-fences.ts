/**
 * SPEC §3's `BEGIN` and fence insert, sent as one round trip. Round trips are what a fence costs
 * (the insert itself is cheap), so the fence rides on the BEGIN the transaction needs anyway:
 * with it, a per-record transaction makes exactly as many round trips as the same work with no
 * fence (BEGIN, the work's statements, COMMIT).
 *
 * Two statements in one message need PostgreSQL's simple query protocol, which takes no bound
 * parameters, so the values are rendered as literals with pg's `escapeLiteral` (quotes doubled;
 * a backslash makes it an E'' literal, so the result is the same whatever
 * `standard_conforming_strings` is). What reaches it is already a validated envelope: text with no
 * U+0000 (the simple protocol's statement is a C string), a consumer name of `[a-z0-9-]`, and an
 * integer TTL. `test/integration/begin-with-fences.test.ts` feeds it hostile ids.
 *
 * The insert is SPEC §3's `ON CONFLICT DO NOTHING`: a duplicate is an answer, not an error, so
 * it neither aborts the transaction (a batch's other records go on) nor writes an ERROR line to the
 * server's log. (A plain INSERT whose unique violation signals the duplicate measured about a tenth
 * cheaper on this machine, since a speculative insertion costs a conflict check and a confirmation;
 * docs/performance.md has the figures and why it was not taken.) Several fences (batch commit) are
 * inserted in job-id order, so two transactions whose batches share jobs take the fences' locks in
 * the same order and queue behind each other instead of deadlocking.
 */
import pg from "pg";

/** The fences of one transaction. */
export interface FenceSet {
  /** The consumer's name: the second half of every fence key. */
  readonly consumer: string;
  /** `expires_at = processed_at + ttl` (SPEC §7); a positive whole number. */
  readonly ttlSeconds: number;
  /** One entry per job; a job id given twice is inserted once. */
  readonly jobs: ReadonlyArray<{ readonly jobId: string; readonly tenantId: string }>;
}

/**
 * Opens a transaction on `client` and inserts the fences; returns the job ids whose fence this
 * transaction now holds. An id not returned is a duplicate: another delivery of it committed (a
 * concurrent holder makes this wait, bounded by lock_timeout, until it commits or rolls back); the
 * transaction stays usable for the others. On an error the transaction is left open and aborted:
 * the caller rolls back.
 */
export async function beginWithFences(client: pg.ClientBase, fences: FenceSet): Promise<Set<string>> {
  const byId = new Map<string, string>();
  for (const job of fences.jobs) if (!byId.has(job.jobId)) byId.set(job.jobId, job.tenantId);
  if (byId.size === 0) throw new RangeError("a fence set needs at least one job");
  // Sorted here (UTF-16 order: any order works, as long as every transaction uses the same one);
  // PostgreSQL inserts a VALUES list in the order written, and needs no sort of its own.
  const rows = [...byId]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([jobId, tenantId]) => row(fences.consumer, fences.ttlSeconds, jobId, tenantId));
  const results = (await client.query(
    `BEGIN;\n${INSERT} VALUES ${rows.join(",\n")}\nON CONFLICT (job_id, consumer) DO NOTHING RETURNING job_id`,
  )) as unknown as pg.QueryResult<{ job_id: string }>[];
  const inserted = results[1];
  if (!Array.isArray(results) || !inserted) throw new Error("BEGIN and the fence insert returned no results");
  return new Set(inserted.rows.map((r) => r.job_id));
}

const INSERT = "INSERT INTO core.processed_jobs (job_id, consumer, tenant_id, processed_at, expires_at)";

/**
 * One fence's VALUES row, every value a literal. `expires_at` is the start of the current minute
 * plus the TTL plus one minute: never before `now() + ttl` (a fence outlives its TTL by under a
 * minute), and the same for every fence written in one minute, so the expires_at index stores
 * each value once (B-tree deduplication) instead of once per row: about 16 of the 232 bytes a
 * fence took at 1,000,000 rows (bench/fence-storage.ts).
 */
function row(consumer: string, ttlSeconds: number, jobId: string, tenantId: string): string {
  if (!Number.isSafeInteger(ttlSeconds) || ttlSeconds < 1) {
    throw new RangeError(`ttlSeconds must be a positive whole number, got ${ttlSeconds}`);
  }
  const literal = pg.escapeLiteral;
  return `(${literal(jobId)}, ${literal(consumer)}, ${literal(tenantId)}, now(), date_trunc('minute', now()) + make_interval(secs => ${ttlSeconds + 60}))`;
}
