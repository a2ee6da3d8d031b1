/**
 * Observability (docs/design.md §8): CloudWatch EMF metrics for every outcome, structured JSON logs carrying job_id, consumer
 * and correlation_id for everything but success. Captures what Powertools writes to stdout.
 */
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import { afterAll, beforeAll, expect, it, vi } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { localSqsClient } from "../../local/aws-clients.ts";
import { runtimeMisreadsJsonKeys } from "../../shared/envelope/parse-json.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import { METRICS_NAMESPACE } from "../../shared/metrics/names.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  invoke,
  sqsRecord,
} from "../support/consumer-harness.ts";

let bed: ConsumerTestBed;
beforeAll(async () => {
  bed = await consumerTestBed();
});
afterAll(async () => {
  vi.unstubAllEnvs();
  vi.restoreAllMocks();
  await bed?.close();
});

interface Emf {
  _aws: {
    CloudWatchMetrics: Array<{
      Namespace: string;
      Dimensions: string[][];
      Metrics: Array<{ Name: string; Unit: string }>;
    }>;
  };
  [key: string]: unknown;
}

it("emits one EMF document per invocation with a metric per outcome, and logs only what is not success", async () => {
  vi.stubEnv("POWERTOOLS_METRICS_DISABLED", "false");
  vi.stubEnv("POWERTOOLS_LOG_LEVEL", "INFO");
  const lines: string[] = [];
  // EMF and info logs go to stdout, warn and error logs to stderr; Lambda ships both to CloudWatch.
  const capture = (chunk: string | Uint8Array) => {
    lines.push(String(chunk));
    return true;
  };
  const stdout = vi.spyOn(process.stdout, "write").mockImplementation(capture);
  const stderr = vi.spyOn(process.stderr, "write").mockImplementation(capture);

  const handler = bed.consumer(
    {
      ...awardPointsConsumer,
      work: async (job, tx) => {
        if (job.jobId === "obs-hard") throw new PermanentJobError("account closed");
        if (job.jobId === "obs-transient") throw new Error("timeout talking to the ledger");
        await awardPointsConsumer.work(job, tx);
      },
    },
    {
      metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: "award-points" }),
      logger: new Logger({ serviceName: "award-points", logLevel: "INFO" }),
      sqs: localSqsClient("http://127.0.0.1:9"), // ChangeMessageVisibility fails: RetryScheduleFailed
    },
  );
  const ok = JSON.stringify(award("obs-ok", 1, "u-obs"));
  const failures = await invoke(handler, [
    sqsRecord(ok),
    sqsRecord(ok),
    sqsRecord("{not json", { messageId: "obs-poison" }),
    sqsRecord(JSON.stringify(award("obs-hard"))),
    sqsRecord(JSON.stringify(award("obs-transient")), { messageId: "obs-transient-m" }),
  ]);
  stdout.mockRestore();
  stderr.mockRestore();
  expect(failures).toEqual(["obs-transient-m"]);

  const documents = lines
    .flatMap((l) => l.split("\n"))
    .filter((l) => l.trim().startsWith("{"))
    .map((l) => JSON.parse(l));
  const emf = documents.filter((d): d is Emf => "_aws" in d);
  expect(emf).toHaveLength(1);
  const doc = emf[0] as Emf;
  const directive = doc._aws.CloudWatchMetrics[0];
  expect(directive?.Namespace).toBe("jobfence");
  expect(directive?.Dimensions).toEqual([["service"]]);
  expect(doc.service).toBe("award-points");
  expect(doc).toMatchObject({
    JobSucceeded: 1,
    JobDuplicate: 1,
    DeadLetteredPoison: 1,
    DeadLetteredHard: 1,
    JobRetried: 1,
    RetryScheduleFailed: 1,
    // The follow-up of obs-ok could not be sent either: it waits in the outbox for the scheduled relay.
    FollowUpRelayFailed: 1,
    // The start-up probe, published with the first invocation's metrics.
    RuntimeJsonKeyMisread: runtimeMisreadsJsonKeys() ? 1 : 0,
  });
  expect(typeof doc.FenceLatency).toBe("number");
  expect(directive?.Metrics).toEqual(
    expect.arrayContaining([{ Name: "FenceLatency", Unit: "Milliseconds" }]),
  );

  const all = documents.filter((d) => "level" in d) as Array<Record<string, unknown>>;
  // One line at start-up names the runtime and how it reads JSON; the rest are the invocation's.
  const startUp = all.filter((l) => "json_key_misread" in l);
  expect(startUp).toHaveLength(1);
  expect(startUp[0]).toMatchObject({
    level: runtimeMisreadsJsonKeys() ? "WARN" : "INFO",
    node: process.version,
    json_key_misread: runtimeMisreadsJsonKeys(),
    consumer: "award-points",
  });
  const logs = all.filter((l) => !("json_key_misread" in l));
  // Successes and duplicates are metrics only; obs-ok's line is its follow-up's, left to the relay.
  expect(logs.map((l) => [l.level, l.message, l.job_id]).sort()).toEqual(
    [
      ["ERROR", "dead letter recorded", "obs-poison"],
      ["ERROR", "dead letter recorded", "obs-hard"],
      ["WARN", "job failed, retry scheduled", "obs-transient"],
      ["WARN", "follow-ups left in the outbox for the scheduled relay", "obs-ok"],
    ].sort(),
  );
  for (const log of logs) {
    expect(log).toMatchObject({ consumer: "award-points", service: "award-points" });
    expect(typeof log.correlation_id).toBe("string");
    expect(typeof log.message_id).toBe("string");
  }
  expect(logs.find((l) => l.job_id === "obs-hard")).toMatchObject({
    correlation_id: "corr-obs-hard",
    error_kind: "hard",
    error: { class: "PermanentJobError", message: "account closed" },
  });
});
