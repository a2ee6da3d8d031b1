/**
 * Drives the reference consumer's effect (one ledger row + the user's balance, functions/award-points)
 * three ways on the same database, for the benchmarks that compare them:
 *
 * - through the harness (`createConsumer`), in either commit mode, invoked in process with
 *   SQS events as Lambda would deliver them (no queue: the benchmarks measure Postgres work, and
 *   with no failure the harness makes no SQS call);
 * - bare: the identical effect in its own transaction with no fence (BEGIN; effect; COMMIT);
 * - with `concurrency` callers, each with its own connection, taking work from one shared list.
 */
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import type { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import type { SQSClient } from "@aws-sdk/client-sqs";
import type { SQSRecord } from "aws-lambda";
import type pg from "pg";
import { awardPoints } from "../../functions/award-points/award.ts";
import { awardPointsConsumer, type awardPointsPayload } from "../../functions/award-points/consumer.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import type { ConsumerConfigInput } from "../../shared/config/consumer-config.ts";
import {
  type CommitMode,
  type ConsumerDefinition,
  type ConsumerHandler,
  type ConsumerRuntime,
  createConsumer,
} from "../../shared/consumer.ts";

/** The SQS record Lambda would deliver for `job`. */
export function recordOf(
  job: BenchJob,
  queueArn = "arn:aws:sqs:eu-west-1:000000000000:award-points",
): SQSRecord {
  const now = String(Date.now());
  return {
    messageId: randomUUID(),
    receiptHandle: `rh-${job.jobId}`,
    body: JSON.stringify({
      job_id: job.jobId,
      tenant_id: job.tenantId,
      payload: { user_id: job.userId, points: job.points },
    }),
    attributes: {
      ApproximateReceiveCount: "1",
      SentTimestamp: now,
      SenderId: "bench",
      ApproximateFirstReceiveTimestamp: now,
    },
    messageAttributes: {},
    md5OfBody: "",
    eventSource: "aws:sqs",
    eventSourceARN: queueArn,
    awsRegion: "eu-west-1",
  };
}

/** One award, as the benchmarks generate them. */
export interface BenchJob {
  readonly jobId: string;
  readonly tenantId: string;
  readonly userId: string;
  readonly points: number;
}

/** `count` jobs with 36-character ids, spread over `users` balances (contention is part of the effect). */
export function makeJobs(count: number, users = 1000): BenchJob[] {
  return Array.from({ length: count }, (_, i) => ({
    jobId: randomUUID(),
    tenantId: "t_bench",
    userId: `u-${i % users}`,
    points: 1 + (i % 7),
  }));
}

/** Options of {@link benchConsumer}. */
export interface BenchConsumerOptions {
  /** Jobs whose work throws (a transient failure), to measure a batch that has to isolate one. */
  readonly failWhen?: (job: BenchJob) => boolean;
  /** Each job also sends its notify-user follow-up, as the reference consumer does. @default false */
  readonly followUps?: boolean;
}

/** Where the benchmark's follow-ups "go": the stand-in SQS takes every message without a call. */
const BENCH_TARGET_QUEUE = "https://sqs.eu-west-1.amazonaws.com/000000000000/notify-user";

/**
 * An SQS and EventBridge stand-in that answers at once: SendMessageBatch takes every entry (so the
 * relay after COMMIT deletes its rows as it would), anything else answers nothing.
 */
export const answerAtOnce = {
  send: async (command: { input?: { Entries?: { Id?: string }[] } }) => {
    const entries = command.input?.Entries;
    if (!entries || command.constructor.name !== "SendMessageBatchCommand") return {};
    return { Successful: entries.map((e, i) => ({ Id: e.Id, MessageId: `bench-${i}` })), Failed: [] };
  },
};

// EMF metrics are printed to stdout once per invocation; in Lambda that line is handed to an
// asynchronous log pipeline, here it would be a terminal write timed with the database work.
process.env.POWERTOOLS_METRICS_DISABLED ??= "true";

/**
 * The award-points consumer on `pool`, quiet (no metrics, no logs), in `commitMode`. SQS and
 * EventBridge are stand-ins that answer at once: a failed job's ChangeMessageVisibility costs no
 * network time, so the figures are the database's and the harness's alone.
 */
export function benchConsumer(
  pool: pg.Pool,
  commitMode: CommitMode,
  databaseUrl: string,
  options: BenchConsumerOptions = {},
): ConsumerHandler {
  const { failWhen, followUps = false } = options;
  const definition: ConsumerDefinition<typeof awardPointsPayload, typeof awardPointsConsumer.sends> = {
    name: awardPointsConsumer.name,
    payload: awardPointsConsumer.payload,
    commitMode,
    ...(followUps ? { sends: awardPointsConsumer.sends } : {}),
    work: async (job, tx) => {
      const award = {
        jobId: job.jobId,
        tenantId: job.tenantId,
        userId: job.payload.user_id,
        points: job.payload.points,
      };
      if (failWhen?.(award)) throw new Error("benchmark: this job fails");
      if (followUps) await awardPointsConsumer.work(job, tx);
      else await awardPoints(tx, award);
    },
  };
  return createConsumer(
    definition,
    quietRuntime(pool, databaseUrl, followUps ? { outboxQueues: { "notify-user": BENCH_TARGET_QUEUE } } : {}),
  );
}

/**
 * What a benchmark's consumer runs with: `pool`, no metrics, no logs, and SQS and EventBridge
 * stand-ins that answer at once ({@link answerAtOnce}); `config` adds to the configuration (the
 * queues of a consumer that sends, a function timeout).
 */
export function quietRuntime(
  pool: pg.Pool,
  databaseUrl: string,
  config: Partial<ConsumerConfigInput> = {},
): ConsumerRuntime {
  return {
    config: { databaseUrl, opsBusName: "jobfence-ops-bench", ...config },
    pool,
    sqs: answerAtOnce as unknown as SQSClient,
    eventBridge: answerAtOnce as unknown as EventBridgeClient,
    metrics: new Metrics({ namespace: "jobfence-bench", serviceName: "bench" }),
    logger: new Logger({ serviceName: "bench", logLevel: "SILENT" }),
  };
}

/**
 * How a transaction of {@link transactionVariant} begins and ends around its jobs' effects; `commit`
 * gets what `begin` answered (a fence transaction's id, say).
 */
export interface TransactionSteps<B = unknown> {
  begin(client: pg.PoolClient, jobs: readonly BenchJob[]): Promise<B>;
  commit(client: pg.PoolClient, begun: B): Promise<unknown>;
}

/** BEGIN and COMMIT: the effect as a consumer without jobfence would run it. */
export const BARE_STEPS: TransactionSteps = {
  begin: (client) => client.query("BEGIN"),
  commit: (client) => client.query("COMMIT"),
};

/** `jobs`' effects in one transaction on a pooled client: `steps.begin`, each effect, `steps.commit`. */
export async function transactionEffect<B>(
  pool: pg.Pool,
  jobs: readonly BenchJob[],
  steps: TransactionSteps<B>,
): Promise<void> {
  const client = await pool.connect();
  try {
    const begun = await steps.begin(client, jobs);
    for (const job of jobs) await awardPoints(client, job);
    await steps.commit(client, begun);
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/** Runs `task` over `items` with `concurrency` workers taking from one list; returns elapsed ms. */
export async function runConcurrently<T>(
  items: readonly T[],
  concurrency: number,
  task: (item: T) => Promise<void>,
): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < items.length; i = next++) await task(items[i] as T);
    }),
  );
  return performance.now() - started;
}

