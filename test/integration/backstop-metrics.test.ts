/**
 * The backstop drain's failure metric: a record it cannot record is reported back in
 * batchItemFailures, which fails no invocation, so Lambda's Errors never counts it. The drain
 * counts every such record in `BackstopRecordFailed` (namespace `jobfence`, dimension `service` =
 * `<consumer>-backstop`), the metric the consumer's BackstopRecordFailed alarm watches. Captures
 * the EMF document Powertools writes to stdout.
 */
import { Metrics } from "@aws-lambda-powertools/metrics";
import { afterAll, afterEach, beforeAll, expect, it, vi } from "vitest";
import { localEventBridgeClient } from "../../local/aws-clients.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { backstopDrainService, createBackstopDrain } from "../../shared/backstop/drain.ts";
import { createPool } from "../../shared/db/pool.ts";
import { METRIC, METRICS_NAMESPACE } from "../../shared/metrics/names.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  OPS_BUS,
  sqsRecord,
} from "../support/consumer-harness.ts";

let bed: ConsumerTestBed;
beforeAll(async () => {
  bed = await consumerTestBed();
});
afterEach(() => {
  vi.unstubAllEnvs();
  vi.restoreAllMocks();
});
afterAll(async () => {
  await bed?.close();
});

interface Emf {
  _aws: { CloudWatchMetrics: Array<{ Namespace: string; Dimensions: string[][] }> };
  [key: string]: unknown;
}

/** Runs one drain invocation over `bodies` and returns its failures and the EMF documents it wrote. */
async function drainOnce(
  databaseUrl: string,
  bodies: readonly string[],
): Promise<{ failures: string[]; emf: Emf[] }> {
  vi.stubEnv("POWERTOOLS_METRICS_DISABLED", "false");
  const lines: string[] = [];
  const capture = (chunk: string | Uint8Array) => {
    lines.push(String(chunk));
    return true;
  };
  const pool = createPool({ connectionString: databaseUrl, connectionTimeoutMs: 1000 });
  const service = backstopDrainService("award-points");
  const drain = createBackstopDrain(
    {
      consumer: "award-points",
      sourceQueueUrl: "https://sqs.eu-west-1.amazonaws.com/000000000000/award-points",
      sourceMaxReceiveCount: 19,
      databaseUrl,
      opsBusName: OPS_BUS,
    },
    {
      pool,
      eventBridge: localEventBridgeClient(bed.sink.endpoint),
      metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: service }),
    },
  );
  const stdout = vi.spyOn(process.stdout, "write").mockImplementation(capture);
  try {
    const response = await drain(
      { Records: bodies.map((body) => sqsRecord(body)) },
      lambdaContext("award-points-backstop"),
    );
    return {
      failures: response.batchItemFailures.map((f) => f.itemIdentifier),
      emf: lines
        .flatMap((l) => l.split("\n"))
        .filter((l) => l.trim().startsWith("{"))
        .map((l) => JSON.parse(l))
        .filter((d): d is Emf => "_aws" in d),
    };
  } finally {
    stdout.mockRestore();
    await pool.end();
  }
}

it("counts every record the drain could not record in BackstopRecordFailed, by the drain's service", async () => {
  // Nothing listens on port 9: every dead-letter write fails, and each record stays in the backstop.
  const { failures, emf } = await drainOnce("postgres://jobfence@127.0.0.1:9/jobfence", [
    JSON.stringify(award("bm-down-1")),
    "{not json",
  ]);
  expect(failures).toHaveLength(2);
  expect(emf).toHaveLength(1);
  const [doc] = emf as [Emf];
  expect(doc._aws.CloudWatchMetrics[0]).toMatchObject({ Namespace: "jobfence", Dimensions: [["service"]] });
  expect(doc.service).toBe("award-points-backstop");
  // One value for the batch; the per-record metric beside it is one value a record (EMF sums them).
  expect(doc[METRIC.backstopRecordFailed]).toBe(2);
  expect(doc[METRIC.deadLetterWriteFailed]).toEqual([1, 1]);
});

it("emits no BackstopRecordFailed when every record is recorded", async () => {
  const { failures, emf } = await drainOnce(bed.db.url, [JSON.stringify(award("bm-up-1"))]);
  expect(failures).toEqual([]);
  const [doc] = emf as [Emf];
  expect(doc.DeadLetteredUnrecorded).toBe(1);
  expect(doc).not.toHaveProperty(METRIC.backstopRecordFailed);
});
