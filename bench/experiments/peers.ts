/**
 * `node bench/experiments/peers.ts [--quick]`: the same effect run by jobfence and by two Postgres
 * job queues, pg-boss and graphile-worker, on the same Postgres, at the same concurrency. Targets:
 * jobfence per-record at least as fast as pg-boss in its transactional mode (the peer that, like
 * the fence, commits the effect with the job's completion: effects/s ratio ≥ 1.0), and jobfence
 * batch-commit at least 2× the faster peer. An experiment (it answered the question once): not in
 * the CI quick run.
 *
 * - Database: DATABASE_URL when set (a fresh database is created beside it and dropped at the end),
 *   otherwise an embedded PostgreSQL, `durable` by default (fsync and synchronous_commit on, as a
 *   real server runs: a commit costs a WAL flush, which is what batching saves); `--durability fast`
 *   turns them off. pg-boss and graphile-worker install their schemas in the same database.
 * - The effect: awardPoints (functions/award-points/award.ts), one statement that appends a ledger
 *   row and upserts the user's balance; jobs spread over `--users` balances.
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
 *   CHECKPOINT, counters snapshot (bench/lib/pg-counters.ts, after every other connection to the
 *   database has gone, so all statistics are flushed), then the timed part: for jobfence from the
 *   first invocation until the last returns; for pg-boss from `work()` (after `start()`) and for
 *   graphile-worker from its worker pool's creation (after its start-up) until every effect is in
 *   the ledger and every job is completed in their tables (polled on the observer connection every
 *   2 ms once the handlers have run them all). Then the workers stop, their pools close, and the
 *   counters are read again: transactions and WAL bytes per effect cover start-up, the run and the
 *   shutdown, background work included (their supervisors, registries, LISTEN connections count:
 *   they are part of the system's cost). WAL is cluster-wide: on a shared DATABASE_URL server other
 *   databases' writes land in it too. Each run checks the ledger count and the balances' total.
 * - Repetitions: one warm-up round (not counted; min(`--jobs`, `--warmup-jobs`) jobs per run), then
 *   `--reps` rounds, each running the four systems in an order rotated by one every round, so
 *   machine noise spreads over all of them. Figures are medians over rounds with their range; the
 *   ratios compare medians (and, per round, show their range).
 */
import { readFile } from "node:fs/promises";
import { runMigrations as installGraphileWorker, Logger } from "graphile-worker";
import { PgBoss } from "pg-boss";
import { z } from "zod";
import { defineBenchmark } from "../lib/define.ts";
import { openObserver } from "../lib/pg-counters.ts";
import { int, ratio, showSpread } from "../lib/report.ts";
import { at } from "../lib/support.ts";
import { type RunResult, runOnce } from "./peers/run-once.ts";
import { type Ratio, summarise } from "./peers/summary.ts";
import {
  graphileWorker,
  jobfence,
  PGBOSS_QUEUE,
  POLL_SECONDS,
  pgBoss,
  SQS_BATCH,
  type System,
} from "./peers/systems.ts";

const options = z.object({
  jobs: z.coerce.number().int().positive().default(5000).describe("jobs per run"),
  warmupJobs: z.coerce
    .number()
    .int()
    .positive()
    .default(2000)
    .describe("jobs per run of the warm-up round (capped at --jobs)"),
  reps: z.coerce.number().int().positive().default(5).describe("measured rounds after the warm-up round"),
  concurrency: z.coerce
    .number()
    .int()
    .positive()
    .default(8)
    .describe("concurrent invocations / workers, the same for every system"),
  users: z.coerce.number().int().positive().default(1000).describe("balances the jobs spread over"),
  pgbossBatch: z.coerce.number().int().positive().default(SQS_BATCH).describe("pg-boss work() batchSize"),
  gwLocalQueue: z.coerce.number().int().positive().default(500).describe("graphile-worker localQueue.size"),
});

/** The targets: per-record at least pg-boss's rate; batch-commit at least twice the faster peer's. */
const TARGET_PER_RECORD = 1;
const TARGET_BATCH = 2;

/** The version of an installed package, from its package.json. */
async function installedVersion(name: string): Promise<string> {
  const text = await readFile(new URL(`../../node_modules/${name}/package.json`, import.meta.url), "utf8");
  return (JSON.parse(text) as { version: string }).version;
}

