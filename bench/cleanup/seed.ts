/**
 * The fence table as bench/cleanup.ts writes and reads it directly (the one place its columns are
 * named): each round's expired fences, seeded by set-based SQL in chunks, and the check after the
 * cleanup that nothing expired is left and every live fence survived.
 */
import { performance } from "node:perf_hooks";
import type pg from "pg";
import { chunkRanges } from "../lib/chunks.ts";
import { at } from "../lib/support.ts";

/** The consumers the fences belong to; each has its role (and its registry id) before the seed. */
export const CONSUMERS = [
  "award-points",
  "send-receipt-email",
  "sync-crm-contact",
  "deliver-webhook",
] as const;

/** Live fences carry this prefix; the seeded expired ones `expired-`. */
export const LIVE_PREFIX = "live-";

/**
 * One chunk of expired fences: ids `expired-<round>-<md5>` (random order in the primary key, as
 * real job ids are), consumers and tenants spread evenly, expires_at rising with i over the 24 h
 * before now() − 1 minute (microseconds apart), processed_at a week before expiry. A fence names
 * its consumer by the registry's id (migration 0016), looked up once per statement.
 *
 * $1 the round's tag; $2 consumers; $3, $4 the range of i; $5 rows in all; $6 seconds per row.
 */
const SEED_CHUNK_SQL = `
WITH consumer AS (
  SELECT array_agg(core.consumer_id(name) ORDER BY n) AS ids FROM unnest($2::text[]) WITH ORDINALITY AS u(name, n)
)
INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, processed_at, expires_at)
SELECT 'expired-' || $1::text || '-' || md5($1::text || ':' || i),
       consumer.ids[1 + (i % cardinality(consumer.ids))::int],
       'tenant-' || lpad((i % 50)::text, 3, '0'),
       e - interval '7 days',
       e
  FROM consumer,
       (SELECT i, now() - interval '1 minute' - make_interval(secs => ($5::bigint - i + random()) * $6::float8) AS e
          FROM generate_series($3::bigint, $4::bigint) AS i) AS s`;

export interface SeededRound {
  readonly seeded: number;
  /** Seed, VACUUM (ANALYZE) and CHECKPOINT. */
  readonly seedMs: number;
  /** core.processed_jobs after the seed: every row (seeded + live fences so far), and MB with indexes. */
  readonly tableRows: number;
  readonly tableMb: number;
}

const one = async <R extends pg.QueryResultRow>(admin: pg.Client, sql: string): Promise<R> =>
  at((await admin.query<R>(sql)).rows, 0);

/**
 * Seeds `rows` expired fences for round `round`: the previous round's deletes vacuumed first (so
 * the seed reuses their space), then VACUUM (ANALYZE) and a CHECKPOINT, so every round starts alike.
 */
export async function seedExpiredFences(admin: pg.Client, round: number, rows: number): Promise<SeededRound> {
  const start = performance.now();
  await admin.query("VACUUM core.processed_jobs");
  const step = 86_400 / rows;
  let seeded = 0;
  for (const { lo, hi } of chunkRanges(rows)) {
    const insert = await admin.query(SEED_CHUNK_SQL, [`r${round}`, CONSUMERS, lo, hi - 1, rows, step]);
    seeded += insert.rowCount ?? 0;
  }
  await admin.query("VACUUM (ANALYZE) core.processed_jobs");
  await admin.query("CHECKPOINT");
  const seedMs = performance.now() - start;
  const size = await one<{ total_mb: string; rows: string }>(
    admin,
    `SELECT round(pg_total_relation_size('core.processed_jobs') / 1048576.0)::text AS total_mb,
            (SELECT count(*) FROM core.processed_jobs)::text AS rows`,
  );
  return { seeded, seedMs, tableRows: Number(size.rows), tableMb: Number(size.total_mb) };
}

/** Expired fences left, and live fences present (every one inserted should be). */
export async function fencesLeft(admin: pg.Client): Promise<{ expired: number; live: number }> {
  return one<{ expired: number; live: number }>(
    admin,
    `SELECT count(*) FILTER (WHERE expires_at < now())::int AS expired,
            count(*) FILTER (WHERE job_id LIKE '${LIVE_PREFIX}%')::int AS live
       FROM core.processed_jobs`,
  );
}