/** Splits `jobs` into SQS batches of `size` records. */
export function batchesOf(jobs: readonly BenchJob[], size: number): SQSRecord[][] {
  const batches: SQSRecord[][] = [];
  for (let i = 0; i < jobs.length; i += size)
    batches.push(jobs.slice(i, i + size).map((job) => recordOf(job)));
  return batches;
}

/**
 * Invokes the handler with one batch; throws when the number of records reported as failed is not
 * `expectedFailures` (a benchmark that loses jobs measures nothing).
 */
export async function invokeBatch(
  handler: ConsumerHandler,
  records: SQSRecord[],
  expectedFailures = 0,
): Promise<void> {
  const response = await handler({ Records: records }, lambdaContext(handler.consumer));
  if (response.batchItemFailures.length !== expectedFailures) {
    throw new Error(
      `${response.batchItemFailures.length} of ${records.length} records failed (expected ${expectedFailures})`,
    );
  }
}

/** One way of applying jobs, measured by {@link compareVariants}. */
export interface Variant {
  readonly label: string;
  /** Applies `jobs`; returns elapsed ms and how many effects were applied. */
  run(jobs: readonly BenchJob[]): Promise<{ ms: number; applied: number }>;
}

/** Effects per second of each variant, one figure per measured repetition. */
export type VariantRates = Record<string, number[]>;

/**
 * A running total read before and after each variant's run (CPU time, round trips): the difference
 * per applied effect goes to `perEffect`, one figure per measured round.
 */
export interface PerEffectMeter {
  /** The total now; NaN when it cannot be read (the figure is then NaN). */
  read(): number;
  readonly perEffect: VariantRates;
}

