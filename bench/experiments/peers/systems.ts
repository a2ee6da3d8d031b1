/**
 * The four systems the peers experiment runs the same effect through: jobfence per-record and
 * batch-commit (the consumer invoked in process with SQS batches), pg-boss and graphile-worker
 * (each its own fetch/complete cycle). Their settings and why: bench/experiments/peers.ts.
 */
import { EventEmitter } from "node:events";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import {
  Logger,
  makeWorkerUtils,
  run as runGraphileWorker,
  type Task,
  type WorkerEvents,
} from "graphile-worker";
import { PgBoss, type Db as PgBossDb, type Job as PgBossJob } from "pg-boss";
import { awardPoints } from "../../../functions/award-points/award.ts";
import type { CommitMode } from "../../../shared/consumer.ts";
import { createPool } from "../../../shared/db/pool.ts";
import type { WorkQueries } from "../../../shared/fence/work-transaction.ts";
import {
  type BenchJob,
  batchesOf,
  benchConsumer,
  invokeBatch,
  runConcurrently,
} from "../../lib/harness-driver.ts";
import type { PgObserver } from "../../lib/pg-counters.ts";
import { at } from "../../lib/support.ts";

/** Records per SQS batch, as Lambda delivers them (the event source mapping's default). */
export const SQS_BATCH = 10;
/** pg-boss refuses less. */
export const POLL_SECONDS = 0.5;
/** A run that has not finished by then has hung. */
const RUN_TIMEOUT_MS = 5 * 60_000;
/** Jobs per bulk-insert call when seeding a peer's queue. */
const SEED_CHUNK = 1000;

export const PGBOSS_QUEUE = "award-points";
const GW_TASK = "award_points";

/** The knobs the systems share. */
export interface SystemSettings {
  readonly concurrency: number;
  readonly pgbossBatch: number;
  readonly gwLocalQueue: number;
}

/** What a timed run reports. */
export interface Timed {
  readonly ms: number;
  /** Handler errors (a failed job is retried by its queue). */
  readonly failures: number;
  /** Start-up before the timed part (pg-boss start(), graphile-worker's options and migration check). */
  readonly startupMs: number;
}

export interface System {
  readonly key: "jobfence-per-record" | "jobfence-batch" | "pg-boss" | "graphile-worker";
  readonly label: string;
  readonly settings: string;
  readonly peer: boolean;
  /** Seeds what the run will consume (not timed, not counted). */
  prepare(jobs: readonly BenchJob[]): Promise<void>;
  /** Starts workers, times until every effect is applied and every job completed, stops them. */
  run(jobs: readonly BenchJob[], observer: PgObserver): Promise<Timed>;
}

