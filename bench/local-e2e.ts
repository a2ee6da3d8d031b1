/**
 * `node bench/local-e2e.ts`: jobs per second through the local stack end to end (SQS emulator →
 * event-source poller → consumer harness → PostgreSQL → delete from the queue), and where the time
 * goes: in SQS calls, in database calls, or in between (the harness's and the SDK's JavaScript).
 *
 * - Database: DATABASE_URL when set (a fresh database is created beside it and dropped at the end),
 *   otherwise an embedded PostgreSQL, `durable` by default as the local stack runs it
 *   (`--durability fast` turns fsync and synchronous_commit off).
 * - The stack's parts, in this process, wired as local/stack.ts wires them: the fauxqs emulator on a
 *   free port (its messages in SQLite in a temporary directory, as the stack keeps them;
 *   `--sqs-memory` for none), the award-points source queue and its backstop (the same attributes
 *   and redrive policy), the queue of each consumer it sends follow-ups to (award-points tells
 *   notify-user; the relay after COMMIT's sends are SQS calls of the split), the consumer from
 *   functions/consumers.ts (its batch size and concurrency)
 *   built by createConsumer with a pool in award-points's role of maxConcurrency + 1 and the local
 *   retry policy, the ops bus sink, and startPoller with the stack's 1 s long poll. Not
 *   startLocalStack itself: it builds its SQS client and pools inside (nothing to time them by) and
 *   starts its pollers at once, so sending would overlap the timed part; the API, the backstop
 *   drain and the cleanup and escalation timers it also runs do nothing while no job fails.
 * - A repetition: with the pollers stopped, N award-points jobs (36-character ids, 1,000 users) are
 *   sent with SendMessageBatch (not timed). Then the clock starts, the pollers start, and the clock
 *   stops when the N-th message has been deleted (counted from DeleteMessageBatch results; the
 *   poller deletes a record only after the harness committed it). Checked afterwards: N more ledger
 *   rows, N "applied" outcomes, and a queue with nothing visible, in flight or delayed.
 * - Time split: every SQS call through the poller's and the harness's client is timed by a middleware
 *   at the initialize step (so serialisation, signing, HTTP and the emulator are inside), every pool
 *   checkout and every query on the pool's connections by wrapping them. Each of the poller's
 *   workers runs receive → handler → delete one after another and a handler runs its records one by
 *   one, so a worker's time is SQS calls + database calls + the rest; the shares are of the workers'
 *   time (workers × wall), clipped to the window. Note: the emulator runs on this event loop, so an
 *   SQS call's time includes the emulator's own work, and any call's time includes waiting for the
 *   loop while other workers' JavaScript runs; the event loop utilisation and process CPU are
 *   printed beside the split to say how busy the loop was.
 * - Repetitions: one warm-up, then `--reps` (default 5; 2 with --quick) measured; medians and
 *   (min–max) are reported.
 *
 * Options: `--jobs N` per repetition (default 2,000; quick 300), `--warmup-jobs N` (default 500;
 * quick 100), `--reps N`, `--quick` (< 20 s in all), `--durability durable|fast` (embedded only),
 * `--sqs-memory` (the emulator keeps messages in memory), `--sqs-thread` (the emulator runs in a
 * worker thread, off the harness's event loop: the stack's emulator writes SQLite synchronously on
 * its loop, which stalls everything else; this shows what that costs). Exits 0 whatever the
 * figures (it is a benchmark); prints a VERDICT line and writes bench/results/local-e2e.json.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import { Logger } from "@aws-lambda-powertools/logger";
import {
  CreateQueueCommand,
  type DeleteMessageBatchCommandOutput,
  GetQueueAttributesCommand,
  type ReceiveMessageCommandOutput,
  SendMessageBatchCommand,
  SetQueueAttributesCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import pg from "pg";
import {
  BACKSTOP_RETENTION_SECONDS,
  CONSUMERS,
  type ConsumerDeployment,
  queueNames,
  resolveDeliveryTimings,
  VISIBILITY_TO_TIMEOUT_RATIO,
} from "../functions/consumers.ts";
import { LOCAL_ACCOUNT, LOCAL_REGION, localEventBridgeClient, localSqsClient } from "../local/aws-clients.ts";
import { startEventBridgeSink } from "../local/eventbridge-sink.ts";
import { type Poller, startPoller } from "../local/poller.ts";
import { startSqsEmulator } from "../local/sqs-emulator.ts";
import { LOCAL_RETRY_POLICY } from "../local/stack-config.ts";
import { createConsumer } from "../shared/consumer.ts";
import { createPool } from "../shared/db/pool.ts";
import { consumerRoleName } from "../shared/db/queries/provision-login.ts";
import { type BenchJob, makeJobs } from "./harness-driver.ts";
import {
  describeEnvironment,
  int,
  ms,
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
    "warmup-jobs": { type: "string" },
    reps: { type: "string" },
    quick: { type: "boolean", default: false },
    durability: { type: "string" },
    "sqs-memory": { type: "boolean", default: false },
    "sqs-thread": { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});

if (argv.help) {
  console.log(
    "usage: node bench/local-e2e.ts [--quick] [--jobs N] [--warmup-jobs N] [--reps N]\n" +
      "                               [--durability durable|fast] [--sqs-memory] [--sqs-thread]\n" +
      "  --sqs-memory  the emulator keeps messages in memory (the stack: SQLite)\n" +
      "  --sqs-thread  the emulator runs in a worker thread (the stack: on its own event loop)\n" +
      "  DATABASE_URL  admin URL of a PostgreSQL to use (a fresh database is created beside it);\n" +
      "                unset: an embedded PostgreSQL is started (durable unless --durability fast)",
  );
  process.exit(0);
}

const QUICK = argv.quick;
const JOBS = positiveInt(argv.jobs, QUICK ? 300 : 2000, "jobs");
const WARMUP_JOBS = positiveInt(argv["warmup-jobs"], QUICK ? 100 : 500, "warmup-jobs");
const REPS = positiveInt(argv.reps, QUICK ? 2 : 5, "reps");
if (argv.durability !== undefined && argv.durability !== "durable" && argv.durability !== "fast") {
  console.error(`--durability must be durable or fast, got ${argv.durability}`);
  process.exit(2);
}
const DURABILITY: "durable" | "fast" = argv.durability === "fast" ? "fast" : "durable";
/** The local stack's defaults (local/stack-config.ts). */
const POLL_WAIT_SECONDS = 1;
const LOCK_TIMEOUT_MS = 2000;
/** A repetition that has not finished after this long failed. */
const REP_TIMEOUT_MS = 120_000 + JOBS * 50;
const SENDERS = 4;