await defineBenchmark({
  name: "peers",
  title: "jobfence vs pg-boss vs graphile-worker: the same effect on the same Postgres",
  method:
    "per run: TRUNCATE ledger, balances, fences and both job tables; seed the peer's queue with its bulk API; CHECKPOINT; " +
    "wait until no other backend is connected, snapshot pg_stat_database (xact_commit + xact_rollback, observer's own " +
    "transactions excluded, pg_stat_force_next_flush) and pg_current_wal_insert_lsn(); timed part: jobfence from first " +
    "invocation to last return, pg-boss from work() after start(), graphile-worker from its worker pool's creation, to " +
    "every effect in the ledger and every job completed (polled every 2 ms once all handlers ran); stop workers, close " +
    "pools, snapshot again. One warm-up round, then rounds with the order of the systems rotated by one each round.",
  options,
  quick: { jobs: 800, warmupJobs: 200, reps: 3 },
  database: "durable",
  settings: [
    "full_page_writes",
    "wal_level",
    "max_wal_size",
    "checkpoint_timeout",
    "shared_buffers",
    "autovacuum",
  ],
  async setup({ options: o, database, cleanups }) {
    // Install the peers' schemas (not measured).
    const installer = new PgBoss({
      connectionString: database.url,
      max: 2,
      supervise: false,
      schedule: false,
    });
    installer.on("error", (error) => console.error(`  pg-boss (install): ${String(error)}`));
    await installer.start();
    await installer.createQueue(PGBOSS_QUEUE);
    await installer.stop({ graceful: false, close: true });
    await installGraphileWorker({ connectionString: database.url, logger: new Logger(() => () => {}) });
    const observer = await openObserver(database.url);
    cleanups.push(() => observer.close());
    if (!observer.canForceFlush)
      console.warn("  server before PostgreSQL 15: transaction counts are approximate");
    const settings = { concurrency: o.concurrency, pgbossBatch: o.pgbossBatch, gwLocalQueue: o.gwLocalQueue };
    const systems: System[] = [
      jobfence(database.url, "per-record", settings),
      jobfence(database.url, "batch", settings),
      pgBoss(database.url, settings),
      graphileWorker(database.url, settings),
    ];
    return { observer, systems };
  },
  async run({ options: o, table }, { observer, systems }) {
    const results: RunResult[] = [];
    for (let round = 0; round <= o.reps; round++) {
      const warmup = round === 0;
      const jobs = warmup ? Math.min(o.jobs, o.warmupJobs) : o.jobs;
      const order = systems.map((_, i) => at(systems, (i + round) % systems.length));
      for (const [position, system] of order.entries()) {
        results.push(await runOnce(system, observer, { round, position, warmup, jobs, users: o.users }));
      }
    }
    const { summary, ratios } = summarise(systems, results, o.reps);
    table(
      `per system: median (min–max) over ${o.reps} round(s) of ${int(o.jobs)} jobs; concurrency ${o.concurrency}`,
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
    );
    for (const s of summary) console.log(`  ${s.label}: ${s.settings}`);
    console.log(
      "  xact and WAL cover start-up, run and shutdown (background work included); WAL is cluster-wide.",
    );
    const faster = summary.find((s) => s.system === ratios.faster_peer)?.label ?? ratios.faster_peer;
    const row = (label: string, r: Ratio, target: string) => [
      label,
      ratio(r.of_medians),
      showSpread(r.per_round, ratio),
      target,
    ];
    table(
      "ratios (effects/s)",
      ["jobfence mode, over", "ratio of medians", "per round (min–max)", "target"],
      [
        row(
          "per-record, over pg-boss (transactional)",
          ratios.per_record_over_pg_boss,
          `≥ ${TARGET_PER_RECORD}×`,
        ),
        row(`per-record, over the faster peer (${faster})`, ratios.per_record_over_faster_peer, "–"),
        row(`batch, over the faster peer (${faster})`, ratios.batch_over_faster_peer, `≥ ${TARGET_BATCH}×`),
      ],
    );
    return {
      runs: results,
      summary,
      ratios,
      peer_settings: { sqs_batch: SQS_BATCH, poll_seconds: POLL_SECONDS },
      versions: {
        pg_boss: await installedVersion("pg-boss"),
        graphile_worker: await installedVersion("graphile-worker"),
      },
      counters_exact: observer.canForceFlush,
    };
  },
  verdict({ summary, ratios }) {
    const batch = summary.find((s) => s.system === "jobfence-batch");
    const batchNotInEffect =
      batch && batch.xact_per_effect.median > 0.5
        ? `batch mode ran ${batch.xact_per_effect.median.toFixed(2)} xact/effect: batch commit appears not to be in effect`
        : undefined;
    const unverified = summary.filter((s) => !s.all_verified).map((s) => s.label);
    const failures = summary.filter((s) => s.failures > 0).map((s) => `${s.label} ${s.failures}`);
    return {
      targets: [
        {
          name: "jobfence per-record / pg-boss (transactional), effects/s",
          measured: ratios.per_record_over_pg_boss.of_medians,
          bound: "at least",
          target: TARGET_PER_RECORD,
          format: ratio,
        },
        {
          name: `jobfence batch / the faster peer (${ratios.faster_peer}), effects/s`,
          measured: ratios.batch_over_faster_peer.of_medians,
          bound: "at least",
          target: TARGET_BATCH,
          format: ratio,
          ...(batchNotInEffect ? { cause: batchNotInEffect } : {}),
        },
      ],
      notes: [
        `jobfence per-record / the faster peer (${ratios.faster_peer}): ${ratio(ratios.per_record_over_faster_peer.of_medians)}`,
        ...(batchNotInEffect ? [batchNotInEffect] : []),
        ...(unverified.length > 0 ? [`EFFECT CHECK FAILED for ${unverified.join(", ")}`] : []),
        ...(failures.length > 0
          ? [`handler failures (retried by their queues): ${failures.join(", ")}`]
          : []),
      ],
    };
  },
});
