/**
 * `npm run bench -- --only local-e2e`: jobs per second through the local stack end to end (SQS
 * emulator → event-source poller → consumer harness → PostgreSQL → delete from the queue), and
 * where the time goes: in SQS calls, in database calls, or in between (the harness's and the SDK's
 * JavaScript).
 *
 * - Database: DATABASE_URL when set (a fresh database is created beside it and dropped at the end),
 *   otherwise an embedded PostgreSQL, `durable` by default as the local stack runs it
 *   (`--durability fast` turns fsync and synchronous_commit off).
 * - The stack's parts, in this process, wired as local/stack.ts wires them (bench/local-e2e/stack.ts):
 *   the fauxqs emulator on a free port (its messages in SQLite in a temporary directory, as the
 *   stack keeps them; `--sqs-memory` for none; `--sqs-thread` runs it in a worker thread, off the
 *   harness's event loop: the stack's emulator writes SQLite synchronously on its loop, which
 *   stalls everything else, and this shows what that costs), the award-points source queue and its
 *   backstop (the same attributes and redrive policy), the queue of each consumer it sends
 *   follow-ups to (award-points tells notify-user; the relay after COMMIT's sends are SQS calls of
 *   the split), the consumer from functions/consumers.ts (its batch size and concurrency) built by
 *   createConsumer with a pool in award-points's role of maxConcurrency + 1 and the local retry
 *   policy, the ops bus sink, and startPoller with the stack's 1 s long poll. Not startLocalStack
 *   itself: it builds its SQS client and pools inside (nothing to time them by) and starts its
 *   pollers at once, so sending would overlap the timed part; the API, the backstop drain and the
 *   cleanup and escalation timers it also runs do nothing while no job fails.
 * - A repetition (bench/local-e2e/repetition.ts): with the pollers stopped, N award-points jobs
 *   (36-character ids, 1,000 users) are sent with SendMessageBatch (not timed). Then the clock
 *   starts, the pollers start, and the clock stops when the N-th message has been deleted (counted
 *   from DeleteMessageBatch results; the poller deletes a record only after the harness committed
 *   it). Checked afterwards: N more ledger rows, N "applied" outcomes, and a queue with nothing
 *   visible, in flight or delayed. That every repetition passes its checks is the one target.
 * - Time split (bench/local-e2e/timing.ts): every SQS call through the poller's and the harness's
 *   client is timed by a middleware at the initialize step (so serialisation, signing, HTTP and the
 *   emulator are inside), every pool checkout and every query on the pool's connections by
 *   wrapping them. Each of the poller's workers runs receive → handler → delete one after another
 *   and a handler runs its records one by one, so a worker's time is SQS calls + database calls +
 *   the rest; the shares are of the workers' time (workers × wall), clipped to the window. Note:
 *   the emulator runs on this event loop, so an SQS call's time includes the emulator's own work,
 *   and any call's time includes waiting for the loop while other workers' JavaScript runs; the
 *   event loop utilisation and process CPU are printed beside the split to say how busy the loop
 *   was.
 * - Repetitions: one warm-up of `--warmup-jobs`, then `--reps` of `--jobs` measured; medians and
 *   (min–max) are reported.
 */
import pg from "pg";
import { z } from "zod";
import { CONSUMERS, type ConsumerDeployment } from "../functions/consumers.ts";
import { defineBenchmark } from "./lib/define.ts";
import { int, ms, type Spread, secs, showSpread, spread } from "./lib/report.ts";
import { at } from "./lib/support.ts";
import { describeRep, type RepResult, runRep } from "./local-e2e/repetition.ts";
import { POLL_WAIT_SECONDS, startBenchStack } from "./local-e2e/stack.ts";

const options = z.object({
  jobs: z.coerce.number().int().positive().default(2000).describe("jobs per measured repetition"),
  warmupJobs: z.coerce.number().int().positive().default(500).describe("jobs of the warm-up repetition"),
  reps: z.coerce.number().int().positive().default(5).describe("measured repetitions after the warm-up"),
  sqsMemory: z.boolean().default(false).describe("the emulator keeps messages in memory (the stack: SQLite)"),
  sqsThread: z
    .boolean()
    .default(false)
    .describe("the emulator runs in a worker thread (the stack: on its own event loop)"),
});