// The functions' EMF metrics are for CloudWatch; the local stack turns them off too (scripts/start.ts).
process.env.POWERTOOLS_METRICS_DISABLED ??= "true";

const DEPLOYMENT: ConsumerDeployment = (() => {
  const found = CONSUMERS.find((c) => c.definition.name === "award-points");
  if (!found) throw new Error("functions/consumers.ts has no award-points consumer");
  return found;
})();

// ---------------------------------------------------------------------------------------------
// Timing of calls

type Kind = "sqs" | "db";

/** One timed call. */
interface Call {
  readonly kind: Kind;
  /** SQS command name, or `query` / `checkout`. */
  readonly name: string;
  readonly start: number;
  readonly end: number;
}

/** Every call made through the instrumented clients, and what the deletes counted. */
class CallLog {
  calls: Call[] = [];
  deleted = 0;
  receives = 0;
  emptyReceives = 0;
  /** Resolved when `deleted` reaches `target`. */
  private waiter: { target: number; resolve: (at: number) => void } | undefined;

  record(kind: Kind, name: string, start: number, end: number): void {
    this.calls.push({ kind, name, start, end });
  }

  countDeleted(count: number, at: number): void {
    this.deleted += count;
    if (this.waiter && this.deleted >= this.waiter.target) {
      this.waiter.resolve(at);
      this.waiter = undefined;
    }
  }

