/**
 * Reliability 3: database faults under load. A consumer process (the real factory behind the local
 * stack's poller, in a child process as Lambda runs it in a container, started again whenever it
 * dies) works through a queue of award-points jobs while the database misbehaves:
 *
 * - its backends are terminated mid-transaction (pg_terminate_backend);
 * - a dedicated PostgreSQL is restarted under it: by a crash (immediate shutdown, then recovery
 *   from the WAL) and, in the reliability tier, cleanly as well;
 * - its pool has fewer connections than invocations want, with a short acquire timeout;
 * - its statements outlast the statement timeout.
 *
 * After the queue has drained, every job must have at most one effect, and be either applied once
 * (ledger entry and fence, no pending dead letter) or not applied with exactly one pending dead
 * letter. Nothing may be lost, nothing doubled; balances must equal the applied jobs' points.
 *
 * Two more cases drive the handler directly through the TCP proxy of bench/lib/latency-proxy.ts,
 * which loses a COMMIT's acknowledgement (the commit happened, the consumer cannot know), and two
 * tests pin product bugs this file found (see their comments).
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, type ExpectStatic, it } from "vitest";
import { startLatencyProxy, targetOf } from "../../bench/lib/latency-proxy.ts";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { deploymentMigrationSets } from "../../functions/migrate/sets.ts";
import { freePort, type RunningPostgres, startEmbeddedPostgres } from "../../local/postgres.ts";
import { runMigrations } from "../../shared/db/migrate.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import type { RetryPolicy } from "../../shared/retry/policy.ts";
import {
  type ConsumerTestBed,
  consumerTestBed,
  effectsOf,
  invoke,
  sqsRecord,
} from "../support/consumer-harness.ts";
import { messagesIn, sendBatch } from "../support/sqs.ts";
import { byTier, TEST_TIER } from "../support/tier.ts";
import type { ConsumerProcessConfig } from "./support/consumer-process.ts";
import { type SupervisedConsumer, superviseConsumer } from "./support/consumer-supervisor.ts";
import { type FaultWorkOptions, firstCleanAttempt } from "./support/fault-work.ts";
import { reportFigures, runSeed, seededRandom, tally } from "./support/figures.ts";
import { type JobFate, jobFates, judge, type Verdict } from "./support/job-fates.ts";
import { envelopeOf, type LoadJob, loadJobs, sleep, waitUntil } from "./support/load.ts";

/** Seconds between attempts, so a run sees several retries and exhaustion within seconds. */
const RETRY: RetryPolicy = Object.freeze({ maxAttempts: 5, baseSeconds: 1, capSeconds: 1 });
const CONSUMER = "award-points";
/** The queue's own visibility timeout: how soon a crashed process's messages come back. */
const VISIBILITY_SECONDS = 2;
const SEED = runSeed();
const random = seededRandom(SEED);

let bed: ConsumerTestBed;
beforeAll(async () => {
  bed = await consumerTestBed();
});
afterAll(async () => {
  await bed?.close();
});

async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  client.on("error", () => {}); // a restart may break it between queries; the next probe reconnects
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

