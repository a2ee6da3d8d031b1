/**
 * One repetition of the local end-to-end benchmark: send N jobs with the pollers stopped (not
 * timed), start the clock and the pollers, stop it when the N-th message has been deleted, stop the
 * pollers; then split the workers' time into SQS calls, database calls and the rest, and check the
 * run: N more ledger rows, N "applied" outcomes, and a queue with nothing visible, in flight or
 * delayed.
 */
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { makeJobs } from "../lib/harness-driver.ts";
import { int, round2, secs } from "../lib/report.ts";
import { messagesLeft, sendInBatches } from "../lib/sqs.ts";
import { type BenchStack, POLL_WAIT_SECONDS } from "./stack.ts";
import { coveredBy, timeIn } from "./timing.ts";

export interface RepResult {
  readonly rep: number;
  readonly jobs: number;
  readonly send_ms: number;
  readonly wall_ms: number;
  readonly jobs_per_s: number;
  /** Shares of the workers' time (workers × wall), percent. */
  readonly sqs_pct: number;
  readonly db_pct: number;
  readonly other_pct: number;
  /** Percent of wall time with at least one call of the kind in flight. */
  readonly sqs_covered_pct: number;
  readonly db_covered_pct: number;
  readonly per_job_ms: { readonly sqs: number; readonly db: number; readonly other: number };
  readonly by_call: Record<string, { readonly ms: number; readonly count: number }>;
  readonly receives: number;
  readonly empty_receives: number;
  readonly event_loop_utilisation_pct: number;
  readonly process_cpu_pct: number;
  readonly checks: { readonly ledger_rows: number; readonly applied: number; readonly left_in_queue: number };
  readonly ok: boolean;
}

export interface RepSetting {
  readonly stack: BenchStack;
  /** The poller's workers: each runs receive → handler → delete one after another. */
  readonly workers: number;
  readonly ledgerRows: () => Promise<number>;
  /** A repetition that has not finished after this long failed. */
  readonly timeoutMs: number;
}

export async function runRep(
  { stack, workers, ledgerRows, timeoutMs }: RepSetting,
  rep: number,
  count: number,
): Promise<RepResult> {
  const { log, outcomes } = stack;
  const jobs = makeJobs(count);
  const ledgerBefore = await ledgerRows();
  const sendStart = performance.now();
  await sendInBatches(
    stack.setupSqs,
    stack.sourceUrl,
    jobs.map((job) =>
      JSON.stringify({
        job_id: job.jobId,
        tenant_id: job.tenantId,
        payload: { user_id: job.userId, points: job.points },
      }),
    ),
  );
  const sendMs = performance.now() - sendStart;
  log.reset();
  outcomes.clear();
  const done = log.whenDeleted(count);
  const elu0 = performance.eventLoopUtilization();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const poller = stack.poll();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`repetition ${rep}: ${log.deleted} of ${count} deleted after ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  let tEnd: number;
  try {
    tEnd = await Promise.race([done, timeout]);
  } catch (error) {
    await poller.stop();
    throw error;
  } finally {
    clearTimeout(timer);
  }
  const cpu = process.cpuUsage(cpu0);
  const elu = performance.eventLoopUtilization(elu0);
  await poller.stop();
  // Stopping aborts the workers' long polls on the client side only: the emulator keeps each one
  // open until its wait ends, and would hand the next repetition's first messages to it (in flight
  // for the visibility timeout, delivered to no one). Let them run out before anything is sent.
  await sleep(POLL_WAIT_SECONDS * 1000 + 250);
  const wall = tEnd - t0;

  const totals = timeIn(log.calls, t0, tEnd);
  const sqsMs = totals.get("sqs")?.ms ?? 0;
  const dbMs = totals.get("db")?.ms ?? 0;
  const workerMs = workers * wall;
  const byCall: Record<string, { ms: number; count: number }> = {};
  for (const [key, value] of totals) {
    if (key.includes(":")) byCall[key] = { ms: round2(value.ms), count: value.count };
  }
  const ledger = (await ledgerRows()) - ledgerBefore;
  const left = await messagesLeft(stack.setupSqs, stack.sourceUrl);
  const applied = outcomes.get("applied") ?? 0;
  return {
    rep,
    jobs: count,
    send_ms: Math.round(sendMs),
    wall_ms: round2(wall),
    jobs_per_s: Math.round(count / (wall / 1000)),
    sqs_pct: round2((100 * sqsMs) / workerMs),
    db_pct: round2((100 * dbMs) / workerMs),
    other_pct: round2(100 - (100 * (sqsMs + dbMs)) / workerMs),
    sqs_covered_pct: round2((100 * coveredBy(log.calls, "sqs", t0, tEnd)) / wall),
    db_covered_pct: round2((100 * coveredBy(log.calls, "db", t0, tEnd)) / wall),
    per_job_ms: {
      sqs: round2(sqsMs / count),
      db: round2(dbMs / count),
      other: round2((workerMs - sqsMs - dbMs) / count),
    },
    by_call: byCall,
    receives: log.receives,
    empty_receives: log.emptyReceives,
    event_loop_utilisation_pct: round2(100 * elu.utilization),
    process_cpu_pct: round2((100 * (cpu.user + cpu.system)) / 1000 / wall),
    checks: { ledger_rows: ledger, applied, left_in_queue: left },
    ok: ledger === count && applied === count && left === 0,
  };
}

/** One line per repetition, as it ends. */
export function describeRep(r: RepResult, label: string): void {
  console.log(
    `  ${label.padEnd(8)} ${int(r.jobs)} jobs in ${secs(r.wall_ms)} = ${int(r.jobs_per_s)} jobs/s; workers' time: ` +
      `SQS ${r.sqs_pct.toFixed(1)}%, DB ${r.db_pct.toFixed(1)}%, other ${r.other_pct.toFixed(1)}%; ` +
      `loop ${r.event_loop_utilisation_pct.toFixed(0)}% busy, CPU ${r.process_cpu_pct.toFixed(0)}% (sent in ${secs(r.send_ms)})` +
      (r.ok ? "" : `  CHECK FAILED: ${JSON.stringify(r.checks)}`),
  );
}