  reset(): void {
    this.calls = [];
    this.deleted = 0;
    this.receives = 0;
    this.emptyReceives = 0;
  }

  /** Resolves with the time the `target`-th deletion completed. */
  whenDeleted(target: number): Promise<number> {
    return new Promise((resolve) => {
      this.waiter = { target, resolve };
    });
  }
}

/** Times every call of `sqs` (initialize step: everything the call does is inside) into `log`. */
function instrumentSqs(sqs: SQSClient, log: CallLog): void {
  sqs.middlewareStack.add(
    (next, context) => async (args) => {
      const start = performance.now();
      const name = String(context.commandName ?? "unknown").replace(/Command$/, "");
      try {
        const result = await next(args);
        const now = performance.now();
        if (name === "DeleteMessageBatch") {
          log.countDeleted((result.output as DeleteMessageBatchCommandOutput).Successful?.length ?? 0, now);
        } else if (name === "ReceiveMessage") {
          log.receives++;
          if (((result.output as ReceiveMessageCommandOutput).Messages ?? []).length === 0)
            log.emptyReceives++;
        }
        return result;
      } finally {
        log.record("sqs", name, start, performance.now());
      }
    },
    { step: "initialize", name: "jobfenceBenchTiming", priority: "high" },
  );
}

type Callback = (...results: unknown[]) => void;
type AnyQuery = (...args: unknown[]) => unknown;

/** Times every checkout of `pool` and every query on its connections into `log`. */
function instrumentPool(pool: pg.Pool, log: CallLog): void {
  pool.on("connect", (client) => {
    const query = client.query.bind(client) as AnyQuery;
    (client as unknown as { query: AnyQuery }).query = (...args: unknown[]) => {
      const start = performance.now();
      const done = () => log.record("db", "query", start, performance.now());
      const last = args.at(-1);
      if (typeof last === "function") {
        args[args.length - 1] = (...results: unknown[]) => {
          done();
          (last as Callback)(...results);
        };
        return query(...args);
      }
      const result = query(...args);
      if (result instanceof Promise) return result.finally(done);
      return result; // a Submittable (cursor): not used by the harness
    };
  });
  const connect = pool.connect.bind(pool) as (callback?: Callback) => unknown;
  (pool as unknown as { connect: (callback?: Callback) => unknown }).connect = (callback?: Callback) => {
    const start = performance.now();
    const done = () => log.record("db", "checkout", start, performance.now());
    if (callback) {
      return connect((...results: unknown[]) => {
        done();
        callback(...results);
      });
    }
    return (connect() as Promise<unknown>).finally(done);
  };
}

/** Sum of the calls' time within [from, to], per kind and name. */
function timeIn(
  calls: readonly Call[],
  from: number,
  to: number,
): Map<string, { ms: number; count: number }> {
  const totals = new Map<string, { ms: number; count: number }>();
  for (const call of calls) {
    const clipped = Math.min(call.end, to) - Math.max(call.start, from);
    if (clipped <= 0) continue;
    for (const key of [call.kind, `${call.kind}:${call.name}`]) {
      const t = totals.get(key) ?? { ms: 0, count: 0 };
      t.ms += clipped;
      t.count += 1;
      totals.set(key, t);
    }
  }
  return totals;
}

/** How long within [from, to] at least one call of `kind` was in flight. */
function coveredBy(calls: readonly Call[], kind: Kind, from: number, to: number): number {
  const spans = calls
    .filter((c) => c.kind === kind && c.end > from && c.start < to)
    .map((c) => [Math.max(c.start, from), Math.min(c.end, to)] as const)
    .sort((a, b) => a[0] - b[0]);
  let covered = 0;
  let [curStart, curEnd] = [Number.NaN, Number.NaN];
  for (const [s, e] of spans) {
    if (Number.isNaN(curStart) || s > curEnd) {
      if (!Number.isNaN(curStart)) covered += curEnd - curStart;
      [curStart, curEnd] = [s, e];
    } else curEnd = Math.max(curEnd, e);
  }
  if (!Number.isNaN(curStart)) covered += curEnd - curStart;
  return covered;
}

