/**
 * `npm run bench:cleanup`: TTL cleanup of a million expired fences while fence inserts run
 * (docs/design.md §7.2). The issue's targets: cleanup ≥ 50,000 rows/s on this machine, and the
 * concurrent inserts' p99 latency during cleanup ≤ 1.5× their p99 with no cleanup running, both
 * judged on the shipped default's rounds.
 *
 * - Database: DATABASE_URL when set (a fresh database is created beside it and dropped at the end;
 *   its user needs CREATEDB and CREATEROLE, as for `npm run migrate`), otherwise an embedded
 *   PostgreSQL, `durable` by default (fsync and synchronous_commit on, as a real server runs);
 *   `--durability fast` turns fsync, synchronous_commit and full_page_writes off, which flatters
 *   both the deletes and the inserts' commits. The durability used is recorded.
 * - Seed (bench/cleanup/seed.ts): set-based SQL in chunks (INSERT … SELECT FROM generate_series),
 *   N fences all expired, expires_at rising with insertion order over the last 24 h (fences are
 *   appended as jobs run and one TTL applies, so expiry order follows the heap), random job ids
 *   (md5) as real ids are; then VACUUM (ANALYZE) and a CHECKPOINT, so every round starts from the
 *   same state. The seed is re-made before each round, the previous round's deletes vacuumed first.
 * - A round (bench/cleanup/round.ts): phase A (baseline), then phase B on the same table. Both run
 *   the same closed-loop inserters (bench/cleanup/inserters.ts; each its own connection in the role
 *   of the consumer it inserts for) that insert fresh live fences one transaction at a time as the
 *   consumer harness does: beginWithFences (BEGIN; INSERT … ON CONFLICT DO NOTHING, one round
 *   trip); COMMIT. Latency is the whole transaction, timed with performance.now(); inserts started
 *   in the warm-up are left out. A runs for a fixed time after a settle. B runs runFenceCleanup
 *   (pool logged in as jobfence_cleanup, the role's only right being core.delete_expired_fences)
 *   with a 10-minute budget until it stops on a short batch; B's samples are the inserts started
 *   while it ran. After B the benchmark checks that no expired fence is left and that every live
 *   fence inserted survived.
 * - Rounds (bench/cleanup/variants.ts): the rounds at the shipped default (CLEANUP_DEFAULTS
 *   batchSize and pauseMs), each with its own A, interleaved with side rounds of other variants so
 *   the default's choice can be judged; `5000/25` is batches of 5,000 with a 25 ms pause after each
 *   full one (inside the elapsed time, so rows/s includes it). Medians with min–max over rounds;
 *   "pooled p99" is the p99 over all rounds' samples of a variant together.
 */
import pg from "pg";
import { z } from "zod";
import { createPool } from "../shared/db/pool.ts";
import { ensureConsumerRole } from "../shared/db/queries/provision-login.ts";
import { createInserters } from "./cleanup/inserters.ts";
import { type RoundResult, runRound } from "./cleanup/round.ts";
import { CONSUMERS } from "./cleanup/seed.ts";
import { serverCounters } from "./cleanup/server.ts";
import {
  type Pooled,
  ROUND_HEADERS,
  roundRows,
  summarize,
  summaryHeaders,
  summaryRows,
} from "./cleanup/summary.ts";
import {
  DEFAULT_VARIANT,
  MAX_BATCH,
  schedule,
  sideVariants,
  VARIANT_PATTERN,
  variantLabel,
} from "./cleanup/variants.ts";
import { defineBenchmark, type Target } from "./lib/define.ts";
import { int, median, ms, ratio, secs } from "./lib/report.ts";

