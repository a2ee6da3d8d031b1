/**
 * What a fence table must still do, checked on the shipped one and on each candidate layout:
 *
 * 1. the fence insert's duplicate detection, run as the harness runs it (INSERT … ON CONFLICT
 *    (job_id, consumer) DO NOTHING RETURNING 1, adapted to the layout's columns) with an existing
 *    and a new key, rolled back, and the harness's statement unchanged (does the layout need code
 *    changes?); and a concurrent duplicate: B inserts a key A holds uncommitted, then A commits: B
 *    must wait, then get no row;
 * 2. the replay path's lookup of one fence by job_id and consumer: its plan, and the median of 5
 *    timed runs after one warm-up;
 * 3. TTL cleanup's batch query, the inner SELECT of core.delete_expired_fences (WHERE expires_at <
 *    cutoff ORDER BY expires_at LIMIT CLEANUP_DEFAULTS.batchSize FOR UPDATE SKIP LOCKED) with the
 *    cutoff at the median expires_at (a backlog of half the table), in a rolled-back transaction:
 *    its plan, and the median of 5 timed runs after one warm-up.
 */
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import pg from "pg";
import { CLEANUP_DEFAULTS } from "../../shared/fence/cleanup.ts";
import { explain, nodeTypes } from "../lib/plans.ts";
import { int, median, ms, round2 } from "../lib/report.ts";
import { at, type Cleanups } from "../lib/support.ts";
import { CONSUMER, TTL } from "./seed.ts";

/** How a layout's fence is inserted and looked up. */
export interface FenceInsert {
  /** Returns 1 row when inserted, none for a duplicate. `$1` job id, `$2` tenant id. */
  readonly sql: (table: string) => string;
  /** A fence looked up by job id (`$1`) and consumer, as the replay queries do (shared/db/queries/replay-queries.ts). */
  readonly lookup: (table: string) => string;
}

/** The harness's insert as shipped (shared/db/queries/begin-with-fences.ts): the id from the registry. */
export const shippedInsert: FenceInsert = {
  sql: (t) => `INSERT INTO ${t} (job_id, consumer_id, tenant_id, processed_at, expires_at)
    VALUES ($1, (SELECT core.consumer_id('${CONSUMER}')), $2, now(), date_trunc('minute', now()) + interval '${TTL}' + interval '1 minute')
    ON CONFLICT (job_id, consumer_id) DO NOTHING RETURNING 1`,
  lookup: (t) =>
    `SELECT 1 FROM ${t} p JOIN core.consumer_roles c ON c.id = p.consumer_id WHERE p.job_id = $1 AND c.consumer = '${CONSUMER}'`,
};

const BATCH = CLEANUP_DEFAULTS.batchSize;
const RUNS = 5;

/** The inner SELECT of core.delete_expired_fences, with `now()` as `$1`. */
const cleanupBatchSql = (t: string) => `
SELECT ctid FROM ${t}
 WHERE expires_at < $1
 ORDER BY expires_at
 LIMIT ${BATCH}
   FOR UPDATE SKIP LOCKED`;

export interface Functional {
  /** The harness's own fence insert, unchanged, with an existing key: "no row (duplicate)" or the error. */
  readonly harness_sql_unchanged: string;
  /** The layout's insert (adapted where it must be) with an existing key. */
  readonly duplicate_detected: string;
  /** …and with a new key. */
  readonly new_key_inserted: string;
  /** A second transaction inserting a key a first one holds uncommitted: waited, then no row? */
  readonly concurrent_duplicate: string;
  /** The replay path's lookup of one fence: plan and median time. */
  readonly lookup_plan: string;
  readonly lookup_ms: number;
  readonly cleanup_plan: string;
  readonly cleanup_batch_ms: number;
  readonly cleanup_batch_rows: number;
}

/**
 * `sql` run RUNS + 1 times, each in a transaction rolled back when `transaction`: the median time
 * of all but the first (it warms the cache), and the rows the last returned.
 */
async function timed(
  db: pg.Client,
  sql: string,
  values: unknown[],
  transaction: boolean,
): Promise<{ ms: number; rows: number }> {
  const times: number[] = [];
  let rows = 0;
  for (let run = 0; run <= RUNS; run++) {
    if (transaction) await db.query("BEGIN");
    const t0 = performance.now();
    const r = await db.query(sql, values);
    const elapsed = performance.now() - t0;
    if (transaction) await db.query("ROLLBACK");
    rows = r.rowCount ?? 0;
    if (run > 0) times.push(elapsed);
  }
  return { ms: round2(median(times)), rows };
}

