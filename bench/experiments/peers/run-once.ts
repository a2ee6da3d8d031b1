/**
 * One run of one system in the peers experiment: reset, seed, CHECKPOINT, counters, the timed
 * part, counters again, and the effect check (the ledger's count and the balances' total).
 */
import { performance } from "node:perf_hooks";
import { makeJobs } from "../../lib/harness-driver.ts";
import { counterDelta, type PgObserver } from "../../lib/pg-counters.ts";
import { int, round2 } from "../../lib/report.ts";
import { at } from "../../lib/support.ts";
import type { System } from "./systems.ts";

export interface RunResult {
  readonly round: number;
  readonly warmup: boolean;
  readonly system: System["key"];
  readonly position: number;
  readonly jobs: number;
  readonly ms: number;
  readonly startup_ms: number;
  readonly effects_per_s: number;
  readonly xacts: number;
  readonly commits: number;
  readonly rollbacks: number;
  readonly xact_per_effect: number;
  readonly wal_bytes: number;
  readonly wal_bytes_per_effect: number;
  readonly rows_written_per_effect: number;
  readonly counted_ms: number;
  readonly counters_exact: boolean;
  /** The whole run's wall time: reset, seeding, checkpoint, counters, the run, shutdown, checks. */
  readonly wall_ms: number;
  readonly failures: number;
  readonly verified: boolean;
}

const RESET_SQL = `TRUNCATE award_points.ledger, award_points.balances, core.processed_jobs,
  pgboss.job, graphile_worker._private_jobs`;

/** Where a run sits in the experiment, and its size. */
export interface RunPlace {
  readonly round: number;
  readonly position: number;
  readonly warmup: boolean;
  readonly jobs: number;
  readonly users: number;
}

export async function runOnce(system: System, observer: PgObserver, place: RunPlace): Promise<RunResult> {
  const wallStarted = performance.now();
  const jobs = makeJobs(place.jobs, place.users);
  const expectedPoints = jobs.reduce((sum, job) => sum + job.points, 0);
  await observer.query(RESET_SQL);
  await system.prepare(jobs);
  await observer.query("CHECKPOINT");
  const before = await observer.settled();
  const timed = await system.run(jobs, observer);
  const after = await observer.settled();
  const delta = counterDelta(before, after);
  const check = at(
    (
      await observer.query<{ effects: number; points: string | null }>(
        `SELECT (SELECT count(*) FROM award_points.ledger)::int AS effects,
                (SELECT sum(balance) FROM award_points.balances)::text AS points`,
      )
    ).rows,
    0,
  );
  const verified = check.effects === jobs.length && Number(check.points) === expectedPoints;
  if (!verified) {
    console.warn(
      `  ${system.label}: ledger has ${check.effects} of ${jobs.length} effects, balances total ` +
        `${check.points} of ${expectedPoints}`,
    );
  }
  const n = jobs.length;
  const result: RunResult = {
    round: place.round,
    warmup: place.warmup,
    system: system.key,
    position: place.position,
    jobs: n,
    ms: round2(timed.ms),
    startup_ms: round2(timed.startupMs),
    effects_per_s: round2(n / (timed.ms / 1000)),
    xacts: delta.xacts,
    commits: delta.commits,
    rollbacks: delta.rollbacks,
    xact_per_effect: round2(delta.xacts / n),
    wal_bytes: delta.walBytes,
    wal_bytes_per_effect: Math.round(delta.walBytes / n),
    rows_written_per_effect: round2(delta.rowsWritten / n),
    counted_ms: Math.round(delta.ms),
    counters_exact: delta.exact,
    wall_ms: Math.round(performance.now() - wallStarted),
    failures: timed.failures,
    verified,
  };
  console.log(
    `  ${place.warmup ? "warm-up" : `round ${place.round}`} ${system.label.padEnd(20)} ${int(result.effects_per_s).padStart(7)} effects/s  ` +
      `${result.xact_per_effect.toFixed(2)} xact/effect  ${int(result.wal_bytes_per_effect)} WAL B/effect` +
      (timed.failures > 0 ? `  ${timed.failures} handler failure(s)` : ""),
  );
  return result;
}
