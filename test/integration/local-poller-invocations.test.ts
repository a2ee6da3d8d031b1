/**
 * The local stack's poller runs several invocations of one consumer at once in one process, as
 * Lambda Managed Instances do, and runs each inside a per-invocation store as that runtime does
 * (local/invoke-store.ts): every log line and every metrics flush of an invocation carries that
 * invocation's own request id, and a flush counts only its own records. Without the store
 * Powertools keeps one Lambda context and one set of metrics for the whole process, and concurrent
 * invocations write over each other's.
 */
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import { SendMessageBatchCommand } from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, expect, it, vi } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { startPoller } from "../../local/poller.ts";
import { MANAGED_INSTANCE_ENV } from "../../shared/invocation/concurrency.ts";
import { METRICS_NAMESPACE } from "../../shared/metrics/names.ts";
import { award, type ConsumerTestBed, consumerTestBed } from "../support/consumer-harness.ts";

let bed: ConsumerTestBed;
beforeAll(async () => {
  bed = await consumerTestBed();
});
afterAll(async () => {
  vi.unstubAllEnvs();
  vi.restoreAllMocks();
  await bed?.close();
});

const MESSAGES = 48;
const CONCURRENCY = 8;

it("runs concurrent invocations each in its own store: every log line and metrics flush carries its own request id", async () => {
  vi.stubEnv("POWERTOOLS_METRICS_DISABLED", "false");
  vi.stubEnv("POWERTOOLS_LOG_LEVEL", "INFO");
  expect(process.env[MANAGED_INSTANCE_ENV.maxConcurrency]).toBeUndefined();
  const queue = await bed.queue("lmi-poller", { VisibilityTimeout: "300" });
  for (let i = 0; i < MESSAGES; i += 10) {
    await bed.sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: queue.url,
        Entries: Array.from({ length: Math.min(10, MESSAGES - i) }, (_, k) => ({
          Id: `e${k}`,
          MessageBody: JSON.stringify(award(`lmi-poll-${i + k}`)),
        })),
      }),
    );
  }

  const metrics = new Metrics({ namespace: METRICS_NAMESPACE, serviceName: "award-points" });
  const handler = bed.consumer(
    {
      ...awardPointsConsumer,
      // Every record fails transiently, so each logs a line naming its message; the awaits before
      // make the invocations interleave.
      work: async () => {
        await new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 40));
        throw new Error("the ledger service timed out");
      },
    },
    {
      metrics,
      logger: new Logger({ serviceName: "award-points", logLevel: "INFO" }),
      queueUrl: queue.url,
    },
  );

  const lines: string[] = [];
  const capture = (chunk: string | Uint8Array) => {
    lines.push(String(chunk));
    return true;
  };
  const stdout = vi.spyOn(process.stdout, "write").mockImplementation(capture);
  const stderr = vi.spyOn(process.stderr, "write").mockImplementation(capture);

  /** The request id of the invocation each message went to, and each invocation's records. */
  const invocationOf = new Map<string, string>();
  const recordsOf = new Map<string, number>();
  const errors: unknown[] = [];
  const poller = startPoller({
    source: { sqs: bed.sqs, queueUrl: queue.url, queueArn: queue.arn, batchSize: 3 },
    handler: async (event, context) => {
      for (const record of event.Records) invocationOf.set(record.messageId, context.awsRequestId);
      recordsOf.set(context.awsRequestId, event.Records.length);
      // What each flush is checked by: the invocation's own request id, in its metrics' metadata.
      metrics.addMetadata("request_id", context.awsRequestId);
      return handler(event, context);
    },
    functionName: "award-points",
    concurrency: CONCURRENCY,
    timeoutSeconds: 30,
    onError: (error) => errors.push(error),
  });
  try {
    await vi.waitFor(
      () => {
        const done = [...recordsOf.values()].reduce((sum, n) => sum + n, 0);
        const flushes = documents(lines).filter((d) => "_aws" in d).length;
        if (done < MESSAGES || flushes < recordsOf.size)
          throw new Error(`${done} records, ${flushes} flushes, errors: ${errors.map(String).join("; ")}`);
      },
      { timeout: 20_000, interval: 50 },
    );
  } finally {
    await poller.stop();
    stdout.mockRestore();
    stderr.mockRestore();
  }
  expect(errors).toEqual([]);
  // The poller leaves the process as it found it.
  expect(process.env[MANAGED_INSTANCE_ENV.maxConcurrency]).toBeUndefined();

  const all = documents(lines);
  const logs = all.filter((d) => "level" in d && "message_id" in d);
  expect(logs.length).toBeGreaterThanOrEqual(MESSAGES);
  const foreign = logs.filter((l) => l.function_request_id !== invocationOf.get(String(l.message_id)));
  expect(foreign.map((l) => [l.message_id, l.function_request_id])).toEqual([]);

  const flushes = all.filter((d) => "_aws" in d);
  expect(flushes).toHaveLength(recordsOf.size);
  const miscounted = flushes.filter((f) => count(f.JobRetried) !== recordsOf.get(String(f.request_id)));
  expect(miscounted.map((f) => [f.request_id, f.JobRetried])).toEqual([]);
  expect(new Set(flushes.map((f) => f.request_id)).size).toBe(recordsOf.size);
});

/** An EMF value: one number, or the values of each time the metric was added. */
function count(value: unknown): number {
  return Array.isArray(value) ? value.reduce((sum: number, v) => sum + Number(v), 0) : Number(value ?? 0);
}

/** The JSON documents Powertools wrote (log lines and EMF flushes). */
function documents(lines: readonly string[]): Array<Record<string, unknown>> {
  return lines
    .flatMap((l) => l.split("\n"))
    .filter((l) => l.trim().startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}