/**
 * This process's CPU time (µs, user + system, all threads). On a machine whose cores the client
 * shares with the server, the client's CPU is taken from the server: part of why one variant is
 * slower than another.
 */
export function processCpuMeter(): PerEffectMeter {
  return {
    read: () => {
      const { user, system } = process.cpuUsage();
      return user + system;
    },
    perEffect: {},
  };
}

/**
 * A warm-up round, then `reps` rounds; each round runs every variant on fresh jobs, in an order
 * rotated from round to round so a slow moment of the machine does not always hit the same one.
 */
export async function compareVariants(
  variants: readonly Variant[],
  options: {
    reps: number;
    jobs: number;
    users?: number;
    log?: (line: string) => void;
    /** Read around every run: CPU time, round trips (processCpuMeter, meterServerCpu, …). */
    meters?: readonly PerEffectMeter[];
  },
): Promise<VariantRates> {
  const rates: VariantRates = Object.fromEntries(variants.map((v) => [v.label, []]));
  const meters = options.meters ?? [];
  for (let round = 0; round <= options.reps; round++) {
    const order = variants.map((_, i) => variants[(i + round) % variants.length] as Variant);
    const line: string[] = [];
    for (const variant of order) {
      const jobs = makeJobs(options.jobs, options.users);
      const before = meters.map((meter) => meter.read());
      const { ms, applied } = await variant.run(jobs);
      const after = meters.map((meter) => meter.read());
      const rate = (applied / ms) * 1000;
      if (round > 0) {
        rates[variant.label]?.push(rate);
        meters.forEach((meter, i) => {
          const samples = meter.perEffect[variant.label] ?? [];
          samples.push(((after[i] ?? Number.NaN) - (before[i] ?? Number.NaN)) / applied);
          meter.perEffect[variant.label] = samples;
        });
      }
      line.push(`${variant.label} ${Math.round(rate)}/s`);
    }
    options.log?.(`${round === 0 ? "warm-up" : `round ${round}`}: ${line.join(", ")}`);
  }
  return rates;
}

/**
 * The effect, `perTransaction` jobs a transaction (`steps.begin`, their effects, `steps.commit`; by
 * default BEGIN and COMMIT, one job each), `concurrency` transactions at a time.
 */
export function transactionVariant<B>(
  label: string,
  pool: pg.Pool,
  concurrency: number,
  steps: TransactionSteps<B> = BARE_STEPS as TransactionSteps<B>,
  perTransaction = 1,
): Variant {
  return {
    label,
    run: async (jobs) => {
      const groups: BenchJob[][] = [];
      for (let i = 0; i < jobs.length; i += perTransaction) groups.push(jobs.slice(i, i + perTransaction));
      return {
        ms: await runConcurrently(groups, concurrency, (group) => transactionEffect(pool, group, steps)),
        applied: jobs.length,
      };
    },
  };
}

/** The bare effect (BEGIN; effect; COMMIT), each job its own transaction, `concurrency` at a time. */
export const bareVariant = (label: string, pool: pg.Pool, concurrency: number): Variant =>
  transactionVariant(label, pool, concurrency);

/**
 * The effect through the harness: SQS batches of `batchSize`, `concurrency` invocations at a
 * time. With `failEvery`, every `failEvery`-th job fails (one per batch when equal to batchSize).
 */
export function harnessVariant(
  label: string,
  pool: pg.Pool,
  databaseUrl: string,
  options: {
    commitMode: CommitMode;
    batchSize: number;
    concurrency: number;
    failEvery?: number;
    /** Each job also sends one follow-up (benchConsumer's `followUps`). @default false */
    followUps?: boolean;
  },
): Variant {
  const failing = new Set<string>();
  const handler = benchConsumer(pool, options.commitMode, databaseUrl, {
    failWhen: (job) => failing.has(job.jobId),
    followUps: options.followUps ?? false,
  });
  return {
    label,
    run: async (jobs) => {
      failing.clear();
      if (options.failEvery) {
        for (let i = options.failEvery - 1; i < jobs.length; i += options.failEvery) {
          failing.add((jobs[i] as BenchJob).jobId);
        }
      }
      const batches = batchesOf(jobs, options.batchSize);
      const ms = await runConcurrently(batches, options.concurrency, (records) =>
        invokeBatch(handler, records, records.filter((r) => failing.has(jobIdOf(r))).length),
      );
      return { ms, applied: jobs.length - failing.size };
    },
  };
}

function jobIdOf(record: SQSRecord): string {
  return (JSON.parse(record.body) as { job_id: string }).job_id;
}
