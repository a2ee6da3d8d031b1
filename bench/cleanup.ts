/**
 * `npm run bench:cleanup`: TTL cleanup of a million expired fences while fence inserts run
 * (docs/design.md §7.2). The issue's targets: cleanup ≥ 50,000 rows/s on this machine, and the concurrent
 * inserts' p99 latency during cleanup ≤ 1.5× their p99 with no cleanup running.
 *
 * - Database: DATABASE_URL when set (a fresh database is created beside it and dropped at the end;
 *   its user needs CREATEDB and CREATEROLE, as for `npm run migrate`), otherwise an embedded
 *   PostgreSQL, `durable` by default (fsync and synchronous_commit on, as a real server runs);
 *   `--durability fast` turns fsync, synchronous_commit and full_page_writes off, which flatters
 *   both the deletes and the inserts' commits. The durability used is printed and recorded.
 * - Seed: set-based SQL in chunks (INSERT … SELECT FROM generate_series), N fences all expired,
 *   expires_at rising with insertion order over the last 24 h (fences are appended as jobs run and
 *   one TTL applies, so expiry order follows the heap), random job ids (md5) as real ids are; then
 *   VACUUM (ANALYZE) and a CHECKPOINT, so every round starts from the same state.
 * - A round: phase A (baseline), then phase B on the same table. Both run the same closed-loop
 *   inserters (`--inserters`, default 4, each its own connection in the role of the consumer it inserts for)
 *   that insert fresh live fences one transaction at a time as the consumer harness does: BEGIN;
 *   beginWithFences (BEGIN; INSERT … ON CONFLICT DO NOTHING, one round trip); COMMIT. Latency is the whole
 *   transaction, timed with performance.now(); inserts started in the warm-up are left out.
 *   A runs for a fixed time. B runs runFenceCleanup (pool logged in as jobfence_cleanup, the role's
 *   only right being core.delete_expired_fences) with a 10-minute budget until it stops on a short
 *   batch; B's samples are the inserts started while it ran. After B the benchmark checks that no
 *   expired fence is left and that every live fence inserted survived.
 * - Rounds: `--reps` (default 5; 2 with --quick) at the default batch size
 *   (CLEANUP_DEFAULTS.batchSize), each with its own A, interleaved with `--side-reps` (default 1)
 *   rounds of each `--variants` (default 20000 with no pause and 5000/50; none with --quick), so the
 *   default's choice can be judged. A variant `5000/25` is batches of 5,000 with a 25 ms pause after
 *   each full one (runFenceCleanup's pauseMs). The seed is re-made before
 *   each round.
 *
 * Options: `--rows N` (default 1,000,000), `--quick` (100,000 rows, shorter phases, no side rounds:
 * about 20 s; its B phases last a fraction of a second, so its ratios are noisy), `--reps N`, `--inserters N`,
 * `--baseline-seconds N`, `--variants 20000/0,5000/25` (`none` for no side rounds),
 * `--side-reps N`, `--durability durable|fast` (embedded only).
 * Exits 0 whatever the figures (it is a benchmark); prints a verdict line and writes
 * bench/results/cleanup.json.
 */
import { randomUUID } from "node:crypto";
import { availableParallelism, cpus, totalmem } from "node:os";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import pg from "pg";
import { createPool } from "../shared/db/pool.ts";
import { beginWithFences } from "../shared/db/queries/begin-with-fences.ts";
import { ensureConsumerRole } from "../shared/db/queries/provision-login.ts";
import type { Queryable } from "../shared/db/queryable.ts";
import { jobFingerprint } from "../shared/envelope/fingerprint.ts";
import { CLEANUP_DEFAULTS, type FenceCleanupReport, runFenceCleanup } from "../shared/fence/cleanup.ts";
import {
  ascending,
  int,
  mb,
  mean,
  ms,
  ratio,
  round2,
  secs,
  showSpread,
  spread,
  table,
  writeResult,
} from "./report.ts";
import { at, benchDatabase, createCleanups, percentile, positiveInt, runBenchmark } from "./support.ts";

// ---------------------------------------------------------------------------------------------
// Options

const { values: argv } = parseArgs({
  options: {
    rows: { type: "string" },
    quick: { type: "boolean", default: false },
    reps: { type: "string" },
    inserters: { type: "string" },
    "baseline-seconds": { type: "string" },
    variants: { type: "string" },
    "side-reps": { type: "string" },
    durability: { type: "string" },
    help: { type: "boolean", default: false },
  },
});

