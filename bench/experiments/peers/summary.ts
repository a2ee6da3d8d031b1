/**
 * The peers experiment's figures from its runs: per system, medians with their range over the
 * measured rounds; jobfence's rates over pg-boss's and over the faster peer's, as a ratio of
 * medians and, round by round, as the range of per-round ratios.
 */
import { round2, type Spread, spread } from "../../lib/report.ts";
import type { RunResult } from "./run-once.ts";
import type { System } from "./systems.ts";

export interface SystemSummary {
  readonly system: System["key"];
  readonly label: string;
  readonly peer: boolean;
  readonly settings: string;
  readonly runs: number;
  readonly effects_per_s: Spread;
  readonly ms: Spread;
  readonly xact_per_effect: Spread;
  readonly wal_bytes_per_effect: Spread;
  readonly rows_written_per_effect: Spread;
  readonly startup_ms: Spread;
  readonly failures: number;
  readonly all_verified: boolean;
}

/** jobfence's effects/s over a peer's: of the medians, and per round. */
export interface Ratio {
  readonly of_medians: number;
  readonly per_round: Spread;
}

export interface Ratios {
  readonly faster_peer: System["key"];
  readonly per_record_over_pg_boss: Ratio;
  readonly per_record_over_faster_peer: Ratio;
  readonly batch_over_faster_peer: Ratio;
}

export function summarise(
  systems: readonly System[],
  results: readonly RunResult[],
  rounds: number,
): { summary: SystemSummary[]; ratios: Ratios } {
  const measured = results.filter((r) => !r.warmup);
  const summary = systems.map((system): SystemSummary => {
    const runs = measured.filter((r) => r.system === system.key);
    const of = (pick: (r: RunResult) => number) => spread(runs.map(pick));
    return {
      system: system.key,
      label: system.label,
      peer: system.peer,
      settings: system.settings,
      runs: runs.length,
      effects_per_s: of((r) => r.effects_per_s),
      ms: of((r) => r.ms),
      xact_per_effect: of((r) => r.xact_per_effect),
      wal_bytes_per_effect: of((r) => r.wal_bytes_per_effect),
      rows_written_per_effect: of((r) => r.rows_written_per_effect),
      startup_ms: of((r) => r.startup_ms),
      failures: runs.reduce((sum, r) => sum + r.failures, 0),
      all_verified: runs.every((r) => r.verified),
    };
  });
  const find = (key: System["key"]) => {
    const s = summary.find((x) => x.system === key);
    if (!s) throw new Error(`no summary for ${key}`);
    return s;
  };
  const fasterPeer = summary
    .filter((s) => s.peer)
    .reduce((best, s) => (s.effects_per_s.median > best.effects_per_s.median ? s : best));
  const ratio = (key: System["key"], over: System["key"]): Ratio => {
    const rate = (round: number, k: System["key"]) =>
      measured.find((r) => r.round === round && r.system === k)?.effects_per_s ?? Number.NaN;
    return {
      of_medians: round2(find(key).effects_per_s.median / find(over).effects_per_s.median),
      per_round: spread(
        Array.from({ length: rounds }, (_, i) => i + 1).map((round) =>
          round2(rate(round, key) / rate(round, over)),
        ),
      ),
    };
  };
  return {
    summary,
    ratios: {
      faster_peer: fasterPeer.system,
      per_record_over_pg_boss: ratio("jobfence-per-record", "pg-boss"),
      per_record_over_faster_peer: ratio("jobfence-per-record", fasterPeer.system),
      batch_over_faster_peer: ratio("jobfence-batch", fasterPeer.system),
    },
  };
}
