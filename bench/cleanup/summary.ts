/**
 * The figures of bench/cleanup.ts over its rounds: a row per round, and per variant the median
 * (min–max) over its rounds of the rate, the inserts' latency in A and B and their ratio, and the
 * pooled p99 (every round's samples of a variant together).
 */
import { ascending, int, ms, ratio, round2, showSpread, spread } from "../lib/report.ts";
import { percentile } from "../lib/support.ts";
import type { RoundResult } from "./round.ts";
import { DEFAULT_VARIANT, type Variant, variantLabel } from "./variants.ts";

export const ROUND_HEADERS = [
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
];

/** A round's row; `*` marks the shipped default. */
export function roundRows(results: readonly RoundResult[]): string[][] {
  return results.map((r) => [
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
  ]);
}

/** Every measured insert latency of a variant's rounds, A and B. */
export type Pooled = Map<string, { a: number[]; b: number[] }>;

/** The summary of each variant (the default first) that ran at least one round. */
export function summarize(
  variants: readonly Variant[],
  results: readonly RoundResult[],
  pooled: Pooled,
  targets: { rowsPerS: number; p99Ratio: number },
) {
  return variants.flatMap((variant) => {
    const label = variantLabel(variant);
    const rounds = results.filter((r) => r.variant === label);
    const samples = pooled.get(label);
    if (rounds.length === 0 || !samples) return [];
    const over = (pick: (r: RoundResult) => number) => spread(rounds.map(pick));
    const rate = over((r) => r.cleanup.rows_per_s);
    const p99Ratio = over((r) => r.p99_ratio);
    const pooledA = percentile(ascending(samples.a), 99);
    const pooledB = percentile(ascending(samples.b), 99);
    return [
      {
        variant: label,
        batch_size: variant.batchSize,
        pause_ms: variant.pauseMs,
        default: label === variantLabel(DEFAULT_VARIANT),
        rounds: rounds.length,
        rows_deleted: over((r) => r.cleanup.deleted),
        seconds: over((r) => r.cleanup.elapsed_ms / 1000),
        rows_per_s: rate,
        batch_max_ms: over((r) => r.cleanup.batch_max_ms),
        baseline_p50_ms: over((r) => r.baseline.tx_p50_ms),
        baseline_p99_ms: over((r) => r.baseline.tx_p99_ms),
        during_p50_ms: over((r) => r.during.tx_p50_ms),
        during_p99_ms: over((r) => r.during.tx_p99_ms),
        /** The COMMIT alone, where a commit waits for the WAL flush the deletes share. */
        baseline_commit_p99_ms: over((r) => r.baseline.commit_p99_ms),
        during_commit_p99_ms: over((r) => r.during.commit_p99_ms),
        p99_ratio: p99Ratio,
        /** p99 over every round's samples together, A and B. */
        pooled_baseline_p99_ms: round2(pooledA),
        pooled_during_p99_ms: round2(pooledB),
        pooled_p99_ratio: round2(pooledB / pooledA),
        baseline_inserts_per_s: over((r) => r.baseline.per_s),
        during_inserts_per_s: over((r) => r.during.per_s),
        meets_rate: rate.median >= targets.rowsPerS,
        meets_ratio: p99Ratio.median <= targets.p99Ratio,
      },
    ];
  });
}

export type VariantSummary = ReturnType<typeof summarize>[number];

export function summaryHeaders(targets: { rowsPerS: number; p99Ratio: number }): string[] {
  return [
    "batch",
    "rounds",
    "rows deleted",
    "seconds",
    "rows/s",
    `≥ ${int(targets.rowsPerS)}/s`,
    "insert p50 A → B ms",
    "insert p99 A → B ms",
    "p99 B/A",
    `≤ ${targets.p99Ratio}×`,
    "pooled p99 B/A",
    "inserts/s A → B",
  ];
}

export function summaryRows(summary: readonly VariantSummary[]): string[][] {
  return summary.map((s) => [
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
  ]);
}