const count = () => z.coerce.number().int().positive();
const options = z.object({
  rows: count().default(1_000_000).describe("expired fences seeded per round"),
  reps: count().default(5).describe("rounds at the shipped default (CLEANUP_DEFAULTS batchSize and pauseMs)"),
  inserters: count().default(4).describe("concurrent closed-loop inserters, each its own connection"),
  baselineSeconds: count().default(15).describe("seconds phase A (inserts alone) is measured"),
  settleMs: count()
    .default(5000)
    .describe("ms phase A's inserters run before they are measured (the seed's CHECKPOINT burst)"),
  warmupMs: count().default(1000).describe("ms phase B's inserters run before the cleanup starts"),
  variants: z
    .array(
      z
        .string()
        .regex(VARIANT_PATTERN, "each a batch size, optionally /pause in ms (5000/50), or none")
        // Only a well-formed item is checked for its size: the pattern has said what is wrong with the others.
        .refine((v) => v === "none" || !VARIANT_PATTERN.test(v) || Number(v.split("/")[0]) <= MAX_BATCH, {
          message: `core.delete_expired_fences accepts batches of 1–${MAX_BATCH}`,
        }),
    )
    .default(["20000/0", "5000/50"])
    .describe(
      "side rounds: batch size[/pause ms after each full batch], comma-separated; none for no side rounds",
    ),
  sideReps: count().default(1).describe("rounds of each side variant"),
});

const TARGET_ROWS_PER_S = 50_000;
const TARGET_P99_RATIO = 1.5;
const TARGETS = { rowsPerS: TARGET_ROWS_PER_S, p99Ratio: TARGET_P99_RATIO };