if (argv.help) {
  console.log(
    "usage: npm run bench:cleanup [-- --quick | --rows N] [--reps N] [--inserters N] [--baseline-seconds N]\n" +
      "                             [--variants 20000/0,5000/50|none] [--side-reps N] [--durability durable|fast]\n" +
      "  --variants    side rounds: batch size, optionally /pause in ms between batches (default: 20000/0,5000/50)\n" +
      "  DATABASE_URL  admin URL of a PostgreSQL to use (a fresh database is created beside it);\n" +
      "                unset: an embedded PostgreSQL is started (durable unless --durability fast)",
  );
  process.exit(0);
}

const QUICK = argv.quick;
const ROWS = positiveInt(argv.rows, QUICK ? 100_000 : 1_000_000, "rows");
const REPS = positiveInt(argv.reps, QUICK ? 2 : 5, "reps");
const INSERTERS = positiveInt(argv.inserters, 4, "inserters");
const BASELINE_MS = 1000 * positiveInt(argv["baseline-seconds"], QUICK ? 2 : 15, "baseline-seconds");
const SIDE_REPS = positiveInt(argv["side-reps"], 1, "side-reps");
const DEFAULT_BATCH = CLEANUP_DEFAULTS.batchSize;
if (argv.durability !== undefined && argv.durability !== "durable" && argv.durability !== "fast") {
  console.error(`--durability must be durable or fast, got ${argv.durability}`);
  process.exit(2);
}
const DURABILITY: "durable" | "fast" = argv.durability === "fast" ? "fast" : "durable";
/**
 * Inserts started this long after the inserters start are the first ones measured. Phase A follows
 * the seed's CHECKPOINT, after which each first write to a page logs the whole page: it settles
 * longer, so its baseline is not the post-checkpoint burst.
 */
const SETTLE_MS = QUICK ? 1000 : 5000;
const WARMUP_MS = QUICK ? 500 : 1000;
/** A generous budget: the run is meant to stop on a short batch, not on time. */
const CLEANUP_BUDGET_MS = 10 * 60_000;
/** Rows per seed statement. */
const SEED_CHUNK = 100_000;
/** Live fences expire in a week: cleanup must never touch them. */
const LIVE_TTL_SECONDS = 7 * 86_400;
/** The issue's targets. */
const TARGET_ROWS_PER_S = 50_000;
const TARGET_P99_RATIO = 1.5;

const CONSUMERS = ["award-points", "send-receipt-email", "sync-crm-contact", "deliver-webhook"] as const;

/** How one round's cleanup runs: its batch size, and a pause between full batches (0: none, as shipped). */
interface Variant {
  readonly batchSize: number;
  readonly pauseMs: number;
}

const DEFAULT_VARIANT: Variant = { batchSize: CLEANUP_DEFAULTS.batchSize, pauseMs: CLEANUP_DEFAULTS.pauseMs };

function variantLabel(v: Variant): string {
  return v.pauseMs > 0 ? `${v.batchSize} +${v.pauseMs}ms` : String(v.batchSize);
}

/** `1000,20000,5000/20`: batch sizes, each optionally with a pause in ms between batches. */
function parseVariants(text: string | undefined): Variant[] {
  // --quick judges the default alone: the side rounds would double its time.
  if (text === undefined && QUICK) return [];
  if (text === undefined)
    return [
      { batchSize: 20_000, pauseMs: 0 },
      { batchSize: 5_000, pauseMs: 50 },
    ];
  if (text === "none" || text === "") return [];
  const variants = text.split(",").map((part) => {
    const [batch, pause] = part.trim().split("/");
    return {
      batchSize: positiveInt(batch, 0, "variants"),
      pauseMs: pause === undefined || pause === "0" ? 0 : positiveInt(pause, 0, "variants"),
    };
  });
  const bad = variants.filter((v) => v.batchSize > 100_000);
  if (bad.length > 0) {
    console.error(
      `--variants: core.delete_expired_fences accepts 1–100000, got ${bad.map(variantLabel).join(", ")}`,
    );
    process.exit(2);
  }
  const seen = new Set([variantLabel(DEFAULT_VARIANT)]);
  return variants.filter((v) => !seen.has(variantLabel(v)) && seen.add(variantLabel(v)));
}

const VARIANTS = parseVariants(argv.variants);

// ---------------------------------------------------------------------------------------------
// SQL

/**
 * One chunk of expired fences: ids `expired-<round>-<md5>` (random order in the primary key, as
 * real job ids are), consumers and tenants spread evenly, expires_at rising with i over the 24 h
 * before now() − 1 minute (microseconds apart), processed_at a week before expiry.
 */