/**
 * The emulator as local/sqs-emulator.ts starts it, but in a worker thread of its own, so its work
 * (and its synchronous SQLite writes) does not hold up this event loop.
 */
async function startEmulatorThread(
  dataDir: string | undefined,
): Promise<{ endpoint: string; stop(): Promise<void> }> {
  const code = `
    const { parentPort, workerData } = require("node:worker_threads");
    import(workerData.fauxqs).then(async ({ startFauxqs }) => {
      const server = await startFauxqs({ port: 0, host: "127.0.0.1", logger: false, defaultRegion: workerData.region,
        ...(workerData.dataDir ? { dataDir: workerData.dataDir } : {}) });
      parentPort.on("message", () => server.stop().then(() => parentPort.postMessage({ stopped: true })));
      parentPort.postMessage({ port: server.port });
    }).catch((error) => parentPort.postMessage({ error: String(error) }));`;
  const worker = new Worker(code, {
    eval: true,
    workerData: { fauxqs: import.meta.resolve("fauxqs"), region: LOCAL_REGION, dataDir },
  });
  const port = await new Promise<number>((resolve, reject) => {
    worker.once("message", (m: { port?: number; error?: string }) =>
      m.port ? resolve(m.port) : reject(new Error(`emulator thread: ${m.error}`)),
    );
    worker.once("error", reject);
  });
  return {
    endpoint: `http://127.0.0.1:${port}`,
    async stop() {
      await new Promise((resolve) => {
        worker.once("message", resolve);
        worker.postMessage("stop");
      });
      await worker.terminate();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Queues, as local/stack.ts creates them

async function ensureQueue(
  sqs: SQSClient,
  endpoint: string,
  name: string,
  attributes: Record<string, string>,
): Promise<{ url: string; arn: string }> {
  await sqs.send(new CreateQueueCommand({ QueueName: name }));
  const url = `${endpoint}/${LOCAL_ACCOUNT}/${name}`;
  await sqs.send(new SetQueueAttributesCommand({ QueueUrl: url, Attributes: attributes }));
  const described = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["QueueArn"] }),
  );
  return { url, arn: described.Attributes?.QueueArn as string };
}

async function queueCounts(sqs: SQSClient, url: string): Promise<number> {
  const { Attributes: a = {} } = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: url,
      AttributeNames: [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
      ],
    }),
  );
  return (
    Number(a.ApproximateNumberOfMessages ?? 0) +
    Number(a.ApproximateNumberOfMessagesNotVisible ?? 0) +
    Number(a.ApproximateNumberOfMessagesDelayed ?? 0)
  );
}

/** Sends the jobs' envelopes, ten per SendMessageBatch, from a few senders at once. */
async function sendJobs(sqs: SQSClient, url: string, jobs: readonly BenchJob[]): Promise<void> {
  const batches: BenchJob[][] = [];
  for (let i = 0; i < jobs.length; i += 10) batches.push(jobs.slice(i, i + 10));
  let next = 0;
  await Promise.all(
    Array.from({ length: SENDERS }, async () => {
      for (let b = next++; b < batches.length; b = next++) {
        const batch = at(batches, b);
        const result = await sqs.send(
          new SendMessageBatchCommand({
            QueueUrl: url,
            Entries: batch.map((job, j) => ({
              Id: String(j),
              MessageBody: JSON.stringify({
                job_id: job.jobId,
                tenant_id: job.tenantId,
                payload: { user_id: job.userId, points: job.points },
              }),
            })),
          }),
        );
        if (result.Failed && result.Failed.length > 0)
          throw new Error(`SendMessageBatch failed: ${JSON.stringify(result.Failed)}`);
      }
    }),
  );
}

// ---------------------------------------------------------------------------------------------
// Main