/** The checks, on `db` and a second connection of their own (closed by `cleanups`). */
export async function createChecker(
  url: string,
  db: pg.Client,
  cutoff: Date,
  cleanups: Cleanups,
): Promise<(t: string, insert: FenceInsert) => Promise<Functional>> {
  const other = new pg.Client({ connectionString: url, application_name: "jobfence-bench-storage-b" });
  await other.connect();
  cleanups.push(() => other.end());
  await other.query("SET lock_timeout = '5s'");

  const concurrentDuplicate = async (t: string, insert: FenceInsert): Promise<string> => {
    const key = randomUUID();
    await db.query("BEGIN");
    try {
      const a = await db.query(insert.sql(t), [key, "tenant-000"]);
      if (a.rowCount !== 1) return "A did not insert";
      let settled = false;
      const b = other.query(insert.sql(t), [key, "tenant-000"]).then(
        (r) => {
          settled = true;
          return r.rowCount === 1 ? "inserted a second fence" : "no row (duplicate)";
        },
        (error: Error) => {
          settled = true;
          return `ERROR: ${error.message}`;
        },
      );
      await new Promise((resolve) => setTimeout(resolve, 100));
      const waited = !settled;
      await db.query("COMMIT");
      const outcome = await b;
      return waited ? `waited, then ${outcome}` : `did not wait: ${outcome}`;
    } catch (error) {
      await db.query("ROLLBACK");
      return `ERROR: ${(error as Error).message}`;
    } finally {
      await db.query(`DELETE FROM ${t} WHERE job_id = $1`, [key]);
    }
  };

  const attempt = async (sql: string, jobId: string): Promise<string> => {
    await db.query("BEGIN");
    try {
      const r = await db.query(sql, [jobId, "tenant-000"]);
      return r.rowCount === 1 ? "inserted" : "no row (duplicate)";
    } catch (error) {
      return `ERROR: ${(error as Error).message}`;
    } finally {
      await db.query("ROLLBACK");
    }
  };

  const plan = async (sql: string, values: unknown[]) =>
    nodeTypes((await explain(db, sql, values)).plan).join(" > ");

  return async (t, insert) => {
    const existing = at(
      (await db.query<{ job_id: string }>(`SELECT job_id FROM ${t} LIMIT 1`)).rows,
      0,
    ).job_id;
    const unchanged = await attempt(shippedInsert.sql(t), existing);
    const duplicate = await attempt(insert.sql(t), existing);
    const fresh = await attempt(insert.sql(t), randomUUID());
    const concurrent = await concurrentDuplicate(t, insert);
    const lookupSql = insert.lookup(t);
    const lookupPlan = await plan(lookupSql, [existing]);
    const lookup = await timed(db, lookupSql, [existing], false);
    const cleanupSql = cleanupBatchSql(t);
    const cleanupPlan = await plan(cleanupSql, [cutoff]);
    const cleanup = await timed(db, cleanupSql, [cutoff], true);
    return {
      harness_sql_unchanged: unchanged,
      duplicate_detected: duplicate,
      new_key_inserted: fresh,
      concurrent_duplicate: concurrent,
      lookup_plan: lookupPlan,
      lookup_ms: lookup.ms,
      cleanup_plan: cleanupPlan,
      cleanup_batch_ms: cleanup.ms,
      cleanup_batch_rows: cleanup.rows,
    };
  };
}

const short = (text: string) => (text.length > 48 ? `${text.slice(0, 47)}…` : text);

export const SEMANTICS_TITLE =
  "fence semantics (harness SQL as is: the fence insert of begin-with-fences.ts on the layout, with an existing key; " +
  "existing/new key: the layout's insert, adapted where it must be; concurrent duplicate: B inserts a key " +
  "A holds uncommitted, then A commits)";
export const SEMANTICS_HEADERS = [
  "layout",
  "harness SQL as is",
  "existing key",
  "new key",
  "concurrent duplicate",
];
export const semanticsRow = (name: string, f: Functional) => [
  name,
  short(f.harness_sql_unchanged),
  short(f.duplicate_detected),
  short(f.new_key_inserted),
  short(f.concurrent_duplicate),
];

export const QUERIES_TITLE =
  `queries (lookup: one fence by job_id and consumer, as the replay path looks; cleanup: one batch of ` +
  `${int(BATCH)} at a backlog of half the table, rolled back; median ms of ${RUNS} after a warm-up)`;
export const QUERIES_HEADERS = ["layout", "lookup ms", "lookup plan", "cleanup batch ms", "cleanup plan"];
export const queriesRow = (name: string, f: Functional) => [
  name,
  ms(f.lookup_ms),
  f.lookup_plan,
  ms(f.cleanup_batch_ms),
  f.cleanup_plan,
];
