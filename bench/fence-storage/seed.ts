/**
 * The fence table as bench/fence-storage.ts and bench/experiments/fence-layouts.ts seed it:
 * set-based SQL (INSERT … SELECT FROM generate_series, bench/lib/chunks.ts) into the migrated
 * `core.processed_jobs` with its indexes in place, so they grow as they do in production (a rebuilt
 * index is denser; that case is measured separately). Each fence: job_id a random UUID as text (36
 * characters, random order in the primary key), consumer `award-points` (by its registry id,
 * migration 0016), tenant `tenant-000`…`tenant-049`, a 16-byte fingerprint (as the harness writes
 * one), processed_at rising with insertion order over the last 7 days (unique: the per-record commit
 * mode), expires_at as the harness writes it (the start of processed_at's minute + 7 days + 1
 * minute: shared/db/queries/begin-with-fences.ts). Nothing is expired: the steady state of a table
 * whose cleanup keeps up. Then VACUUM (ANALYZE).
 */
import { performance } from "node:perf_hooks";
import pg from "pg";
import { chunkRanges } from "../lib/chunks.ts";
import { at, type Cleanups } from "../lib/support.ts";

/** The consumer every seeded fence belongs to. */
export const CONSUMER = "award-points";
/** The fences' TTL, as an interval. */
export const TTL = "7 days";

/** $1 consumer; $2 the first processed_at; $3 seconds between fences; $4, $5 the range of i (inclusive). */
const SEED_CHUNK_SQL = `
INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, fingerprint, processed_at, expires_at)
SELECT gen_random_uuid()::text, (SELECT core.consumer_id($1::text)), 'tenant-' || lpad((i % 50)::text, 3, '0'),
       encode(substring(sha256(convert_to(i::text, 'UTF8')) FROM 1 FOR 16), 'hex')::uuid, p,
       date_trunc('minute', p) + interval '${TTL}' + interval '1 minute'
  FROM (SELECT i, $2::timestamptz + make_interval(secs => i * $3::float8) AS p
          FROM generate_series($4::bigint, $5::bigint) AS i) AS s`;

/** A connection for seeding and measuring, closed by `cleanups`. */
export async function connect(url: string, name: string, cleanups: Cleanups): Promise<pg.Client> {
  const db = new pg.Client({ connectionString: url, application_name: `jobfence-bench-${name}` });
  await db.connect();
  cleanups.push(() => db.end());
  // The candidates' CREATE INDEX and REINDEX sort a million keys: in memory, not in temp files.
  await db.query("SET maintenance_work_mem = '256MB'");
  return db;
}

export interface Seeded {
  readonly rows: number;
  /** Seed and VACUUM (ANALYZE); no figure, just how long it took. */
  readonly seedMs: number;
  /**
   * The median expires_at: the cleanup batches run as if now() were this, so half the table is
   * backlog.
   */
  readonly cutoff: Date;
}

/** Seeds `rows` fences into core.processed_jobs, then VACUUM (ANALYZE). */
export async function seedFences(db: pg.Client, rows: number): Promise<Seeded> {
  const start = performance.now();
  const base = new Date(Date.now() - 7 * 86_400_000);
  const step = (7 * 86_400) / rows;
  for (const { lo, hi } of chunkRanges(rows)) {
    await db.query(SEED_CHUNK_SQL, [CONSUMER, base, step, lo, hi - 1]);
  }
  await db.query("VACUUM (ANALYZE) core.processed_jobs");
  const seedMs = performance.now() - start;
  const cutoff = at(
    (
      await db.query<{ e: Date }>(
        "SELECT expires_at AS e FROM core.processed_jobs ORDER BY expires_at OFFSET $1 LIMIT 1",
        [Math.floor(rows / 2)],
      )
    ).rows,
    0,
  ).e;
  return { rows, seedMs, cutoff };
}