/** Jobs with a fence or a pending dead letter: nothing more will happen to them. */
async function settledCount(url: string, jobIds: readonly string[]): Promise<number> {
  return withClient(url, async (c) => {
    const { rows } = await c.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM unnest($1::text[]) AS j(job_id)
        WHERE EXISTS (SELECT 1 FROM core.processed_jobs f WHERE f.job_id = j.job_id AND f.consumer_id = core.consumer_id($2))
           OR EXISTS (SELECT 1 FROM core.dead_letters d
                       WHERE d.job_id = j.job_id AND d.consumer = $2 AND d.status = 'pending_review')`,
      [jobIds, CONSUMER],
    );
    return rows[0]?.n ?? 0;
  });
}

/** What the fault injector is told while it runs. */
interface InjectorContext {
  /** Jobs settled so far. */
  settled(): Promise<number>;
  /** True once the run has settled: the injector must return. */
  finished(): boolean;
}

interface FaultRunOptions {
  readonly scenario: string;
  readonly jobs: number;
  /** The database the consumer uses and the checks read. */
  readonly databaseUrl: string;
  readonly pool: Omit<ConsumerProcessConfig["pool"], "applicationName">;
  readonly work: FaultWorkOptions;
  readonly concurrency: number;
  /** @default RETRY */
  readonly retry?: RetryPolicy;
  /** The queue's visibility timeout. @default VISIBILITY_SECONDS */
  readonly visibilitySeconds?: number;
  /** Injects the fault while the consumer works; returns what it injected. */
  readonly inject: (run: InjectorContext) => Promise<Record<string, number>>;
  readonly timeoutMs: number;
}

interface FaultRunResult {
  readonly jobs: LoadJob[];
  readonly fates: JobFate[];
  readonly verdict: Verdict;
  readonly consumer: SupervisedConsumer;
  readonly faults: Record<string, number>;
  readonly durationMs: number;
  /** Sum of balances of the run's tenant, and the points of its applied jobs. */
  readonly balance: { readonly total: number; readonly appliedPoints: number };
}

/** Sends the jobs, runs the consumer under the fault until the queue drains, and reads the outcome. */
async function faultRun(o: FaultRunOptions): Promise<FaultRunResult> {
  const queue = await bed.queue(o.scenario, {
    VisibilityTimeout: String(o.visibilitySeconds ?? VISIBILITY_SECONDS),
  });
  const jobs = loadJobs(o.scenario, o.jobs);
  const jobIds = jobs.map((j) => j.jobId);
  await sendBatch(bed.sqs, queue.url, jobs.map(envelopeOf));

  const consumer = superviseConsumer({
    databaseUrl: o.databaseUrl,
    sqsEndpoint: bed.emulator.endpoint,
    eventBridgeEndpoint: bed.sink.endpoint,
    queueUrl: queue.url,
    queueArn: queue.arn,
    pool: { ...o.pool, applicationName: `jf-rel-${o.scenario}` },
    retryPolicy: o.retry ?? RETRY,
    work: o.work,
    concurrency: o.concurrency,
    batchSize: 10,
  });
  const started = Date.now();
  let finished = false;
  let faults: Record<string, number> = {};
  try {
    await consumer.ready();
    const injecting = o.inject({
      settled: () => settledCount(o.databaseUrl, jobIds),
      finished: () => finished,
    });
    try {
      await waitUntil(
        `every ${o.scenario} job applied or dead-lettered, and its queue empty`,
        async () => ({
          settled: await settledCount(o.databaseUrl, jobIds),
          queued: messagesIn(bed.emulator, o.scenario),
          crashes: consumer.crashes.length,
        }),
        (v) => v.settled === jobs.length && v.queued === 0,
        o.timeoutMs,
      );
    } finally {
      finished = true;
      faults = await injecting;
    }
  } finally {
    finished = true;
    await consumer.stop();
  }
  const durationMs = Date.now() - started;
  const fates = await withClient(o.databaseUrl, (c) => jobFates(c, CONSUMER, jobIds));
  const applied = new Set(fates.filter((f) => f.ledger > 0).map((f) => f.job_id));
  const appliedPoints = jobs.filter((j) => applied.has(j.jobId)).reduce((sum, j) => sum + j.points, 0);
  const total = await withClient(o.databaseUrl, async (c) => {
    const { rows } = await c.query<{ total: string | null }>(
      "SELECT sum(balance)::text AS total FROM award_points.balances WHERE tenant_id = $1",
      [`t-${o.scenario}`],
    );
    return Number(rows[0]?.total ?? 0);
  });
  return {
    jobs,
    fates,
    verdict: judge(fates),
    consumer,
    faults,
    durationMs,
    balance: { total, appliedPoints },
  };
}

/** The figures every database-fault scenario reports. */
function figuresOf(result: FaultRunResult, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const { verdict, consumer } = result;
  const crashReasons: Record<string, number> = {};
  for (const crash of consumer.crashes) tally(crashReasons, crash.reason.slice(0, 100));
  return {
    seed: SEED,
    jobs: verdict.jobs,
    durationMs: result.durationMs,
    faultsInjected: result.faults,
    deliveries: consumer.tally.deliveries,
    redeliveries: consumer.tally.redeliveries,
    outcomes: consumer.tally.byStatus,
    failures: consumer.tally.errors,
    pollerErrors: consumer.tally.pollerErrors,
    consumerProcessCrashes: consumer.crashes.length,
    crashReasons,
    applied: verdict.applied,
    deadLettered: verdict.deadLettered,
    deadLetterKinds: verdict.deadLetterKinds,
    doubles: verdict.doubles,
    lost: verdict.lost,
    ...extra,
  };
}

/** The invariant of the issue, on every job of the run. */
function expectInvariant(expect: ExpectStatic, result: FaultRunResult): void {
  const { verdict } = result;
  expect(verdict.broken, "jobs neither applied once nor dead-lettered once").toEqual([]);
  expect(verdict.doubles).toBe(0);
  expect(verdict.lost).toBe(0);
  expect(verdict.applied + verdict.deadLettered).toBe(result.jobs.length);
  expect(Math.max(...result.fates.map((f) => f.ledger))).toBeLessThanOrEqual(1);
  expect(result.balance.total).toBe(result.balance.appliedPoints);
}

// Bounded, the scenarios run side by side: they mostly wait (retry delays, visibility timeouts,
// restarts), and each has its own queue, tenant and connections. In the reliability tier, one after another, so
// each one's figures are its own.
const scenarios = TEST_TIER === "reliability" ? describe : describe.concurrent;

scenarios("reliability: database faults under load", () => {
  it("backends terminated mid-transaction: retried, never doubled, never lost", async ({ expect }) => {
    const scenario = "db-terminate";
    const jobs = byTier({ everyday: 60, full: 150, reliability: 1500 });
    const kills = byTier({ everyday: 2, full: 3, reliability: 30 });
    const result = await faultRun({
      scenario,
      jobs,
      databaseUrl: bed.db.url,
      pool: { max: 5, connectionTimeoutMs: 2000 },
      work: { holdMs: 10 },
      concurrency: 4,
      timeoutMs: byTier({ everyday: 60_000, reliability: 600_000 }),
      inject: async ({ settled, finished }) => {
        const killed: Record<string, number> = {};
        await withClient(bed.db.url, async (admin) => {
          // Spread over the first two thirds of the run (kill k once k/(kills+2) of the jobs have
          // settled), so the last one still finds work in progress.
          for (let k = 1; k <= kills && !finished(); k++) {
            while (!finished() && (await settled()) < (k / (kills + 2)) * jobs) await sleep(50);
            while (!finished()) {
              // Only sessions inside a transaction: the fence, the work or a dead-letter write.
              const { rows } = await admin.query<{ pid: number; query: string }>(
                `SELECT pid, query FROM pg_stat_activity
                  WHERE datname = current_database() AND application_name = $1 AND xact_start IS NOT NULL`,
                [`jf-rel-${scenario}`],
              );
              const victim = rows[Math.floor(random() * rows.length)];
              if (victim) {
                const { rows: done } = await admin.query<{ ok: boolean }>(
                  "SELECT pg_terminate_backend($1) AS ok",
                  [victim.pid],
                );
                if (done[0]?.ok) {
                  tally(killed, `during ${victim.query.trim().split(/\s+/).slice(0, 3).join(" ")}`);
                  break;
                }
              }
              await sleep(5);
            }
          }
        });
        return killed;
      },
    });
    const injected = Object.values(result.faults).reduce((a, b) => a + b, 0);
    await reportFigures(scenario, figuresOf(result, { backendsTerminated: injected }));
    expectInvariant(expect, result);
    expect(injected).toBe(kills);
    expect(result.consumer.tally.deliveries).toBeGreaterThan(result.jobs.length);
  }, 900_000);

  it("PostgreSQL restarted under load, by a crash with recovery (in the reliability tier, cleanly too): nothing lost or doubled", async ({
    expect,
  }) => {
    const scenario = "db-restart";
    const parent = await mkdtemp(join(tmpdir(), "jobfence-rel-pg-"));
    const dataDir = join(parent, "data");
    const port = await freePort();
    const log: string[] = [];
    const start = () => startEmbeddedPostgres({ dataDir, port, log: (line) => log.push(line) });
    let server: RunningPostgres | undefined = await start();
    try {
      await runMigrations({ connectionString: server.url, sets: deploymentMigrationSets() });
      const url = server.url;
      /** Restarts at these shares of settled jobs, alternating a crash and a clean stop. */
      const plan = byTier({ everyday: [0.3], reliability: [0.1, 0.2, 0.35, 0.5, 0.65, 0.8] });
      const jobs = byTier({ everyday: 50, full: 100, reliability: 1500 });
      const result = await faultRun({
        scenario,
        jobs,
        databaseUrl: url,
        pool: { max: 5, connectionTimeoutMs: 2000 },
        work: { holdMs: 5 },
        concurrency: 4,
        timeoutMs: byTier({ everyday: 90_000, reliability: 600_000 }),
        inject: async ({ settled, finished }) => {
          const done: Record<string, number> = {};
          for (const [i, share] of plan.entries()) {
            while (!finished()) {
              const n = await settled().catch(() => 0);
              if (n >= share * jobs) break;
              await sleep(100);
            }
            if (finished()) break;
            const current = server as RunningPostgres;
            server = undefined;
            if (i % 2 === 1) {
              // Fast shutdown: open transactions are rolled back, a checkpoint is written.
              await current.stop();
              tally(done, "clean restart");
            } else {
              // Immediate shutdown right behind the fast one's SIGINT: no checkpoint, so the next
              // start runs crash recovery from the WAL.
              const pid = Number((await readFile(join(dataDir, "postmaster.pid"), "utf8")).split("\n")[0]);
              const stopping = current.stop();
              process.kill(pid, "SIGQUIT");
              await stopping;
              tally(done, "crash restart");
            }
            await sleep(500);
            server = await start();
          }
          return done;
        },
      });
      const recoveries = log.filter((l) => /automatic recovery in progress/.test(l)).length;
      await reportFigures(scenario, figuresOf(result, { crashRecoveries: recoveries }));
      expectInvariant(expect, result);
      const crashes = Math.ceil(plan.length / 2);
      expect(result.faults).toEqual({
        "crash restart": crashes,
        ...(plan.length > 1 ? { "clean restart": plan.length - crashes } : {}),
      });
      expect(recoveries).toBe(crashes);
    } finally {
      await server?.stop();
      await rm(parent, { recursive: true, force: true });
    }
  }, 900_000);

  it("pool exhaustion: more invocations than connections, acquisition timing out, converges", async ({
    expect,
  }) => {
    const scenario = "db-pool-exhaustion";
    const result = await faultRun({
      scenario,
      jobs: byTier({ everyday: 40, full: 100, reliability: 600 }),
      databaseUrl: bed.db.url,
      pool: { max: 1, connectionTimeoutMs: 60 },
      work: { holdMs: 20 },
      concurrency: 4,
      timeoutMs: byTier({ everyday: 60_000, reliability: 600_000 }),
      inject: async () => ({}),
    });
    const timeouts = Object.entries(result.consumer.tally.errors)
      .filter(([key]) => /timeout exceeded when trying to connect/.test(key))
      .reduce((sum, [, n]) => sum + n, 0);
    await reportFigures(scenario, figuresOf(result, { poolAcquireTimeouts: timeouts }));
    expectInvariant(expect, result);
    expect(timeouts).toBeGreaterThan(0);
    expect(result.consumer.tally.byStatus.retry ?? 0).toBeGreaterThan(0);
  }, 900_000);

  it("statement timeouts: cancelled attempts retry; a job that always times out ends as one exhausted dead letter", async ({
    expect,
  }) => {
    const scenario = "db-statement-timeout";
    const jobs = byTier({ everyday: 40, full: 100, reliability: 600 });
    const alwaysSlow = Array.from(
      { length: byTier({ everyday: 3, reliability: 12 }) },
      (_, i) => `${scenario}-${i * 7}`,
    );
    // The timeout is far above what a healthy statement takes even on a loaded machine, so only
    // the stalls (well past it) are cancelled and every job's fate can be predicted.
    const work: FaultWorkOptions = { stall: { seconds: 0.8, percent: 30, always: alwaysSlow } };
    // Three attempts: enough to see retries cure most jobs, and exhaustion comes two seconds in.
    const retry: RetryPolicy = { ...RETRY, maxAttempts: 3 };
    const result = await faultRun({
      scenario,
      jobs,
      databaseUrl: bed.db.url,
      pool: { max: 5, statementTimeoutMs: 300 },
      work,
      retry,
      // Nothing here crashes: a long visibility timeout keeps attempt numbers exactly as predicted.
      visibilitySeconds: 30,
      concurrency: 4,
      timeoutMs: byTier({ everyday: 60_000, reliability: 600_000 }),
      inject: async () => ({}),
    });
    const cancelled = result.consumer.tally.errors["57014"] ?? 0;
    await reportFigures(scenario, figuresOf(result, { statementsCancelled: cancelled }));
    expectInvariant(expect, result);

    // The fate of every job is predictable from which of its attempts stall.
    const expected = result.jobs.map((job) => {
      const clean = firstCleanAttempt(work, job.jobId, retry.maxAttempts);
      return { job_id: job.jobId, applied: clean !== undefined };
    });
    expect(result.fates.map((f) => ({ job_id: f.job_id, applied: f.ledger === 1 }))).toEqual(
      expected.sort((a, b) => (a.job_id < b.job_id ? -1 : 1)),
    );
    const exhausted = await bed.db.withClient(async (c) => {
      const { rows } = await c.query<{ job_id: string; attempts: number; message: string }>(
        `SELECT job_id, attempts, last_error->>'message' AS message FROM core.dead_letters
          WHERE consumer = $1 AND starts_with(job_id, $2) ORDER BY job_id`,
        [CONSUMER, `${scenario}-`],
      );
      return rows;
    });
    expect(exhausted.map((r) => r.job_id).sort()).toEqual(
      expected
        .filter((e) => !e.applied)
        .map((e) => e.job_id)
        .sort(),
    );
    for (const row of exhausted) {
      expect(row.attempts).toBe(retry.maxAttempts);
      expect(row.message).toMatch(/statement timeout/);
    }
    expect(cancelled).toBeGreaterThanOrEqual(alwaysSlow.length * retry.maxAttempts);
  }, 900_000);

  /**
   * award-points on a pool that reaches the database through {@link startLatencyProxy}, with no
   * latency added, armed to lose COMMIT acknowledgements when a test asks. The pool
   * listens for its clients' 'error' events: without that, the lost connection would crash this
   * test process (the product bug pinned below), and what is under test here is the harness's
   * handling of an ambiguous COMMIT, not that.
   */
  async function lostAckConsumer(retry: RetryPolicy) {
    const proxy = await startLatencyProxy({ target: targetOf(bed.db.url), oneWayDelayMs: 0 });
    const pool = createPool({
      connectionString: proxy.url(bed.db.url),
      role: consumerRoleName("award-points"),
      max: 2,
    });
    pool.on("connect", (client) => client.on("error", () => {}));
    const outcomes: Record<string, number> = {};
    const handler = bed.consumer(awardPointsConsumer, {
      pool,
      retryPolicy: retry,
      onOutcome: (outcome) =>
        tally(
          outcomes,
          outcome.status === "dead-lettered" ? `dead-lettered:${outcome.kind}` : outcome.status,
        ),
    });
    return { proxy, handler, outcomes };
  }

  it("a COMMIT whose acknowledgement is lost is retried, and the retry finds the fence: applied once", async ({
    expect,
  }) => {
    const { proxy, handler, outcomes } = await lostAckConsumer(RETRY);
    try {
      const [job] = loadJobs("db-lost-ack", 1) as [LoadJob];
      const record = (attempt: number) =>
        sqsRecord(envelopeOf(job), { messageId: job.jobId, receiveCount: attempt });
      proxy.loseNextCommitAcks(1);
      expect(await invoke(handler, [record(1)])).toEqual([job.jobId]);
      expect(proxy.lostCommitAcks()).toBe(1);
      // Committed, though the consumer could not know: the record stays in the queue.
      expect(await effectsOf(bed.db, job.jobId)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
      expect(await invoke(handler, [record(2)])).toEqual([]);
      expect(outcomes).toEqual({ retry: 1, duplicate: 1 });
      expect(await effectsOf(bed.db, job.jobId)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    } finally {
      await proxy.stop();
    }
  });

  // Found here: on the last attempt a COMMIT whose acknowledgement was lost counted as a transient
  // failure with no attempt left, so the job, which did commit, also got a pending 'exhausted' dead
  // letter: applied AND dead-lettered. A dead letter of any kind but poison is now written only
  // when the job has no fence (shared/db/queries/insert-dead-letter.ts).
  it("a COMMIT acknowledgement lost on the last attempt: applied once, and no dead letter", async ({
    expect,
  }) => {
    // One attempt in all: the first delivery's failure is its last.
    const { proxy, handler } = await lostAckConsumer({ ...RETRY, maxAttempts: 1 });
    try {
      const [job] = loadJobs("db-lost-ack-last", 1) as [LoadJob];
      proxy.loseNextCommitAcks(1);
      await invoke(handler, [sqsRecord(envelopeOf(job), { messageId: job.jobId })]);
      expect(proxy.lostCommitAcks()).toBe(1);
      expect(await effectsOf(bed.db, job.jobId)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    } finally {
      await proxy.stop();
    }
  });

  // Found here: a pooled client whose backend died while it was checked out emitted 'error' with no
  // listener (pg-pool listens only while a client is idle), so the process died with an uncaught
  // exception. createPool now listens on every client (shared/db/pool.ts).
  it("a consumer process survives its backend being terminated mid-transaction", async ({ expect }) => {
    const scenario = "db-terminate-survive";
    const queue = await bed.queue(scenario, { VisibilityTimeout: "30" });
    const [job] = loadJobs(scenario, 1) as [LoadJob];
    await sendBatch(bed.sqs, queue.url, [envelopeOf(job)]);
    const consumer = superviseConsumer({
      databaseUrl: bed.db.url,
      sqsEndpoint: bed.emulator.endpoint,
      eventBridgeEndpoint: bed.sink.endpoint,
      queueUrl: queue.url,
      queueArn: queue.arn,
      pool: { max: 2, applicationName: `jf-rel-${scenario}` },
      retryPolicy: RETRY,
      work: { holdMs: 2000 },
      concurrency: 1,
      batchSize: 1,
    });
    try {
      await consumer.ready();
      const pid = await waitUntil(
        "the consumer's transaction",
        () =>
          bed.db.withClient(async (c) => {
            const { rows } = await c.query<{ pid: number }>(
              `SELECT pid FROM pg_stat_activity
                WHERE application_name = $1 AND xact_start IS NOT NULL AND query LIKE '%pg_sleep%'`,
              [`jf-rel-${scenario}`],
            );
            return rows[0]?.pid;
          }),
        (p) => p !== undefined,
        10_000,
        50,
      );
      await bed.db.withClient((c) => c.query("SELECT pg_terminate_backend($1)", [pid]));
      // The record's outcome is a retry (transient failure), or the process is gone.
      await waitUntil(
        "the record's outcome or the process's death",
        async () => ({ retries: consumer.tally.byStatus.retry ?? 0, crashes: consumer.crashes.length }),
        (v) => v.retries > 0 || v.crashes > 0,
        10_000,
        50,
      );
      await sleep(300); // a crash right after the outcome still counts
      expect(consumer.crashes).toEqual([]);
      expect(consumer.tally.byStatus.retry).toBe(1);
    } finally {
      await consumer.stop();
    }
  }, 60_000);
});

if (TEST_TIER === "reliability") console.log(`[reliability] db-faults seed ${SEED}`);
