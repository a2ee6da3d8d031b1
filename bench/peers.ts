/**
 * `node bench/peers.ts`: the same effect run by jobfence and by two Postgres job queues, pg-boss and
 * graphile-worker, on the same Postgres, at the same concurrency. The issue's targets: jobfence in
 * per-record mode ahead of both peers; in batch-commit mode at least 2× the faster of them.
 *
 * - Database: DATABASE_URL when set (a fresh database is created beside it and dropped at the end),
 *   otherwise an embedded PostgreSQL, `durable` by default (fsync and synchronous_commit on, as a
 *   real server runs: a commit costs a WAL flush, which is what batching saves); `--durability fast`
 *   turns them off. pg-boss and graphile-worker install their schemas in the same database.
 * - The effect: awardPoints (functions/award-points/award.ts), one statement that appends a ledger
 *   row and upserts the user's balance; jobs spread over `--users` balances (default 1,000).
 * - jobfence: the queue is SQS, not Postgres, so its Postgres work per effect is the fence and the
 *   effect. The award-points consumer (benchConsumer) is invoked in process with SQS batches of 10
 *   records, `--concurrency` invocations at a time, its pool max = concurrency; once per-record
 *   (BEGIN + fence, effect, COMMIT for each record) and once in batch-commit mode (one transaction
 *   per batch). No SQS call is made (nothing fails), so SQS's own receive/delete cost is not here.
 *   The effect sends no follow-up, as the peers' effect does not, and a job that sends nothing pays
 *   nothing for the outbox (its statements are counted by bench/round-trips.ts, which also reports
 *   what a follow-up adds).
 * - pg-boss (its own fetch/complete cycle): `work()` with `localConcurrency` = concurrency,
 *   `batchSize` 10 (`--pgboss-batch`; the same batch as SQS's), `transactional: true` (the handler's
 *   writes commit with the jobs' completion, pg-boss's way to apply an effect once, like the fence),
 *   `burstWhenBatchFull` (fetch again at once while batches come back full, its setting for draining
 *   a backlog), `pollingIntervalSeconds` 0.5 (its minimum); pool max = concurrency + 2 (pg-boss warns
 *   when transactional handlers can pin the whole pool). Everything else default, including its
 *   supervisor and instance registry: their statements are part of its cost.
 * - graphile-worker (its own fetch/complete cycle): `concurrentJobs` = concurrency, `maxPoolSize`
 *   = concurrency + 2 (its documented recommendation), the batching of its performance guide:
 *   `localQueue.size` 500 (`--gw-local-queue`), `completeJobBatchDelay` 0, `failJobBatchDelay` 0;
 *   `pollInterval` 500 ms (pg-boss's floor; with the backlog queued up front neither waits for a poll
 *   except once a fetch comes back empty). The task runs the effect through `helpers.withPgClient`
 *   as one autocommit statement: graphile-worker completes the job afterwards in a transaction of
 *   its own, so its effect is at-least-once, not atomic with completion (the cheapest way to run it).
 * - A run: reset (TRUNCATE the ledger, balances, fences and both libraries' job tables), seed the
 *   peer's queue with its bulk API (pg-boss `insert`, graphile-worker `addJobs`; not timed),
 *   CHECKPOINT, counters snapshot (bench/pg-counters.ts, after every other connection to the
 *   database has gone, so all statistics are flushed), then the timed part: for jobfence from the
 *   first invocation until the last returns; for pg-boss from `work()` (after `start()`) and for
 *   graphile-worker from its worker pool's creation (after its start-up) until every effect is in
 *   the ledger and every job is completed in their tables (polled on the observer connection every
 *   2 ms once the handlers have run them all). Then the workers stop, their pools close, and the
 *   counters are read again: transactions and WAL bytes per effect cover start-up, the run and the
 *   shutdown, background work included (their supervisors, registries, LISTEN connections count:
 *   they are part of the system's cost). WAL is cluster-wide: on a shared DATABASE_URL server other
 *   databases' writes land in it too. Each run checks the ledger count and the balances' total.
 * - Repetitions: one warm-up round (not counted; min(jobs, 2,000) jobs per run, 200 with --quick),
 *   then `--reps` rounds (default 5; 3 with --quick), each running the four systems in an order
 *   rotated by one every round, so machine noise spreads over all of them. Figures are medians over
 *   rounds with their range; the ratios compare medians (and, per round, show their range).
 *
 * Options: `--jobs N` (per run; default 5,000, --quick 800), `--reps N`, `--concurrency N` (default
 * 8), `--users N`, `--pgboss-batch N`, `--gw-local-queue N`, `--durability durable|fast` (embedded
 * only), `--quick` (small: well under 30 s). Exits 0 whatever the figures (it is a benchmark);
 * prints a verdict line and writes bench/results/peers.json.
 */