/** Waits for `done()`, or throws after RUN_TIMEOUT_MS. */
async function until(what: string, done: () => boolean | Promise<boolean>, everyMs = 2): Promise<void> {
  const deadline = performance.now() + RUN_TIMEOUT_MS;
  while (!(await done())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** True once the ledger holds `n` effects and `openJobsSql` counts no unfinished job. */
async function allDone(observer: PgObserver, n: number, openJobsSql: string): Promise<boolean> {
  const { rows } = await observer.query<{ effects: number; open: number }>(
    `SELECT (SELECT count(*) FROM award_points.ledger)::int AS effects, (${openJobsSql})::int AS open`,
  );
  const row = at(rows, 0);
  return row.effects >= n && row.open === 0;
}

export function jobfence(url: string, commitMode: CommitMode, { concurrency }: SystemSettings): System {
  let batches: ReturnType<typeof batchesOf> = [];
  return {
    key: commitMode === "batch" ? "jobfence-batch" : "jobfence-per-record",
    label: `jobfence ${commitMode}`,
    settings: `commitMode ${commitMode}; SQS batches of ${SQS_BATCH}, ${concurrency} concurrent invocations; pool max ${concurrency}`,
    peer: false,
    async prepare(jobs) {
      batches = batchesOf(jobs, SQS_BATCH);
    },
    async run() {
      const pool = createPool({ connectionString: url, max: concurrency, applicationName: "bench-jobfence" });
      try {
        const handler = benchConsumer(pool, commitMode, url);
        const ms = await runConcurrently(batches, concurrency, (batch) => invokeBatch(handler, batch));
        return { ms, failures: 0, startupMs: 0 };
      } finally {
        await pool.end();
      }
    },
  };
}

/** pg-boss's transaction, as the Queryable the effect takes. */
function pgBossTransaction(tx: PgBossDb): WorkQueries {
  return {
    query: (text: string, values?: unknown[]) => tx.executeSql(text, values),
  } as unknown as WorkQueries;
}

function quietErrors(boss: PgBoss, sink: (error: unknown) => void): void {
  boss.on("error", sink);
  boss.on("warning", (warning) => console.warn(`  pg-boss warning: ${warning.message}`));
}

export function pgBoss(url: string, { concurrency, pgbossBatch }: SystemSettings): System {
  return {
    key: "pg-boss",
    label: "pg-boss",
    settings:
      `work(): localConcurrency ${concurrency}, batchSize ${pgbossBatch}, transactional, burstWhenBatchFull, ` +
      `pollingIntervalSeconds ${POLL_SECONDS}; pool max ${concurrency + 2}; other options default`,
    peer: true,
    async prepare(jobs) {
      // A seeding instance with nothing running in the background; stopped (pool closed) before counting.
      const seeder = new PgBoss({
        connectionString: url,
        max: 2,
        supervise: false,
        schedule: false,
        migrate: false,
        registerInstance: false,
      });
      quietErrors(seeder, (error) => console.error(`  pg-boss (seeding): ${String(error)}`));
      await seeder.start();
      try {
        for (let i = 0; i < jobs.length; i += SEED_CHUNK) {
          await seeder.insert(
            PGBOSS_QUEUE,
            jobs.slice(i, i + SEED_CHUNK).map((job) => ({ data: { ...job } })),
          );
        }
      } finally {
        await seeder.stop({ graceful: false, close: true });
      }
    },
    async run(jobs, observer) {
      let failures = 0;
      let handled = 0;
      const boss = new PgBoss({ connectionString: url, max: concurrency + 2 });
      quietErrors(boss, () => {
        failures += 1;
      });
      const startedUp = performance.now();
      await boss.start();
      try {
        const started = performance.now();
        await boss.work(
          PGBOSS_QUEUE,
          {
            batchSize: pgbossBatch,
            localConcurrency: concurrency,
            pollingIntervalSeconds: POLL_SECONDS,
            burstWhenBatchFull: true,
            transactional: true,
          },
          async (batch: PgBossJob<BenchJob>[], tx: PgBossDb) => {
            try {
              const db = pgBossTransaction(tx);
              for (const job of batch) await awardPoints(db, job.data);
              handled += batch.length;
            } catch (error) {
              failures += 1;
              throw error;
            }
          },
        );
        await until("pg-boss handlers", () => handled >= jobs.length);
        await until("pg-boss completions", () =>
          allDone(
            observer,
            jobs.length,
            `SELECT count(*) FROM pgboss.job WHERE name = '${PGBOSS_QUEUE}' AND state <> 'completed'`,
          ),
        );
        return { ms: performance.now() - started, failures, startupMs: started - startedUp };
      } finally {
        await boss.stop({ graceful: true, close: true, timeout: 10_000 });
      }
    },
  };
}

export function graphileWorker(url: string, { concurrency, gwLocalQueue }: SystemSettings): System {
  const logger = new Logger(() => () => {});
  return {
    key: "graphile-worker",
    label: "graphile-worker",
    settings:
      `concurrentJobs ${concurrency}, maxPoolSize ${concurrency + 2}, localQueue.size ${gwLocalQueue}, ` +
      `completeJobBatchDelay 0, failJobBatchDelay 0, pollInterval ${POLL_SECONDS * 1000} ms; ` +
      "effect via helpers.withPgClient (autocommit)",
    peer: true,
    async prepare(jobs) {
      const utils = await makeWorkerUtils({ connectionString: url, logger });
      try {
        for (let i = 0; i < jobs.length; i += SEED_CHUNK) {
          await utils.addJobs(
            jobs.slice(i, i + SEED_CHUNK).map((job) => ({ identifier: GW_TASK, payload: { ...job } })),
          );
        }
      } finally {
        await utils.release();
      }
    },
    async run(jobs, observer) {
      let failures = 0;
      let handled = 0;
      let started: number | undefined;
      const events = new EventEmitter() as WorkerEvents;
      events.on("pool:create", () => {
        started ??= performance.now();
      });
      events.on("job:error", () => {
        failures += 1;
      });
      const task: Task = async (payload, helpers) => {
        await helpers.withPgClient((client) => awardPoints(client, payload as BenchJob));
        handled += 1;
      };
      const startedUp = performance.now();
      const runner = await runGraphileWorker({
        taskList: { [GW_TASK]: task },
        parsedCronItems: [],
        noHandleSignals: true,
        preset: {
          worker: {
            connectionString: url,
            concurrentJobs: concurrency,
            maxPoolSize: concurrency + 2,
            pollInterval: POLL_SECONDS * 1000,
            localQueue: { size: gwLocalQueue },
            completeJobBatchDelay: 0,
            failJobBatchDelay: 0,
            logger,
            events,
          },
        },
      });
      try {
        await until("graphile-worker tasks", () => handled >= jobs.length);
        await until("graphile-worker completions", () =>
          allDone(observer, jobs.length, "SELECT count(*) FROM graphile_worker._private_jobs"),
        );
        const from = started ?? startedUp;
        return { ms: performance.now() - from, failures, startupMs: from - startedUp };
      } finally {
        await runner.stop();
      }
    },
  };
}