await defineBenchmark({
  name: "cleanup",
  title: "TTL cleanup of expired fences under concurrent fence inserts",
  method:
    "per round: seed N expired fences (INSERT … SELECT generate_series, expires_at rising with insertion order), VACUUM (ANALYZE), CHECKPOINT; phase A: closed-loop inserters (each in its consumer's role, BEGIN + fence insert in one round trip; COMMIT) measured for baseline-seconds after settle-ms; phase B: the same inserters while runFenceCleanup (role jobfence_cleanup) deletes every expired fence (a variant's pause follows each full batch, inside the elapsed time); latency = BEGIN … COMMIT timed with performance.now(), warm-up excluded; rows/s = deleted / runFenceCleanup elapsedMs; default rounds interleaved with side rounds",
  options,
  // --quick judges the default alone: the side rounds would double its time. Its B phases last a
  // fraction of a second, so its ratios are noisy.
  quick: { rows: 100_000, reps: 2, baselineSeconds: 2, settleMs: 1000, warmupMs: 500, variants: ["none"] },
  database: "durable",
  settings: [
    "full_page_writes",
    "wal_level",
    "shared_buffers",
    "max_wal_size",
    "checkpoint_timeout",
    "autovacuum",
  ],
  async setup({ options: o, database, cleanups }) {
    const admin = new pg.Client({ connectionString: database.url, application_name: "jobfence-bench-admin" });
    await admin.connect();
    cleanups.push(() => admin.end());
    await admin.query("SET maintenance_work_mem = '512MB'");
    const durability = await admin.query<{ name: string; setting: string }>(
      "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes') ORDER BY name",
    );
    console.log(`durability: ${durability.rows.map((r) => `${r.name}=${r.setting}`).join(" ")}`);
    // Row-level security lets a session write only its own consumer's fences, so each consumer's
    // inserters log in as its role (the cleanup itself spans every consumer).
    const inserterPools: pg.Pool[] = [];
    for (const consumer of CONSUMERS) {
      const role = await ensureConsumerRole(admin, consumer);
      const pool = createPool({
        connectionString: database.url,
        role,
        max: Math.ceil(o.inserters / CONSUMERS.length),
        applicationName: "jobfence-bench-insert",
      });
      inserterPools.push(pool);
      cleanups.push(() => pool.end());
    }
    const cleanupPool = createPool({
      connectionString: database.url,
      role: "jobfence_cleanup",
      max: 1,
      applicationName: "jobfence-bench-cleanup",
    });
    cleanups.push(() => cleanupPool.end());
    const sides = sideVariants(o.variants);
    console.log(
      `${int(o.rows)} expired fences per round, ${o.reps} round(s) at batch ${variantLabel(DEFAULT_VARIANT)} (default)` +
        (sides.length > 0 ? ` + ${o.sideReps} per variant ${sides.map(variantLabel).join(", ")}` : "") +
        `, ${o.inserters} concurrent inserters`,
    );
    return {
      admin,
      counters: await serverCounters(admin),
      inserters: createInserters(inserterPools, o.inserters),
      cleanupPool,
      sides,
    };
  },
  async run({ options: o, table }, { sides, ...setting }) {
    const rounds = schedule(o.reps, sides, o.sideReps);
    const results: RoundResult[] = [];
    const pooled: Pooled = new Map();
    for (const [index, scheduled] of rounds.entries()) {
      const round = index + 1;
      const label = variantLabel(scheduled.variant);
      console.log(
        `\nround ${round}/${rounds.length}: batch ${label}${scheduled.kind === "default" ? " (default)" : ""}`,
      );
      const { result, txA, txB } = await runRound(
        {
          ...setting,
          rows: o.rows,
          baselineMs: 1000 * o.baselineSeconds,
          settleMs: o.settleMs,
          warmupMs: o.warmupMs,
        },
        round,
        scheduled,
      );
      results.push(result);
      const samples = pooled.get(label) ?? { a: [], b: [] };
      // concat, not push(...): a spread of 100,000 samples overflows the stack.
      pooled.set(label, { a: samples.a.concat(txA), b: samples.b.concat(txB) });
    }
    table(
      "per round (insert latency = BEGIN … COMMIT of one fence; A = no cleanup, B = during cleanup; * the shipped default)",
      ROUND_HEADERS,
      roundRows(results),
    );
    const summary = summarize([DEFAULT_VARIANT, ...sides], results, pooled, TARGETS);
    table("summary: median (min–max) over rounds", summaryHeaders(TARGETS), summaryRows(summary));
    return { rounds: results, summary };
  },
  verdict({ rounds, summary }) {
    const chosen = summary.find((s) => s.default);
    const defaults = rounds.filter((r) => r.kind === "default");
    // runFenceCleanup pauses after each full batch: the pauses' share of its elapsed time.
    const pausedMs = median(
      defaults.map((r) => (r.cleanup.batches - (r.cleanup.stopped_by === "empty" ? 1 : 0)) * r.pause_ms),
    );
    const checksFailed = rounds.filter((r) => r.expired_left > 0 || !r.live_fences_intact);
    const of = `shipped default ${variantLabel(DEFAULT_VARIANT)}, median of ${chosen?.rounds ?? 0} rounds`;
    const targets: Target[] = [
      {
        name: `cleanup rows/s (${of})`,
        measured: chosen?.rows_per_s.median ?? Number.NaN,
        bound: "at least",
        target: TARGET_ROWS_PER_S,
        format: int,
        ...(pausedMs > 0
          ? {
              cause:
                `paced: its pauses (${DEFAULT_VARIANT.pauseMs} ms after each full batch) are ${secs(pausedMs)} of ` +
                `${secs(1000 * (chosen?.seconds.median ?? Number.NaN))}; they trade rate for the inserts' p99 (CLEANUP_DEFAULTS)`,
            }
          : {}),
      },
      {
        name: `insert p99 during cleanup / without (${of})`,
        measured: chosen?.p99_ratio.median ?? Number.NaN,
        bound: "at most",
        target: TARGET_P99_RATIO,
        format: ratio,
        cause:
          `the shared WAL flush: a COMMIT that lands while a batch's deletes are flushed waits for them ` +
          `(COMMIT p99 ${ms(chosen?.baseline_commit_p99_ms.median ?? Number.NaN)} → ${ms(chosen?.during_commit_p99_ms.median ?? Number.NaN)} ms); ` +
          `docs/performance.md, TTL cleanup: 2.28× paced at 1,000,000 rows`,
      },
      {
        name: "rounds with an expired fence left or a live fence lost",
        measured: checksFailed.length,
        bound: "at most",
        target: 0,
        format: String,
        cause: `round(s) ${checksFailed.map((r) => r.round).join(", ")}`,
      },
    ];
    return { targets };
  },
});