import { EventEmitter } from "node:events";
import { readFile } from "node:fs/promises";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import {
  Logger,
  makeWorkerUtils,
  run as runGraphileWorker,
  runMigrations,
  type Task,
  type WorkerEvents,
} from "graphile-worker";
import pg from "pg";
import { PgBoss, type Db as PgBossDb, type Job as PgBossJob } from "pg-boss";
import { awardPoints } from "../functions/award-points/award.ts";
import type { CommitMode } from "../shared/consumer.ts";
import { createPool } from "../shared/db/pool.ts";
import type { WorkQueries } from "../shared/fence/work-transaction.ts";
import {
  type BenchJob,
  batchesOf,
  benchConsumer,
  invokeBatch,
  makeJobs,
  runConcurrently,
} from "./harness-driver.ts";
import { counterDelta, openObserver, type PgObserver } from "./pg-counters.ts";
import {
  describeEnvironment,
  int,
  ratio,
  round2,
  type Spread,
  secs,
  showSpread,
  spread,
  table,
  writeResult,
} from "./report.ts";
import { at, benchDatabase, createCleanups, positiveInt, runBenchmark } from "./support.ts";

// ---------------------------------------------------------------------------------------------
// Options

const { values: argv } = parseArgs({
  options: {
    jobs: { type: "string" },
    reps: { type: "string" },
    concurrency: { type: "string" },
    users: { type: "string" },
    "pgboss-batch": { type: "string" },
    "gw-local-queue": { type: "string" },
    durability: { type: "string" },
    quick: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});

if (argv.help) {
  console.log(
    "usage: node bench/peers.ts [--quick] [--jobs N] [--reps N] [--concurrency N] [--users N]\n" +
      "                           [--pgboss-batch N] [--gw-local-queue N] [--durability durable|fast]\n" +
      "  DATABASE_URL  admin URL of a PostgreSQL to use (a fresh database is created beside it);\n" +
      "                unset: an embedded PostgreSQL is started (durable unless --durability fast)",
  );
  process.exit(0);
}

const QUICK = argv.quick;
const JOBS = positiveInt(argv.jobs, QUICK ? 800 : 5000, "jobs");
const REPS = positiveInt(argv.reps, QUICK ? 3 : 5, "reps");
/** The warm-up round's jobs per run: enough to open connections and warm caches and the JIT. */
const WARMUP_JOBS = Math.min(JOBS, QUICK ? 200 : 2000);
const CONCURRENCY = positiveInt(argv.concurrency, 8, "concurrency");
const USERS = positiveInt(argv.users, 1000, "users");
/** Records per SQS batch, as Lambda delivers them (the event source mapping's default). */
const SQS_BATCH = 10;
const PGBOSS_BATCH = positiveInt(argv["pgboss-batch"], SQS_BATCH, "pgboss-batch");
const GW_LOCAL_QUEUE = positiveInt(argv["gw-local-queue"], 500, "gw-local-queue");
if (argv.durability !== undefined && argv.durability !== "durable" && argv.durability !== "fast") {
  console.error(`--durability must be durable or fast, got ${argv.durability}`);
  process.exit(2);
}
const DURABILITY: "durable" | "fast" = argv.durability === "fast" ? "fast" : "durable";
/** pg-boss refuses less. */
const POLL_SECONDS = 0.5;
/** A run that has not finished by then has hung. */
const RUN_TIMEOUT_MS = 5 * 60_000;
/** Jobs per bulk-insert call when seeding a peer's queue. */
const SEED_CHUNK = 1000;
/** The issue's targets: per-record ahead of the faster peer; batch-commit at least twice it. */
const TARGET_PER_RECORD = 1;
const TARGET_BATCH = 2;

const PGBOSS_QUEUE = "award-points";
const GW_TASK = "award_points";

// ---------------------------------------------------------------------------------------------
// The systems

/** What a timed run reports. */
interface Timed {
  readonly ms: number;
  /** Handler errors (a failed job is retried by its queue). */
  readonly failures: number;
  /** Start-up before the timed part (pg-boss start(), graphile-worker's options and migration check). */
  readonly startupMs: number;
}

interface System {
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

function jobfence(url: string, commitMode: CommitMode): System {
  let batches: ReturnType<typeof batchesOf> = [];
  return {
    key: commitMode === "batch" ? "jobfence-batch" : "jobfence-per-record",
    label: `jobfence ${commitMode}`,
    settings: `commitMode ${commitMode}; SQS batches of ${SQS_BATCH}, ${CONCURRENCY} concurrent invocations; pool max ${CONCURRENCY}`,
    peer: false,
    async prepare(jobs) {
      batches = batchesOf(jobs, SQS_BATCH);
    },
    async run() {
      const pool = createPool({ connectionString: url, max: CONCURRENCY, applicationName: "bench-jobfence" });
      try {
        const handler = benchConsumer(pool, commitMode, url);
        const ms = await runConcurrently(batches, CONCURRENCY, (batch) => invokeBatch(handler, batch));
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

function pgBoss(url: string): System {
  const quietErrors = (boss: PgBoss, sink: (error: unknown) => void) => {
    boss.on("error", sink);
    boss.on("warning", (warning) => console.warn(`  pg-boss warning: ${warning.message}`));
  };
  return {
    key: "pg-boss",
    label: "pg-boss",
    settings:
      `work(): localConcurrency ${CONCURRENCY}, batchSize ${PGBOSS_BATCH}, transactional, burstWhenBatchFull, ` +
      `pollingIntervalSeconds ${POLL_SECONDS}; pool max ${CONCURRENCY + 2}; other options default`,
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
      const boss = new PgBoss({ connectionString: url, max: CONCURRENCY + 2 });
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
            batchSize: PGBOSS_BATCH,
            localConcurrency: CONCURRENCY,
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

function graphileWorker(url: string): System {
  const logger = new Logger(() => () => {});
  return {
    key: "graphile-worker",
    label: "graphile-worker",
    settings:
      `concurrentJobs ${CONCURRENCY}, maxPoolSize ${CONCURRENCY + 2}, localQueue.size ${GW_LOCAL_QUEUE}, ` +
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
            concurrentJobs: CONCURRENCY,
            maxPoolSize: CONCURRENCY + 2,
            pollInterval: POLL_SECONDS * 1000,
            localQueue: { size: GW_LOCAL_QUEUE },
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

// ---------------------------------------------------------------------------------------------
// One run

interface RunResult {
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

async function runOnce(
  system: System,
  observer: PgObserver,
  round: number,
  position: number,
  warmup: boolean,
): Promise<RunResult> {
  const wallStarted = performance.now();
  const jobs = makeJobs(warmup ? WARMUP_JOBS : JOBS, USERS);
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
    round,
    warmup,
    system: system.key,
    position,
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
    `  ${warmup ? "warm-up" : `round ${round}`} ${system.label.padEnd(20)} ${int(result.effects_per_s).padStart(7)} effects/s  ` +
      `${result.xact_per_effect.toFixed(2)} xact/effect  ${int(result.wal_bytes_per_effect)} WAL B/effect` +
      (timed.failures > 0 ? `  ${timed.failures} handler failure(s)` : ""),
  );
  return result;
}

// ---------------------------------------------------------------------------------------------
// Main

/** The version of an installed package, from its package.json. */
async function installedVersion(name: string): Promise<string> {
  const text = await readFile(new URL(`../node_modules/${name}/package.json`, import.meta.url), "utf8");
  return (JSON.parse(text) as { version: string }).version;
}

const cleanups = createCleanups();

async function main(): Promise<void> {
  const started = performance.now();
  const db = await benchDatabase(DURABILITY, cleanups);
  const durability = db.embedded ? DURABILITY : "as configured on the server";
  console.log(
    `peers: ${int(JOBS)} jobs per run, concurrency ${CONCURRENCY}, ${USERS} users, ${REPS} round(s) + warm-up; ` +
      `${db.serverKind}${db.embedded ? `, ${DURABILITY}` : ""}`,
  );

  // Install the peers' schemas (not measured).
  const setup = new pg.Client({ connectionString: db.url });
  await setup.connect();
  const environment = await describeEnvironment(setup, db.serverKind, [
    "synchronous_commit",
    "fsync",
    "full_page_writes",
    "wal_level",
    "max_wal_size",
    "checkpoint_timeout",
    "shared_buffers",
    "autovacuum",
  ]);
  await setup.end();
  const installer = new PgBoss({ connectionString: db.url, max: 2, supervise: false, schedule: false });
  installer.on("error", (error) => console.error(`  pg-boss (install): ${String(error)}`));
  await installer.start();
  await installer.createQueue(PGBOSS_QUEUE);
  await installer.stop({ graceful: false, close: true });
  await runMigrations({ connectionString: db.url, logger: new Logger(() => () => {}) });

  const observer = await openObserver(db.url);
  cleanups.push(() => observer.close());
  if (!observer.canForceFlush) {
    console.warn("  server before PostgreSQL 15: transaction counts are approximate");
  }

  const systems: System[] = [
    jobfence(db.url, "per-record"),
    jobfence(db.url, "batch"),
    pgBoss(db.url),
    graphileWorker(db.url),
  ];

  const results: RunResult[] = [];
  for (let round = 0; round <= REPS; round++) {
    const warmup = round === 0;
    const order = systems.map((_, i) => at(systems, (i + round) % systems.length));
    for (const [position, system] of order.entries()) {
      results.push(await runOnce(system, observer, round, position, warmup));
    }
  }

  // --- report ---------------------------------------------------------------------------------
  const measured = results.filter((r) => !r.warmup);
  const summary = systems.map((system) => {
    const runs = measured.filter((r) => r.system === system.key);
    return {
      system: system.key,
      label: system.label,
      peer: system.peer,
      settings: system.settings,
      runs: runs.length,
      effects_per_s: spread(runs.map((r) => r.effects_per_s)),
      ms: spread(runs.map((r) => r.ms)),
      xact_per_effect: spread(runs.map((r) => r.xact_per_effect)),
      wal_bytes_per_effect: spread(runs.map((r) => r.wal_bytes_per_effect)),
      rows_written_per_effect: spread(runs.map((r) => r.rows_written_per_effect)),
      startup_ms: spread(runs.map((r) => r.startup_ms)),
      failures: runs.reduce((sum, r) => sum + r.failures, 0),
      all_verified: runs.every((r) => r.verified),
    };
  });
  const find = (key: System["key"]) => {
    const s = summary.find((x) => x.system === key);
    if (!s) throw new Error(`no summary for ${key}`);
    return s;
  };
  const perRecord = find("jobfence-per-record");
  const batch = find("jobfence-batch");
  const peers = summary.filter((s) => s.peer);
  const fasterPeer = peers.reduce((best, s) =>
    s.effects_per_s.median > best.effects_per_s.median ? s : best,
  );

  /** Per round: jobfence's rate over the faster peer's (by median) in the same round. */
  const perRound = (key: System["key"]): Spread =>
    spread(
      Array.from({ length: REPS }, (_, i) => i + 1).map((round) => {
        const rate = (k: System["key"]) =>
          measured.find((r) => r.round === round && r.system === k)?.effects_per_s ?? Number.NaN;
        return round2(rate(key) / rate(fasterPeer.system));
      }),
    );
  const ratios = {
    faster_peer: fasterPeer.system,
    per_record_over_faster_peer: round2(perRecord.effects_per_s.median / fasterPeer.effects_per_s.median),
    batch_over_faster_peer: round2(batch.effects_per_s.median / fasterPeer.effects_per_s.median),
    per_record_over_faster_peer_per_round: perRound("jobfence-per-record"),
    batch_over_faster_peer_per_round: perRound("jobfence-batch"),
  };

  console.log(
    `\nPer system: median (min–max) over ${REPS} round(s) of ${int(JOBS)} jobs; concurrency ${CONCURRENCY}`,
  );
  console.log(
    table(
      [
        "system",
        "effects/s",
        "seconds",
        "xact/effect",
        "WAL bytes/effect",
        "rows written/effect",
        "failures",
      ],
      summary.map((s) => [
        s.label,
        showSpread(s.effects_per_s, int),
        showSpread(s.ms, (v) => (v / 1000).toFixed(2)),
        showSpread(s.xact_per_effect, (v) => v.toFixed(2)),
        showSpread(s.wal_bytes_per_effect, int),
        showSpread(s.rows_written_per_effect, (v) => v.toFixed(1)),
        String(s.failures),
      ]),
    ),
  );
  for (const s of summary) console.log(`  ${s.label}: ${s.settings}`);
  console.log(
    "  xact and WAL cover start-up, run and shutdown (background work included); WAL is cluster-wide.",
  );

  console.log(`\nRatios (effects/s) against the faster peer, ${fasterPeer.label}`);
  console.log(
    table(
      ["jobfence mode", "ratio of medians", "per round (min–max)", "target"],
      [
        [
          "per-record",
          ratio(ratios.per_record_over_faster_peer),
          showSpread(ratios.per_record_over_faster_peer_per_round, ratio),
          `> ${TARGET_PER_RECORD}×`,
        ],
        [
          "batch",
          ratio(ratios.batch_over_faster_peer),
          showSpread(ratios.batch_over_faster_peer_per_round, ratio),
          `≥ ${TARGET_BATCH}×`,
        ],
      ],
    ),
  );

  const perRecordMet = ratios.per_record_over_faster_peer > TARGET_PER_RECORD;
  const batchMet = ratios.batch_over_faster_peer >= TARGET_BATCH;
  const notes: string[] = [];
  if (batch.xact_per_effect.median > 0.5) {
    notes.push(
      `batch mode ran ${batch.xact_per_effect.median.toFixed(2)} xact/effect: batch commit appears not to be in effect`,
    );
  }
  const unverified = summary.filter((s) => !s.all_verified).map((s) => s.label);
  if (unverified.length > 0) notes.push(`EFFECT CHECK FAILED for ${unverified.join(", ")}`);
  const verdict =
    `${perRecordMet && batchMet ? "PASS" : "FAIL"}: ${REPS} round(s) of ${int(JOBS)} jobs, concurrency ${CONCURRENCY}, ` +
    `${db.embedded ? DURABILITY : "DATABASE_URL"}; faster peer ${fasterPeer.label} ${int(fasterPeer.effects_per_s.median)}/s; ` +
    `jobfence per-record ${int(perRecord.effects_per_s.median)}/s = ${ratio(ratios.per_record_over_faster_peer)} ` +
    `(target > ${TARGET_PER_RECORD}×: ${perRecordMet ? "met" : "MISSED"}); ` +
    `batch ${int(batch.effects_per_s.median)}/s = ${ratio(ratios.batch_over_faster_peer)} ` +
    `(target ≥ ${TARGET_BATCH}×: ${batchMet ? "met" : "MISSED"})` +
    (notes.length > 0 ? `; ${notes.join("; ")}` : "");
  console.log(`\nVERDICT: ${verdict}`);

  const path = await writeResult("peers", {
    benchmark: "jobfence vs pg-boss vs graphile-worker: the same effect on the same Postgres",
    options: {
      jobs: JOBS,
      reps: REPS,
      quick: QUICK,
      concurrency: CONCURRENCY,
      users: USERS,
      sqs_batch: SQS_BATCH,
      pgboss_batch: PGBOSS_BATCH,
      gw_local_queue: GW_LOCAL_QUEUE,
      poll_seconds: POLL_SECONDS,
      durability,
    },
    method:
      "per run: TRUNCATE ledger, balances, fences and both job tables; seed the peer's queue with its bulk API; CHECKPOINT; " +
      "wait until no other backend is connected, snapshot pg_stat_database (xact_commit + xact_rollback, observer's own " +
      "transactions excluded, pg_stat_force_next_flush) and pg_current_wal_insert_lsn(); timed part: jobfence from first " +
      "invocation to last return, pg-boss from work() after start(), graphile-worker from its worker pool's creation, to " +
      "every effect in the ledger and every job completed (polled every 2 ms once all handlers ran); stop workers, close " +
      "pools, snapshot again. One warm-up round, then rounds with the order of the systems rotated by one each round.",
    systems: systems.map((s) => ({ system: s.key, settings: s.settings })),
    environment: {
      ...environment,
      durability,
      pg_boss: await installedVersion("pg-boss"),
      graphile_worker: await installedVersion("graphile-worker"),
      counters_exact: observer.canForceFlush,
    },
    targets: {
      per_record_over_faster_peer: `> ${TARGET_PER_RECORD}`,
      batch_over_faster_peer: `>= ${TARGET_BATCH}`,
    },
    runs: results,
    summary,
    ratios,
    verdict,
    total_runtime_ms: Math.round(performance.now() - started),
  });
  console.log(`wrote ${path} (total ${secs(performance.now() - started)})`);
}

await runBenchmark(main, cleanups);
