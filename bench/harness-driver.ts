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
import { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import { SQSClient } from "@aws-sdk/client-sqs";
import type { SQSRecord } from "aws-lambda";
import type pg from "pg";
import { awardPoints } from "../functions/award-points/award.ts";
import { awardPointsConsumer } from "../functions/award-points/consumer.ts";
import { lambdaContext } from "../local/lambda-context.ts";
import { type CommitMode, type ConsumerHandler, createConsumer } from "../shared/consumer.ts";

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

/** The award-points consumer on `pool`, quiet (no metrics, no logs), in `commitMode`. */
export function benchConsumer(pool: pg.Pool, commitMode: CommitMode, databaseUrl: string): ConsumerHandler {
  // Never called while nothing fails; pointed at a closed port so a call would fail fast.
  const endpoint = "http://127.0.0.1:9";
  const credentials = { accessKeyId: "bench", secretAccessKey: "bench" };
  return createConsumer(
    { ...awardPointsConsumer, commitMode },
    {
      config: { databaseUrl, opsBusName: "jobfence-ops-bench" },
      pool,
      sqs: new SQSClient({ endpoint, region: "eu-west-1", credentials, maxAttempts: 1 }),
      eventBridge: new EventBridgeClient({ endpoint, region: "eu-west-1", credentials, maxAttempts: 1 }),
      metrics: new Metrics({ namespace: "jobfence-bench", serviceName: "bench" }),
      logger: new Logger({ serviceName: "bench", logLevel: "SILENT" }),
    },
  );
}

/** The effect with no fence: its own transaction, as a consumer without jobfence would run it. */
export async function bareEffect(pool: pg.Pool, job: BenchJob): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await awardPoints(client, job);
    await client.query("COMMIT");
    client.release();
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {});
    client.release();
    throw error;
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

/** Invokes the handler with one batch; throws when any record was reported as failed. */
export async function invokeBatch(handler: ConsumerHandler, records: SQSRecord[]): Promise<void> {
  const response = await handler({ Records: records }, lambdaContext(handler.consumer));
  if (response.batchItemFailures.length > 0) {
    throw new Error(`${response.batchItemFailures.length} of ${records.length} records failed`);
  }
}