const SEED_CHUNK_SQL = `
INSERT INTO core.processed_jobs (job_id, consumer, tenant_id, processed_at, expires_at)
SELECT 'expired-' || $1::text || '-' || md5($1::text || ':' || i),
       ($2::text[])[1 + (i % cardinality($2::text[]))::int],
       'tenant-' || lpad((i % 50)::text, 3, '0'),
       e - interval '7 days',
       e
  FROM (SELECT i, now() - interval '1 minute' - make_interval(secs => ($5::bigint - i + random()) * $6::float8) AS e
          FROM generate_series($3::bigint, $4::bigint) AS i) AS s`;

// ---------------------------------------------------------------------------------------------
// Helpers

// ---------------------------------------------------------------------------------------------
// Inserters

interface Sample {
  /** performance.now() when BEGIN was sent. */
  readonly start: number;
  /** BEGIN … COMMIT. */
  readonly txMs: number;
  /** The INSERT statement alone. */
  readonly insertMs: number;
  /** The COMMIT alone: where the WAL flush (fsync) is waited for. */
  readonly commitMs: number;
}

interface InsertStats {
  readonly count: number;
  readonly per_s: number;
  readonly errors: number;
  readonly tx_p50_ms: number;
  readonly tx_p95_ms: number;
  readonly tx_p99_ms: number;
  readonly tx_max_ms: number;
  readonly insert_p50_ms: number;
  readonly insert_p99_ms: number;
  readonly commit_p50_ms: number;
  readonly commit_p99_ms: number;
}

function insertStats(samples: readonly Sample[], windowMs: number, errors: number): InsertStats {
  const tx = ascending(samples.map((s) => s.txMs));
  const insert = ascending(samples.map((s) => s.insertMs));
  const commit = ascending(samples.map((s) => s.commitMs));
  return {
    count: samples.length,
    per_s: round2(samples.length / (windowMs / 1000)),
    errors,
    tx_p50_ms: round2(percentile(tx, 50)),
    tx_p95_ms: round2(percentile(tx, 95)),
    tx_p99_ms: round2(percentile(tx, 99)),
    tx_max_ms: round2(percentile(tx, 100)),
    insert_p50_ms: round2(percentile(insert, 50)),
    insert_p99_ms: round2(percentile(insert, 99)),
    commit_p50_ms: round2(percentile(commit, 50)),
    commit_p99_ms: round2(percentile(commit, 99)),
  };
}

let liveInserted = 0;

/**
 * Runs the inserters around `work`: they start, warm up for `warmupMs`, then `work` runs; they stop
 * when it returns. Only inserts started while `work` ran are measured.
 */
async function withInserters<T>(
  pools: readonly pg.Pool[],
  warmupMs: number,
  work: () => Promise<T>,
): Promise<{ result: T; stats: InsertStats; windowMs: number; txMs: number[] }> {
  const samples: Sample[] = [];
  let stop = false;
  let errors = 0;
  let firstError: unknown;
  // Worker w inserts for consumer w mod 4, through that consumer's pool.
  const loop = async (worker: number) => {
    const client = await at(pools, worker % CONSUMERS.length).connect();
    try {
      for (let n = 0; !stop; n++) {
        const start = performance.now();
        try {
          const before = performance.now();
          const jobId = `live-${randomUUID()}`;
          const inserted = await beginWithFences(client, {
            consumer: at(CONSUMERS, worker % CONSUMERS.length),
            ttlSeconds: LIVE_TTL_SECONDS,
            jobs: [
              {
                jobId,
                tenantId: `tenant-${String((worker * 7 + n) % 50).padStart(3, "0")}`,
                fingerprint: jobFingerprint("tenant", { n }),
              },
            ],
          });
          const committing = performance.now();
          await client.query("COMMIT");
          const end = performance.now();
          if (!inserted.fresh.has(jobId)) throw new Error("a fresh job id came back as a duplicate");
          liveInserted++;
          samples.push({
            start,
            txMs: end - start,
            insertMs: committing - before,
            commitMs: end - committing,
          });
        } catch (error) {
          errors++;
          firstError ??= error;
          await client.query("ROLLBACK").catch(() => {});
          if (errors > 100) throw error;
        }
      }
    } finally {
      client.release();
    }
  };
  const loops = Array.from({ length: INSERTERS }, (_, worker) => loop(worker));
  // One failing inserter stops the others, so the phase cannot hang on a broken server.
  const failed = Promise.all(loops).catch((error: unknown) => {
    stop = true;
    throw error;
  });
  let windowStart = 0;
  let windowEnd = 0;
  let result: T;
  try {
    await Promise.race([sleep(warmupMs), failed]);
    windowStart = performance.now();
    result = await work();
    windowEnd = performance.now();
  } finally {
    stop = true;
    await failed;
  }
  if (errors > 0) console.warn(`  ${errors} insert(s) failed; first: ${String(firstError)}`);
  const measured = samples.filter((s) => s.start >= windowStart && s.start < windowEnd);
  const windowMs = windowEnd - windowStart;
  return {
    result,
    stats: insertStats(measured, windowMs, errors),
    windowMs,
    txMs: measured.map((s) => s.txMs),
  };
}