interface RepResult {
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

const cleanups = createCleanups();

async function main(): Promise<void> {
  const started = performance.now();
  const workers = DEPLOYMENT.maxConcurrency;
  console.log(
    `jobfence local end to end: ${int(JOBS)} award-points jobs per repetition, ${REPS} repetition(s) after a ` +
      `${int(WARMUP_JOBS)}-job warm-up; poller ${workers} workers × batches of ${DEPLOYMENT.batchSize}` +
      `${QUICK ? " (--quick)" : ""}`,
  );

  // --- database -------------------------------------------------------------------------------
  const database = await benchDatabase(DURABILITY, cleanups);
  const durability = database.embedded
    ? DURABILITY === "durable"
      ? "durable: fsync, synchronous_commit on"
      : "fast: fsync, synchronous_commit OFF (flattering)"
    : "the server's own settings";
  console.log(`database: ${database.serverKind}; durability ${durability}`);
  const admin = new pg.Client({ connectionString: database.url, application_name: "jobfence-bench-admin" });
  await admin.connect();
  cleanups.push(() => admin.end());
  const environment = await describeEnvironment(admin, database.serverKind, [
    "fsync",
    "synchronous_commit",
    "shared_buffers",
  ]);
  const ledgerRows = async () =>
    at((await admin.query<{ n: number }>("SELECT count(*)::int AS n FROM award_points.ledger")).rows, 0).n;

  // --- SQS ------------------------------------------------------------------------------------
  let sqsDir: string | undefined;
  if (!argv["sqs-memory"]) {
    const dir = await mkdtemp(join(tmpdir(), "jobfence-bench-sqs-"));
    sqsDir = dir;
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
  }
  const emulator = argv["sqs-thread"]
    ? await startEmulatorThread(sqsDir)
    : await startSqsEmulator(sqsDir ? { dataDir: sqsDir } : {});
  cleanups.push(() => emulator.stop());
  console.log(
    `sqs: fauxqs ${argv["sqs-thread"] ? "in a worker thread" : "on this event loop (as the stack runs it)"} at ` +
      `${emulator.endpoint}, ${sqsDir ? "messages in SQLite (as the stack keeps them)" : "messages in memory"}`,
  );
  const setup = localSqsClient(emulator.endpoint); // sends and checks: not timed
  // The redrive count the local stack and the CDK construct use (only maxAttempts of the policy counts).
  const { maxReceiveCount } = resolveDeliveryTimings(DEPLOYMENT, {
    ...LOCAL_RETRY_POLICY,
    maxAttempts: DEPLOYMENT.definition.retry?.maxAttempts ?? LOCAL_RETRY_POLICY.maxAttempts,
  });
  const names = queueNames(DEPLOYMENT);
  const backstop = await ensureQueue(setup, emulator.endpoint, names.backstop, {
    MessageRetentionPeriod: String(BACKSTOP_RETENTION_SECONDS),
  });
  const source = await ensureQueue(setup, emulator.endpoint, names.source, {
    VisibilityTimeout: String(DEPLOYMENT.functionTimeoutSeconds * VISIBILITY_TO_TIMEOUT_RATIO),
    MessageRetentionPeriod: String(DEPLOYMENT.queueRetentionSeconds),
    RedrivePolicy: JSON.stringify({
      deadLetterTargetArn: backstop.arn,
      maxReceiveCount,
    }),
  });
  // Its follow-ups' targets' queues, as the stack gives it (award-points tells notify-user).
  const outboxQueues: Record<string, string> = {};
  for (const target of Object.keys(DEPLOYMENT.definition.sends ?? {})) {
    outboxQueues[target] = (await ensureQueue(setup, emulator.endpoint, target, {})).url;
  }
  const sink = await startEventBridgeSink();
  cleanups.push(() => sink.stop());

  // --- the consumer, as the stack builds it, with its clients timed -----------------------------
  const log = new CallLog();
  const sqs = localSqsClient(emulator.endpoint);
  instrumentSqs(sqs, log);
  const pool = createPool({
    connectionString: database.url,
    role: consumerRoleName("award-points"),
    max: DEPLOYMENT.maxConcurrency + 1,
    lockTimeoutMs: LOCK_TIMEOUT_MS,
    applicationName: "jobfence-local:award-points",
  });
  cleanups.push(() => pool.end());
  instrumentPool(pool, log);
  const outcomes = new Map<string, number>();
  const consumer = createConsumer(DEPLOYMENT.definition, {
    config: {
      databaseUrl: database.url,
      opsBusName: "jobfence-ops-local",
      queueUrl: source.url,
      lockTimeoutMs: LOCK_TIMEOUT_MS,
      functionTimeoutSeconds: DEPLOYMENT.functionTimeoutSeconds,
      queueRetentionSeconds: DEPLOYMENT.queueRetentionSeconds,
      outboxQueues,
    },
    pool,
    sqs,
    eventBridge: localEventBridgeClient(sink.endpoint),
    logger: new Logger({ serviceName: "jobfence-local", logLevel: "SILENT" }),
    retryPolicy: LOCAL_RETRY_POLICY,
    onOutcome: (outcome) => outcomes.set(outcome.status, (outcomes.get(outcome.status) ?? 0) + 1),
  });
  let pollerErrors = 0;
  let firstPollerError: unknown;
  const poll = (): Poller =>
    startPoller({
      source: {
        sqs,
        queueUrl: source.url,
        queueArn: source.arn,
        batchSize: DEPLOYMENT.batchSize,
        waitSeconds: POLL_WAIT_SECONDS,
      },
      handler: consumer,
      functionName: DEPLOYMENT.definition.name,
      concurrency: workers,
      timeoutSeconds: DEPLOYMENT.functionTimeoutSeconds,
      onError: (error) => {
        pollerErrors++;
        firstPollerError ??= error;
      },
    });

  // --- one repetition ---------------------------------------------------------------------------
  const runRep = async (rep: number, count: number): Promise<RepResult> => {
    const jobs = makeJobs(count);
    const ledgerBefore = await ledgerRows();
    const sendStart = performance.now();
    await sendJobs(setup, source.url, jobs);
    const sendMs = performance.now() - sendStart;
    log.reset();
    outcomes.clear();
    const done = log.whenDeleted(count);
    const elu0 = performance.eventLoopUtilization();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const poller = poll();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new Error(`repetition ${rep}: ${log.deleted} of ${count} deleted after ${REP_TIMEOUT_MS} ms`),
          ),
        REP_TIMEOUT_MS,
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
    const left = await queueCounts(setup, source.url);
    const applied = outcomes.get("applied") ?? 0;
    const ok = ledger === count && applied === count && left === 0;
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
      ok,
    };
  };

  const describeRep = (r: RepResult, label: string) =>
    console.log(
      `  ${label.padEnd(8)} ${int(r.jobs)} jobs in ${secs(r.wall_ms)} = ${int(r.jobs_per_s)} jobs/s; workers' time: ` +
        `SQS ${r.sqs_pct.toFixed(1)}%, DB ${r.db_pct.toFixed(1)}%, other ${r.other_pct.toFixed(1)}%; ` +
        `loop ${r.event_loop_utilisation_pct.toFixed(0)}% busy, CPU ${r.process_cpu_pct.toFixed(0)}% (sent in ${secs(r.send_ms)})` +
        (r.ok ? "" : `  CHECK FAILED: ${JSON.stringify(r.checks)}`),
    );

  console.log("");
  describeRep(await runRep(0, WARMUP_JOBS), "warm-up");
  const results: RepResult[] = [];
  for (let rep = 1; rep <= REPS; rep++) {
    const r = await runRep(rep, JOBS);
    results.push(r);
    describeRep(r, `rep ${rep}`);
  }
  if (pollerErrors > 0) console.warn(`poller errors: ${pollerErrors}; first: ${String(firstPollerError)}`);

  // --- report ---------------------------------------------------------------------------------
  const s = (pick: (r: RepResult) => number): Spread => spread(results.map(pick));
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
  const pct = (v: number) => `${v.toFixed(1)}%`;
  console.log(`\nSummary: median (min–max) over ${REPS} repetition(s) of ${int(JOBS)} jobs`);
  console.log(
    table(
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
    ),
  );
  const callNames = [...new Set(results.flatMap((r) => Object.keys(r.by_call)))].sort();
  console.log("\nCalls per repetition (median): count, total worker-ms, mean ms");
  console.log(
    table(
      ["call", "count", "total ms", "mean ms"],
      callNames.map((name) => {
        const count = spread(results.map((r) => r.by_call[name]?.count ?? 0)).median;
        const total = spread(results.map((r) => r.by_call[name]?.ms ?? 0)).median;
        return [name, int(count), int(total), ms(total / count)];
      }),
    ),
  );
  if (summary.event_loop_utilisation_pct.median - summary.process_cpu_pct.median > 30) {
    console.log(
      "\nnote: the event loop was active far longer than the process used CPU: it was blocked, in synchronous " +
        "I/O (the emulator's SQLite writes on this loop: node:sqlite, WAL, an fsync per commit; strace saw ~2 per " +
        "message and ~0.25 ms each on this machine) or waiting for a core on a busy machine. Every call's time above " +
        "includes that; --sqs-thread moves the emulator off the loop, --sqs-memory drops the writes.",
    );
  }
  const failed = results.filter((r) => !r.ok);
  const verdict =
    `${int(summary.jobs_per_s.median)} jobs/s median (${int(summary.jobs_per_s.min)}–${int(summary.jobs_per_s.max)}) ` +
    `over ${REPS} repetition(s) of ${int(JOBS)} jobs through emulator, poller, harness and PostgreSQL ` +
    `(${database.embedded ? `embedded, ${DURABILITY}` : "DATABASE_URL"}; emulator ${argv["sqs-thread"] ? "in a thread" : "on the loop"}, ` +
    `${sqsDir ? "SQLite" : "memory"}); workers' time: SQS calls ` +
    `${pct(summary.sqs_pct.median)}, database ${pct(summary.db_pct.median)}, other ${pct(summary.other_pct.median)}` +
    (failed.length > 0 ? `; CHECKS FAILED in repetition(s) ${failed.map((r) => r.rep).join(", ")}` : "");
  console.log(`\nVERDICT: ${verdict}`);

  const path = await writeResult("local-e2e", {
    benchmark:
      "local end to end: jobs/s through emulator, poller, harness and PostgreSQL, time in SQS vs database",
    options: {
      jobs: JOBS,
      warmup_jobs: WARMUP_JOBS,
      reps: REPS,
      quick: QUICK,
      durability: database.embedded ? DURABILITY : "server",
      sqs_storage: sqsDir ? "sqlite" : "memory",
      sqs_placement: argv["sqs-thread"] ? "worker thread" : "event loop (as the stack)",
      poller_workers: workers,
      batch_size: DEPLOYMENT.batchSize,
      poll_wait_seconds: POLL_WAIT_SECONDS,
      commit_mode: DEPLOYMENT.definition.commitMode ?? "per-record",
    },
    method:
      "per repetition: send N jobs with SendMessageBatch (untimed, pollers stopped); start the clock and the pollers; stop it " +
      "when the N-th message is deleted (DeleteMessageBatch results); check ledger rows, applied outcomes and an empty queue. " +
      "SQS calls timed by an initialize-step middleware on the poller's and harness's client; database checkouts and queries by " +
      "wrapping the pool; shares = summed call time clipped to the window / (workers × wall); covered = union of calls / wall",
    environment,
    repetitions: results,
    summary,
    verdict,
    total_runtime_ms: Math.round(performance.now() - started),
  });
  console.log(`wrote ${path} (total ${secs(performance.now() - started)})`);
}

await runBenchmark(main, cleanups);
