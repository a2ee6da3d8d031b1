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
import {
  type CommitMode,
  type ConsumerDefinition,
  type ConsumerHandler,
  createConsumer,
} from "../../shared/consumer.ts";

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
const answerAtOnce = {
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
  return createConsumer(definition, {
    config: {
      databaseUrl,
      opsBusName: "jobfence-ops-bench",
      ...(followUps ? { outboxQueues: { "notify-user": BENCH_TARGET_QUEUE } } : {}),
    },
    pool,
    sqs: answerAtOnce as unknown as SQSClient,
    eventBridge: answerAtOnce as unknown as EventBridgeClient,
    metrics: new Metrics({ namespace: "jobfence-bench", serviceName: "bench" }),
    logger: new Logger({ serviceName: "bench", logLevel: "SILENT" }),
  });
}

/**
 * What a transaction of {@link transactionVariant} sends before the effect: its BEGIN. A string it
 * returns is the message that commits the transaction (a fence transaction's checked COMMIT,
 * `fenceCommit`), instead of a plain COMMIT.
 */
export type BeginStep = (client: pg.PoolClient, job: BenchJob) => Promise<unknown>;

/**
 * The effect in a transaction of its own on a pooled client: `begin` (by default `BEGIN`: the bare
 * effect, as a consumer without jobfence would run it), the effect, COMMIT (or what `begin` said).
 */
export async function transactionEffect(
  pool: pg.Pool,
  job: BenchJob,
  begin: BeginStep = (client) => client.query("BEGIN"),
): Promise<void> {
  const client = await pool.connect();
  try {
    const commit = await begin(client, job);
    await awardPoints(client, job);
    await client.query(typeof commit === "string" ? commit : "COMMIT");
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
    /**
     * When given, filled with this process's CPU time per applied effect (µs, all threads) for each
     * measured round: on a machine whose cores the client shares with the server, that CPU is taken
     * from the server, so it is part of why one variant is slower than another.
     */
    clientCpu?: VariantRates;
  },
): Promise<VariantRates> {
  const rates: VariantRates = Object.fromEntries(variants.map((v) => [v.label, []]));
  for (let round = 0; round <= options.reps; round++) {
    const order = variants.map((_, i) => variants[(i + round) % variants.length] as Variant);
    const line: string[] = [];
    for (const variant of order) {
      const jobs = makeJobs(options.jobs, options.users);
      const cpuBefore = process.cpuUsage();
      const { ms, applied } = await variant.run(jobs);
      const cpu = process.cpuUsage(cpuBefore);
      const rate = (applied / ms) * 1000;
      if (round > 0) {
        rates[variant.label]?.push(rate);
        if (options.clientCpu) {
          const samples = options.clientCpu[variant.label] ?? [];
          samples.push((cpu.user + cpu.system) / applied);
          options.clientCpu[variant.label] = samples;
        }
      }
      line.push(`${variant.label} ${Math.round(rate)}/s`);
    }
    options.log?.(`${round === 0 ? "warm-up" : `round ${round}`}: ${line.join(", ")}`);
  }
  return rates;
}

/** The effect, each job its own transaction (`begin`, the effect, COMMIT), `concurrency` at a time. */
export function transactionVariant(
  label: string,
  pool: pg.Pool,
  concurrency: number,
  begin?: BeginStep,
): Variant {
  return {
    label,
    run: async (jobs) => ({
      ms: await runConcurrently(jobs, concurrency, (job) => transactionEffect(pool, job, begin)),
      applied: jobs.length,
    }),
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