// ---------------------------------------------------------------------------------------------
// Cleanup, with each batch timed

/**
 * The cleanup pool, with the time of each `core.delete_expired_fences` call recorded and, for a
 * paced variant, a pause after each full batch (inside runFenceCleanup's elapsed time, so rows/s
 * includes it). runFenceCleanup calls only `query(text, values)`, so pg's other overloads are not
 * needed.
 */
function timedQueryable(pool: pg.Pool, batchMs: number[]): Queryable {
  const query = async (text: string, values?: unknown[]) => {
    const start = performance.now();
    const result = await pool.query<{ deleted?: number }>(text, values);
    if (text.includes("delete_expired_fences")) {
      batchMs.push(performance.now() - start);
    }
    return result;
  };
  return { query } as unknown as Queryable;
}

// ---------------------------------------------------------------------------------------------
// Main

interface RoundResult {
  readonly round: number;
  readonly kind: "default" | "side";
  readonly variant: string;
  readonly batch_size: number;
  readonly pause_ms: number;
  readonly seeded: number;
  readonly seed_ms: number;
  /** core.processed_jobs before phase A: every row (seeded + live fences so far), and size with indexes. */
  readonly table_rows: number;
  readonly table_mb: number;
  readonly baseline: InsertStats & { readonly window_ms: number; readonly wal_mb: number };
  readonly cleanup: {
    readonly deleted: number;
    readonly batches: number;
    readonly stopped_by: FenceCleanupReport["stoppedBy"];
    readonly backlog_after: number;
    readonly elapsed_ms: number;
    readonly rows_per_s: number;
    readonly batch_p50_ms: number;
    readonly batch_p99_ms: number;
    readonly batch_max_ms: number;
    /** Mean time of the first and the last tenth of the full batches: does it drift? */
    readonly batch_first_tenth_mean_ms: number;
    readonly batch_last_tenth_mean_ms: number;
    readonly wal_mb: number;
    readonly checkpoints: number;
    readonly autovacuums: number;
  };
  readonly during: InsertStats & { readonly window_ms: number };
  readonly p99_ratio: number;
  readonly p50_ratio: number;
  readonly expired_left: number;
  readonly live_fences_intact: boolean;
}

const cleanups = createCleanups();