// The functions' EMF metrics are for CloudWatch; the local stack turns them off too (scripts/start.ts).
process.env.POWERTOOLS_METRICS_DISABLED ??= "true";

const DEPLOYMENT: ConsumerDeployment = (() => {
  const found = CONSUMERS.find((c) => c.definition.name === "award-points");
  if (!found) throw new Error("functions/consumers.ts has no award-points consumer");
  return found;
})();

const pct = (v: number) => `${v.toFixed(1)}%`;

await defineBenchmark({
  name: "local-e2e",
  title: "local end to end: jobs/s through emulator, poller, harness and PostgreSQL, time in SQS vs database",
  method:
    "per repetition: send N jobs with SendMessageBatch (untimed, pollers stopped); start the clock and the pollers; stop it " +
    "when the N-th message is deleted (DeleteMessageBatch results); check ledger rows, applied outcomes and an empty queue. " +
    "SQS calls timed by an initialize-step middleware on the poller's and harness's client; database checkouts and queries by " +
    "wrapping the pool; shares = summed call time clipped to the window / (workers × wall); covered = union of calls / wall",
  options,
  quick: { jobs: 300, warmupJobs: 100, reps: 2 },
  database: "durable",
  settings: ["shared_buffers"],
  async setup({ options: o, database, cleanups }) {
    console.log(
      `poller ${DEPLOYMENT.maxConcurrency} workers × batches of ${DEPLOYMENT.batchSize}; database ${database.serverKind}`,
    );
    const admin = new pg.Client({ connectionString: database.url, application_name: "jobfence-bench-admin" });
    await admin.connect();
    cleanups.push(() => admin.end());
    const ledgerRows = async () =>
      at((await admin.query<{ n: number }>("SELECT count(*)::int AS n FROM award_points.ledger")).rows, 0).n;
    const stack = await startBenchStack(DEPLOYMENT, database.url, o, cleanups);
    return { stack, ledgerRows };
  },
  async run({ options: o, table }, { stack, ledgerRows }) {
    const workers = DEPLOYMENT.maxConcurrency;
    const setting = { stack, workers, ledgerRows, timeoutMs: 120_000 + o.jobs * 50 };
    console.log("");
    describeRep(await runRep(setting, 0, o.warmupJobs), "warm-up");
    const repetitions: RepResult[] = [];
    for (let rep = 1; rep <= o.reps; rep++) {
      const r = await runRep(setting, rep, o.jobs);
      repetitions.push(r);
      describeRep(r, `rep ${rep}`);
    }
    const s = (pick: (r: RepResult) => number): Spread => spread(repetitions.map(pick));
    const summary = {
      jobs_per_s: s((r) => r.jobs_per_s),
      wall_ms: s((r) => r.wall_ms),
      sqs_pct: s((r) => r.sqs_pct),
      db_pct: s((r) => r.db_pct),
      other_pct: s((r) => r.other_pct),
      sqs_covered_pct: s((r) => r.sqs_covered_pct),
      db_covered_pct: s((r) => r.db_covered_pct),
      per_job_sqs_ms: s((r) => r.per_job_ms.sqs),
      per_job_db_ms: s((r) => r.per_job_ms.db),
      per_job_other_ms: s((r) => r.per_job_ms.other),
      event_loop_utilisation_pct: s((r) => r.event_loop_utilisation_pct),
      process_cpu_pct: s((r) => r.process_cpu_pct),
    };
    table(
      `summary: median (min–max) over ${o.reps} repetition(s) of ${int(o.jobs)} jobs`,
      ["figure", "value"],
      [
        ["jobs/s", showSpread(summary.jobs_per_s, int)],
        ["wall time", showSpread(summary.wall_ms, (v) => secs(v))],
        [`workers' time in SQS calls (${workers} workers × wall)`, showSpread(summary.sqs_pct, pct)],
        ["workers' time in database calls", showSpread(summary.db_pct, pct)],
        ["workers' time in neither (harness, SDK, pg JavaScript)", showSpread(summary.other_pct, pct)],
        ["wall time with an SQS call in flight", showSpread(summary.sqs_covered_pct, pct)],
        ["wall time with a database call in flight", showSpread(summary.db_covered_pct, pct)],
        [
          "per job: SQS / DB / other, worker-ms",
          `${ms(summary.per_job_sqs_ms.median)} / ${ms(summary.per_job_db_ms.median)} / ${ms(summary.per_job_other_ms.median)}`,
        ],
        ["event loop utilisation", showSpread(summary.event_loop_utilisation_pct, pct)],
        ["process CPU (of one core)", showSpread(summary.process_cpu_pct, pct)],
      ],
    );
    const callNames = [...new Set(repetitions.flatMap((r) => Object.keys(r.by_call)))].sort();
    table(
      "calls per repetition (median): count, total worker-ms, mean ms",
      ["call", "count", "total ms", "mean ms"],
      callNames.map((name) => {
        const count = spread(repetitions.map((r) => r.by_call[name]?.count ?? 0)).median;
        const total = spread(repetitions.map((r) => r.by_call[name]?.ms ?? 0)).median;
        return [name, int(count), int(total), ms(total / count)];
      }),
    );
    return {
      repetitions,
      summary,
      stack: {
        sqs_storage: o.sqsMemory ? "memory" : "sqlite",
        sqs_placement: o.sqsThread ? "worker thread" : "event loop (as the stack)",
        poller_workers: workers,
        batch_size: DEPLOYMENT.batchSize,
        poll_wait_seconds: POLL_WAIT_SECONDS,
        commit_mode: DEPLOYMENT.definition.commitMode ?? "per-record",
      },
      poller_errors: {
        count: stack.pollerErrors.count,
        first: stack.pollerErrors.first ? String(stack.pollerErrors.first) : null,
      },
    };
  },
  verdict({ repetitions, summary, stack, poller_errors }, { options: o }) {
    const failed = repetitions.filter((r) => !r.ok);
    const notes = [
      `${int(summary.jobs_per_s.median)} jobs/s median (${int(summary.jobs_per_s.min)}–${int(summary.jobs_per_s.max)}) ` +
        `over ${o.reps} repetition(s) of ${int(o.jobs)} jobs through emulator, poller, harness and PostgreSQL ` +
        `(emulator: ${stack.sqs_placement}, ${stack.sqs_storage}); workers' time: SQS calls ` +
        `${pct(summary.sqs_pct.median)}, database ${pct(summary.db_pct.median)}, other ${pct(summary.other_pct.median)}`,
    ];
    if (summary.event_loop_utilisation_pct.median - summary.process_cpu_pct.median > 30) {
      notes.push(
        "the event loop was active far longer than the process used CPU: it was blocked, in synchronous I/O (the " +
          "emulator's SQLite writes on this loop: node:sqlite, WAL, an fsync per commit; strace saw ~2 per message and " +
          "~0.25 ms each on this machine) or waiting for a core on a busy machine. Every call's time above includes " +
          "that; --sqs-thread moves the emulator off the loop, --sqs-memory drops the writes.",
      );
    }
    if (poller_errors.count > 0)
      notes.push(`poller errors: ${poller_errors.count}; first: ${poller_errors.first}`);
    return {
      targets: [
        {
          name: "repetitions failing their checks (ledger rows, applied outcomes, empty queue)",
          measured: failed.length,
          bound: "at most",
          target: 0,
          format: (v) => String(v),
          ...(failed.length > 0
            ? {
                cause: failed
                  .map((r) => `repetition ${r.rep}: ${JSON.stringify(r.checks)} of ${r.jobs}`)
                  .join("; "),
              }
            : {}),
        },
      ],
      notes,
    };
  },
});
