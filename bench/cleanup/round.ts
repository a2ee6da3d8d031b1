/**
 * One round of bench/cleanup.ts: seed the expired fences; phase A, the inserters alone for a fixed
 * time (after a settle: the seed's CHECKPOINT makes each first write to a page log the whole page);
 * phase B, the same inserters while runFenceCleanup (pool logged in as jobfence_cleanup, whose only
 * right is core.delete_expired_fences) deletes every expired fence with a 10-minute budget, until it
 * stops on a short batch; B's samples are the inserts started while it ran. Then the checks: no
 * expired fence left, every live fence inserted still there.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type pg from "pg";
import { type FenceCleanupReport, runFenceCleanup } from "../../shared/fence/cleanup.ts";
import { ascending, int, mb, mean, ms, ratio, round2, secs } from "../lib/report.ts";
import { percentile } from "../lib/support.ts";
import type { Inserters, InsertStats } from "./inserters.ts";
import { fencesLeft, seedExpiredFences } from "./seed.ts";
import { type ServerCounters, timedQueryable } from "./server.ts";
import { type ScheduledRound, variantLabel } from "./variants.ts";

/** A generous budget: the run is meant to stop on a short batch, not on time. */
const CLEANUP_BUDGET_MS = 10 * 60_000;

export interface RoundResult {
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

export interface RoundSetting {
  readonly admin: pg.Client;
  readonly counters: ServerCounters;
  readonly inserters: Inserters;
  readonly cleanupPool: pg.Pool;
  readonly rows: number;
  readonly baselineMs: number;
  readonly settleMs: number;
  readonly warmupMs: number;
}

/** Runs round `round`; returns its figures and every measured insert latency of A and B. */
export async function runRound(
  s: RoundSetting,
  round: number,
  { kind, variant }: ScheduledRound,
): Promise<{ result: RoundResult; txA: number[]; txB: number[] }> {
  const seed = await seedExpiredFences(s.admin, round, s.rows);
  console.log(
    `  seeded ${int(seed.seeded)} expired fences in ${secs(seed.seedMs)} (with VACUUM, CHECKPOINT); ` +
      `table ${int(seed.tableRows)} rows, ${seed.tableMb} MB with indexes`,
  );

  // Phase A: inserts alone.
  const walA = await s.counters.walBytes();
  const baseline = await s.inserters.around(s.settleMs, () => sleep(s.baselineMs));
  const walAMb = Number(mb((await s.counters.walBytes()) - walA));
  const a = baseline.stats;
  console.log(
    `  A baseline  ${secs(baseline.windowMs)}: ${int(a.count)} inserts (${int(a.per_s)}/s), p50 ${ms(a.tx_p50_ms)} ms, ` +
      `p99 ${ms(a.tx_p99_ms)} ms (INSERT p99 ${ms(a.insert_p99_ms)}, COMMIT p99 ${ms(a.commit_p99_ms)})`,
  );

  // Phase B: the same inserts while cleanup runs.
  const liveBefore = s.inserters.inserted();
  const batchMs: number[] = [];
  const walB = await s.counters.walBytes();
  const checkpointsB = await s.counters.checkpoints();
  const autovacuumsB = await s.counters.autovacuums();
  const during = await s.inserters.around(s.warmupMs, () =>
    runFenceCleanup({
      db: timedQueryable(s.cleanupPool, batchMs),
      budgetMs: CLEANUP_BUDGET_MS,
      batchSize: variant.batchSize,
      pauseMs: variant.pauseMs,
    }),
  );
  const walBMb = Number(mb((await s.counters.walBytes()) - walB));
  const checkpointsDuring = (await s.counters.checkpoints()) - checkpointsB;
  const autovacuumsDuring = (await s.counters.autovacuums()) - autovacuumsB;
  const report = during.result;
  const rowsPerS = report.deleted / (report.elapsedMs / 1000);
  // The full batches: the last one, which came back short (often empty), says nothing of drift.
  const full = report.stoppedBy === "empty" && batchMs.length > 1 ? batchMs.slice(0, -1) : batchMs;
  const sortedBatches = ascending(full);
  const tenth = Math.max(1, Math.floor(full.length / 10));

  const left = await fencesLeft(s.admin);
  const live = s.inserters.inserted();
  const intact = left.live === live;
  const b = during.stats;
  console.log(
    `  B cleanup   ${secs(report.elapsedMs)}: deleted ${int(report.deleted)} in ${report.batches} batches ` +
      `(${int(rowsPerS)} rows/s, stopped: ${report.stoppedBy}, backlog ${report.backlog}); full batch p50 ` +
      `${ms(percentile(sortedBatches, 50))} ms, max ${ms(percentile(sortedBatches, 100))} ms; WAL ${walBMb} MB`,
  );
  console.log(
    `  B inserts   ${secs(during.windowMs)}: ${int(b.count)} inserts (${int(b.per_s)}/s), p50 ${ms(b.tx_p50_ms)} ms, ` +
      `p99 ${ms(b.tx_p99_ms)} ms (INSERT p99 ${ms(b.insert_p99_ms)}, COMMIT p99 ${ms(b.commit_p99_ms)}) ` +
      `→ p99 ${ratio(b.tx_p99_ms / a.tx_p99_ms)} baseline`,
  );
  if (left.expired > 0 || !intact) {
    console.warn(
      `  CHECK FAILED: ${left.expired} expired fences left; live fences ${left.live} of ${live} ` +
        `(${live - liveBefore} inserted this round)`,
    );
  }
  const result: RoundResult = {
    round,
    kind,
    variant: variantLabel(variant),
    batch_size: variant.batchSize,
    pause_ms: variant.pauseMs,
    seeded: seed.seeded,
    seed_ms: Math.round(seed.seedMs),
    table_rows: seed.tableRows,
    table_mb: seed.tableMb,
    baseline: { ...a, window_ms: Math.round(baseline.windowMs), wal_mb: walAMb },
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
    during: { ...b, window_ms: Math.round(during.windowMs) },
    p99_ratio: round2(b.tx_p99_ms / a.tx_p99_ms),
    p50_ratio: round2(b.tx_p50_ms / a.tx_p50_ms),
    expired_left: left.expired,
    live_fences_intact: intact,
  };
  return { result, txA: baseline.txMs, txB: during.txMs };
}