async function main(): Promise<void> {
  const started = performance.now();
  console.log(
    `jobfence TTL cleanup benchmark: ${ROWS.toLocaleString("en")} expired fences per round, ` +
      `${REPS} round(s) at batch ${variantLabel(DEFAULT_VARIANT)} (default)` +
      (VARIANTS.length > 0 ? ` + ${SIDE_REPS} per variant ${VARIANTS.map(variantLabel).join(", ")}` : "") +
      `, ${INSERTERS} concurrent inserters${QUICK ? " (--quick)" : ""}`,
  );

  // --- database -------------------------------------------------------------------------------
  const database = await benchDatabase(DURABILITY, cleanups);
  const url = database.url;
  const serverKind = database.embedded
    ? `${database.serverKind}, data directory in the OS temp directory`
    : database.serverKind;
  const durability = !database.embedded
    ? "the server's own settings (see fsync, synchronous_commit below)"
    : DURABILITY === "durable"
      ? "durable: fsync, synchronous_commit, full_page_writes on"
      : "fast: fsync, synchronous_commit, full_page_writes OFF (flattering)";
  console.log(`database: ${serverKind}; durability ${durability}`);

  const admin = new pg.Client({ connectionString: url, application_name: "jobfence-bench-admin" });
  await admin.connect();
  cleanups.push(() => admin.end());
  await admin.query("SET maintenance_work_mem = '512MB'");

  const one = async <R extends pg.QueryResultRow>(sql: string, values: unknown[] = []): Promise<R> =>
    at((await admin.query<R>(sql, values)).rows, 0);
  const setting = async (name: string) =>
    (await one<{ value: string }>("SELECT current_setting($1) AS value", [name])).value;
  const walBytes = async () =>
    Number((await one<{ b: string }>("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text AS b")).b);
  const checkpoints = async () => {
    const sql =
      Number((await setting("server_version_num")).slice(0, 2)) >= 17
        ? "SELECT (num_timed + num_requested)::int AS n FROM pg_stat_checkpointer"
        : "SELECT (checkpoints_timed + checkpoints_req)::int AS n FROM pg_stat_bgwriter";
    return (await one<{ n: number }>(sql)).n;
  };
  const autovacuums = async () => {
    await admin.query("SELECT pg_stat_clear_snapshot()");
    return (
      await one<{ n: number }>(
        "SELECT autovacuum_count::int AS n FROM pg_stat_user_tables WHERE relid = 'core.processed_jobs'::regclass",
      )
    ).n;
  };

  const settings: Record<string, string> = {};
  for (const name of [
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_level",
    "shared_buffers",
    "max_wal_size",
    "checkpoint_timeout",
    "autovacuum",
  ]) {
    settings[name] = await setting(name);
  }
  const environment = {
    node: process.version,
    postgres: await setting("server_version"),
    postgres_version: (await one<{ v: string }>("SELECT version() AS v")).v,
    server: serverKind,
    durability,
    settings,
    platform: `${process.platform} ${process.arch}`,
    cores: availableParallelism(),
    cpu: cpus()[0]?.model ?? "unknown",
    memory_gb: Math.round(totalmem() / 2 ** 30),
  };
  console.log(
    `PostgreSQL ${environment.postgres}, Node ${environment.node}, ${environment.cores} cores (${environment.cpu}), ` +
      `${environment.memory_gb} GB; ${Object.entries(settings)
        .map(([k, v]) => `${k}=${v}`)
        .join(" ")}`,
  );

  // Row-level security lets a session write only its own consumer's fences, so each consumer's
  // inserters log in as its role (the cleanup itself spans every consumer).
  const inserterPools: pg.Pool[] = [];
  for (const consumer of CONSUMERS) {
    const role = await ensureConsumerRole(admin, consumer);
    const pool = createPool({
      connectionString: url,
      role,
      max: Math.ceil(INSERTERS / CONSUMERS.length),
      applicationName: "jobfence-bench-insert",
    });
    inserterPools.push(pool);
    cleanups.push(() => pool.end());
  }
  const cleanupPool = createPool({
    connectionString: url,
    role: "jobfence_cleanup",
    max: 1,
    applicationName: "jobfence-bench-cleanup",
  });
  cleanups.push(() => cleanupPool.end());

  // --- rounds ---------------------------------------------------------------------------------
  const schedule: Array<{ kind: "default" | "side"; variant: Variant }> = [];
  const sides = Array.from({ length: SIDE_REPS }, () => VARIANTS).flat();
  for (let rep = 0; rep < Math.max(REPS, sides.length); rep++) {
    if (rep < REPS) schedule.push({ kind: "default", variant: DEFAULT_VARIANT });
    const side = sides[rep];
    if (side !== undefined) schedule.push({ kind: "side", variant: side });
  }
  // Interleaving keeps the slow drift of a growing table (the live fences pile up) from favouring
  // one variant; left-over side rounds (more sides than reps) run at the end.
  const results: RoundResult[] = [];
  /** Every measured insert latency of each variant, A and B, for the pooled percentiles. */
  const pooled = new Map<string, { a: number[]; b: number[] }>();
  for (const [index, { kind, variant }] of schedule.entries()) {
    const round = index + 1;
    const { batchSize } = variant;
    console.log(
      `\nround ${round}/${schedule.length}: batch ${variantLabel(variant)}${kind === "default" ? " (default)" : ""}`,
    );

    // Seed: vacuum the previous round's deletes first, so the seed reuses their space.
    const seedStart = performance.now();
    await admin.query("VACUUM core.processed_jobs");
    const step = 86_400 / ROWS;
    let seeded = 0;
    for (let lo = 0; lo < ROWS; lo += SEED_CHUNK) {
      const hi = Math.min(ROWS, lo + SEED_CHUNK) - 1;
      const insert = await admin.query(SEED_CHUNK_SQL, [`r${round}`, CONSUMERS, lo, hi, ROWS, step]);
      seeded += insert.rowCount ?? 0;
    }
    await admin.query("VACUUM (ANALYZE) core.processed_jobs");
    await admin.query("CHECKPOINT");
    const seedMs = performance.now() - seedStart;
    const size = await one<{ total_mb: string; rows: string }>(
      `SELECT round(pg_total_relation_size('core.processed_jobs') / 1048576.0)::text AS total_mb,
              (SELECT count(*) FROM core.processed_jobs)::text AS rows`,
    );
    console.log(
      `  seeded ${seeded.toLocaleString("en")} expired fences in ${secs(seedMs)} (with VACUUM, CHECKPOINT); ` +
        `table ${Number(size.rows).toLocaleString("en")} rows, ${size.total_mb} MB with indexes`,
    );

    // Phase A: inserts alone.
    const walA = await walBytes();
    const baseline = await withInserters(inserterPools, SETTLE_MS, () => sleep(BASELINE_MS));
    const walAMb = Number(mb((await walBytes()) - walA));
    console.log(
      `  A baseline  ${secs(baseline.windowMs)}: ${int(baseline.stats.count)} inserts ` +
        `(${int(baseline.stats.per_s)}/s), p50 ${ms(baseline.stats.tx_p50_ms)} ms, p99 ${ms(baseline.stats.tx_p99_ms)} ms ` +
        `(INSERT p99 ${ms(baseline.stats.insert_p99_ms)}, COMMIT p99 ${ms(baseline.stats.commit_p99_ms)})`,
    );

    // Phase B: the same inserts while cleanup runs.
    const liveBefore = liveInserted;
    const batchMs: number[] = [];
    const walB = await walBytes();
    const checkpointsB = await checkpoints();
    const autovacuumsB = await autovacuums();
    const during = await withInserters(inserterPools, WARMUP_MS, async () => {
      const db = timedQueryable(cleanupPool, batchMs);
      return runFenceCleanup({ db, budgetMs: CLEANUP_BUDGET_MS, batchSize, pauseMs: variant.pauseMs });
    });
    const walBMb = Number(mb((await walBytes()) - walB));
    const checkpointsDuring = (await checkpoints()) - checkpointsB;
    const autovacuumsDuring = (await autovacuums()) - autovacuumsB;
    const report = during.result;
    const rowsPerS = report.deleted / (report.elapsedMs / 1000);
    // The full batches: the last one, which came back short (often empty), says nothing of drift.
    const full = report.stoppedBy === "empty" && batchMs.length > 1 ? batchMs.slice(0, -1) : batchMs;
    const sortedBatches = ascending(full);
    const tenth = Math.max(1, Math.floor(full.length / 10));
    const label = variantLabel(variant);
    const pool = pooled.get(label) ?? { a: [], b: [] };
    // concat, not push(...): a spread of 100,000 samples overflows the stack.
    pooled.set(label, { a: pool.a.concat(baseline.txMs), b: pool.b.concat(during.txMs) });

    // Checks: nothing expired left; every live fence ever inserted still there.
    const left = await one<{ expired: number; live: number }>(
      `SELECT count(*) FILTER (WHERE expires_at < now())::int AS expired,
              count(*) FILTER (WHERE job_id LIKE 'live-%')::int AS live
         FROM core.processed_jobs`,
    );
    const intact = left.live === liveInserted;
    console.log(
      `  B cleanup   ${secs(report.elapsedMs)}: deleted ${int(report.deleted)} in ${report.batches} batches ` +
        `(${int(rowsPerS)} rows/s, stopped: ${report.stoppedBy}, backlog ${report.backlog}); full batch p50 ` +
        `${ms(percentile(sortedBatches, 50))} ms, max ${ms(percentile(sortedBatches, 100))} ms; WAL ${walBMb} MB`,
    );
    console.log(
      `  B inserts   ${secs(during.windowMs)}: ${int(during.stats.count)} inserts ` +
        `(${int(during.stats.per_s)}/s), p50 ${ms(during.stats.tx_p50_ms)} ms, p99 ${ms(during.stats.tx_p99_ms)} ms ` +
        `(INSERT p99 ${ms(during.stats.insert_p99_ms)}, COMMIT p99 ${ms(during.stats.commit_p99_ms)}) ` +
        `→ p99 ${ratio(during.stats.tx_p99_ms / baseline.stats.tx_p99_ms)} baseline`,
    );
    if (left.expired > 0 || !intact) {
      console.warn(
        `  CHECK FAILED: ${left.expired} expired fences left; live fences ${left.live} of ${liveInserted} ` +
          `(${liveInserted - liveBefore} inserted this round)`,
      );
    }

    results.push({
      round,
      kind,
      variant: label,
      batch_size: batchSize,
      pause_ms: variant.pauseMs,
      seeded,
      seed_ms: Math.round(seedMs),
      table_rows: Number(size.rows),
      table_mb: Number(size.total_mb),
      baseline: { ...baseline.stats, window_ms: Math.round(baseline.windowMs), wal_mb: walAMb },
      cleanup: {
        deleted: report.deleted,
        batches: report.batches,
        stopped_by: report.stoppedBy,
        backlog_after: report.backlog,
        elapsed_ms: Math.round(report.elapsedMs),
        rows_per_s: Math.round(rowsPerS),
        batch_p50_ms: round2(percentile(sortedBatches, 50)),
        batch_p99_ms: round2(percentile(sortedBatches, 99)),
        batch_max_ms: round2(percentile(sortedBatches, 100)),
        batch_first_tenth_mean_ms: round2(mean(full.slice(0, tenth))),
        batch_last_tenth_mean_ms: round2(mean(full.slice(-tenth))),
        wal_mb: walBMb,
        checkpoints: checkpointsDuring,
        autovacuums: autovacuumsDuring,
      },
      during: { ...during.stats, window_ms: Math.round(during.windowMs) },
      p99_ratio: round2(during.stats.tx_p99_ms / baseline.stats.tx_p99_ms),
      p50_ratio: round2(during.stats.tx_p50_ms / baseline.stats.tx_p50_ms),
      expired_left: left.expired,
      live_fences_intact: intact,
    });
  }

  // --- report ---------------------------------------------------------------------------------
  console.log(
    "\nPer round (insert latency = BEGIN … COMMIT of one fence; A = no cleanup, B = during cleanup)",
  );
  console.log(
    table(
      [
        "round",
        "batch",
        "deleted",
        "seconds",
        "rows/s",
        "batches",
        "batch p50/max ms",
        "first→last 10% ms",
        "A p50/p99 ms",
        "B p50/p99 ms",
        "p99 B/A",
        "inserts/s A→B",
        "WAL MB",
        "ckpt",
      ],
      results.map((r) => [
        `${r.round}${r.kind === "default" ? "*" : ""}`,
        r.variant,
        int(r.cleanup.deleted),
        (r.cleanup.elapsed_ms / 1000).toFixed(1),
        int(r.cleanup.rows_per_s),
        String(r.cleanup.batches),
        `${ms(r.cleanup.batch_p50_ms)}/${ms(r.cleanup.batch_max_ms)}`,
        `${ms(r.cleanup.batch_first_tenth_mean_ms)}→${ms(r.cleanup.batch_last_tenth_mean_ms)}`,
        `${ms(r.baseline.tx_p50_ms)}/${ms(r.baseline.tx_p99_ms)}`,
        `${ms(r.during.tx_p50_ms)}/${ms(r.during.tx_p99_ms)}`,
        ratio(r.p99_ratio),
        `${int(r.baseline.per_s)}→${int(r.during.per_s)}`,
        `${r.cleanup.wal_mb}`,
        String(r.cleanup.checkpoints),
      ]),
    ),
  );
  console.log("* the default: CLEANUP_DEFAULTS.batchSize and pauseMs (as shipped)");

  const summary = [DEFAULT_VARIANT, ...VARIANTS]
    .map((variant) => {
      const label = variantLabel(variant);
      const rounds = results.filter((r) => r.variant === label);
      const samples = pooled.get(label);
      if (rounds.length === 0 || !samples) return undefined;
      const rate = spread(rounds.map((r) => r.cleanup.rows_per_s));
      const p99Ratio = spread(rounds.map((r) => r.p99_ratio));
      const pooledA = percentile(ascending(samples.a), 99);
      const pooledB = percentile(ascending(samples.b), 99);
      return {
        variant: label,
        batch_size: variant.batchSize,
        pause_ms: variant.pauseMs,
        default: label === variantLabel(DEFAULT_VARIANT),
        rounds: rounds.length,
        rows_deleted: spread(rounds.map((r) => r.cleanup.deleted)),
        seconds: spread(rounds.map((r) => r.cleanup.elapsed_ms / 1000)),
        rows_per_s: rate,
        batch_max_ms: spread(rounds.map((r) => r.cleanup.batch_max_ms)),
        baseline_p50_ms: spread(rounds.map((r) => r.baseline.tx_p50_ms)),
        baseline_p99_ms: spread(rounds.map((r) => r.baseline.tx_p99_ms)),
        during_p50_ms: spread(rounds.map((r) => r.during.tx_p50_ms)),
        during_p99_ms: spread(rounds.map((r) => r.during.tx_p99_ms)),
        p99_ratio: p99Ratio,
        /** p99 over every round's samples together, A and B. */
        pooled_baseline_p99_ms: round2(pooledA),
        pooled_during_p99_ms: round2(pooledB),
        pooled_p99_ratio: round2(pooledB / pooledA),
        baseline_inserts_per_s: spread(rounds.map((r) => r.baseline.per_s)),
        during_inserts_per_s: spread(rounds.map((r) => r.during.per_s)),
        meets_rate: rate.median >= TARGET_ROWS_PER_S,
        meets_ratio: p99Ratio.median <= TARGET_P99_RATIO,
      };
    })
    .filter((s) => s !== undefined);

  console.log("\nSummary: median (min–max) over rounds");
  console.log(
    table(
      [
        "batch",
        "rounds",
        "rows deleted",
        "seconds",
        "rows/s",
        `≥ ${int(TARGET_ROWS_PER_S)}/s`,
        "insert p50 A → B ms",
        "insert p99 A → B ms",
        "p99 B/A",
        `≤ ${TARGET_P99_RATIO}×`,
        "pooled p99 B/A",
        "inserts/s A → B",
      ],
      summary.map((s) => [
        `${s.variant}${s.default ? " (default)" : ""}`,
        String(s.rounds),
        int(s.rows_deleted.median),
        showSpread(s.seconds, (v) => v.toFixed(1)),
        showSpread(s.rows_per_s, int),
        s.meets_rate ? "yes" : "NO",
        `${ms(s.baseline_p50_ms.median)} → ${ms(s.during_p50_ms.median)}`,
        `${showSpread(s.baseline_p99_ms, ms)} → ${showSpread(s.during_p99_ms, ms)}`,
        showSpread(s.p99_ratio, ratio),
        s.meets_ratio ? "yes" : "NO",
        `${ratio(s.pooled_p99_ratio)} (${ms(s.pooled_baseline_p99_ms)}→${ms(s.pooled_during_p99_ms)})`,
        `${int(s.baseline_inserts_per_s.median)} → ${int(s.during_inserts_per_s.median)}`,
      ]),
    ),
  );

  const chosen = summary.find((s) => s.default);
  const checksFailed = results.filter((r) => r.expired_left > 0 || !r.live_fences_intact);
  const verdict = chosen
    ? `${chosen.meets_rate && chosen.meets_ratio ? "PASS" : "FAIL"}: batch ${variantLabel(DEFAULT_VARIANT)} (default), ` +
      `${chosen.rounds} round(s) of ${int(ROWS)} rows, ${durability.split(":")[0]}: ` +
      `cleanup ${int(chosen.rows_per_s.median)} rows/s (target ≥ ${int(TARGET_ROWS_PER_S)}: ${chosen.meets_rate ? "met" : "MISSED"}); ` +
      `insert p99 ${ratio(chosen.p99_ratio.median)} baseline (target ≤ ${TARGET_P99_RATIO}×: ${chosen.meets_ratio ? "met" : "MISSED"})` +
      (checksFailed.length > 0
        ? `; CHECKS FAILED in round(s) ${checksFailed.map((r) => r.round).join(", ")}`
        : "")
    : "no round at the default batch size";
  console.log(`\nVERDICT: ${verdict}`);

  const output = await writeResult("cleanup", {
    benchmark: "fence TTL cleanup under concurrent inserts",
    options: {
      rows: ROWS,
      quick: QUICK,
      reps: REPS,
      inserters: INSERTERS,
      baseline_ms: BASELINE_MS,
      settle_ms: SETTLE_MS,
      warmup_ms: WARMUP_MS,
      default_batch_size: DEFAULT_BATCH,
      variants: VARIANTS.map(variantLabel),
      side_reps: SIDE_REPS,
      cleanup_budget_ms: CLEANUP_BUDGET_MS,
    },
    method:
      "per round: seed N expired fences (INSERT … SELECT generate_series, expires_at rising with insertion order), " +
      "VACUUM (ANALYZE), CHECKPOINT; phase A: closed-loop inserters (each in its consumer's role, BEGIN + fence insert in one round trip; COMMIT) " +
      "measured for baseline_ms after settle_ms; phase B: the same inserters while runFenceCleanup (role jobfence_cleanup) deletes every expired " +
      "fence (a variant's pause follows each full batch, inside the elapsed time); latency = BEGIN … COMMIT timed with " +
      "performance.now(), warm-up excluded; rows/s = deleted / runFenceCleanup elapsedMs",
    environment,
    targets: { rows_per_s: TARGET_ROWS_PER_S, p99_ratio: TARGET_P99_RATIO },
    rounds: results,
    summary,
    verdict,
    total_runtime_ms: Math.round(performance.now() - started),
  });
  console.log(`wrote ${output} (total ${secs(performance.now() - started)})`);
}

await runBenchmark(main, cleanups);
