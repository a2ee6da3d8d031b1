/**
 * The workload bench/cleanup.ts measures the cleanup against: closed-loop inserters, each its own
 * connection in the role of the consumer it inserts for, inserting fresh live fences one
 * transaction at a time as the consumer harness does: beginWithFences (BEGIN and the INSERT … ON
 * CONFLICT DO NOTHING in one round trip), then COMMIT. Latency is the whole transaction, timed
 * with performance.now(); the INSERT and the COMMIT (where the WAL flush is waited for) are also
 * timed alone. Only inserts started while the measured work ran count.
 */
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import type pg from "pg";
import { beginWithFences, fenceCommit } from "../../shared/db/queries/begin-with-fences.ts";
import { jobFingerprint } from "../../shared/envelope/fingerprint.ts";
import { ascending, round2 } from "../lib/report.ts";
import { at, percentile } from "../lib/support.ts";
import { CONSUMERS, LIVE_PREFIX } from "./seed.ts";

/** Live fences expire in a week: cleanup must never touch them. */
const LIVE_TTL_SECONDS = 7 * 86_400;

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

export interface InsertStats {
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

export interface Inserters {
  /**
   * Starts the inserters, lets them warm up for `warmupMs`, runs `work`, and stops them when it
   * returns. Only inserts started while `work` ran are measured.
   */
  around<T>(
    warmupMs: number,
    work: () => Promise<T>,
  ): Promise<{ result: T; stats: InsertStats; windowMs: number; txMs: number[] }>;
  /** Live fences inserted so far, over every round. */
  inserted(): number;
}

/** `count` inserters over `pools` (one per consumer, in CONSUMERS order): worker w inserts for consumer w mod 4. */
export function createInserters(pools: readonly pg.Pool[], count: number): Inserters {
  let inserted = 0;
  const around: Inserters["around"] = async (warmupMs, work) => {
    const samples: Sample[] = [];
    let stop = false;
    let errors = 0;
    let firstError: unknown;
    const loop = async (worker: number) => {
      const client = await at(pools, worker % CONSUMERS.length).connect();
      try {
        for (let n = 0; !stop; n++) {
          const start = performance.now();
          try {
            const before = performance.now();
            const jobId = `${LIVE_PREFIX}${randomUUID()}`;
            const fences = await beginWithFences(client, {
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
            await client.query(fenceCommit(fences));
            const end = performance.now();
            if (!fences.fresh.has(jobId)) throw new Error("a fresh job id came back as a duplicate");
            inserted++;
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
    const loops = Array.from({ length: count }, (_, worker) => loop(worker));
    // One failing inserter stops the others, so the phase cannot hang on a broken server.
    const failed = Promise.all(loops).catch((error: unknown) => {
      stop = true;
      throw error;
    });
    let windowStart = 0;
    let windowEnd = 0;
    let result: Awaited<ReturnType<typeof work>>;
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
  };
  return { around, inserted: () => inserted };
}
