/**
 * The bundled consumer — the synthesized asset, not the source — processes one real message
 * against the local PostgreSQL and the SQS emulator, in a process of its own as Lambda would run
 * it. Also reports the bundle's size and its cold-start import time.
 */
import { execFile } from "node:child_process";
import { statSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { App } from "aws-cdk-lib";
import { Template } from "aws-cdk-lib/assertions";
import { afterAll, beforeAll, expect, it } from "vitest";
import { JobfenceStack } from "../../infra/reference-stack.ts";
import { LOCAL_REGION } from "../../local/aws-clients.ts";
import { deliver, receiveRecords } from "../../local/event-source.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  effectsOf,
  OPS_BUS,
} from "../support/consumer-harness.ts";
import { messagesIn, sendMessage } from "../support/sqs.ts";

const run = promisify(execFile);
let bed: ConsumerTestBed;
let assetDir: string;

beforeAll(async () => {
  bed = await consumerTestBed();
  // The reference stack, synthesized with real bundling; the test takes the consumer's asset.
  const app = new App();
  const stack = new JobfenceStack(app, "JobfenceBundle", {
    jwtIssuer: "https://auth.example.com",
    jwtAudience: "jobfence-ops",
    betterStackEndpoint: "https://in.logs.betterstack.com",
    betterStackSecretName: "jobfence/betterstack",
  });
  const template = Template.fromStack(stack);
  const fn = Object.values(
    template.findResources("AWS::Lambda::Function", {
      Properties: { Description: "jobfence consumer award-points" },
    }),
  )[0];
  assetDir = join(app.synth().directory, `asset.${String(fn?.Properties.Code.S3Key).replace(/\.zip$/, "")}`);
}, 180_000);

afterAll(async () => {
  await bed?.close();
});

it("the synthesized consumer bundle applies one message from the emulator, once", {
  timeout: 120_000,
}, async () => {
  const queue = await bed.queue("bundle-smoke");
  await sendMessage(bed.sqs, queue.url, award("bundle-1", 42, "u-bundle"));
  const records = await receiveRecords({
    sqs: bed.sqs,
    queueUrl: queue.url,
    queueArn: queue.arn,
    waitSeconds: 1,
  });
  expect(records).toHaveLength(1);

  const bundle = join(assetDir, "index.mjs");
  // The child imports the bundle as Lambda's runtime would, times the import, and invokes it once.
  const script = `
    const started = performance.now();
    const { handler } = await import(${JSON.stringify(bundle)});
    const importMs = performance.now() - started;
    const event = JSON.parse(process.env.SMOKE_EVENT);
    const context = { functionName: "award-points", awsRequestId: "smoke", getRemainingTimeInMillis: () => 30000 };
    const response = await handler(event, context);
    console.log(JSON.stringify({ importMs, response }));
    process.exit(0);`;
  const { stdout } = await run(process.execPath, ["--input-type=module", "-e", script], {
    env: {
      PATH: process.env.PATH,
      DATABASE_URL: bed.db.url,
      JOBFENCE_OPS_BUS_NAME: OPS_BUS,
      JOBFENCE_QUEUE_URL: queue.url,
      AWS_REGION: LOCAL_REGION,
      AWS_ACCESS_KEY_ID: "local",
      AWS_SECRET_ACCESS_KEY: "local",
      AWS_ENDPOINT_URL_SQS: bed.emulator.endpoint,
      AWS_ENDPOINT_URL_EVENTBRIDGE: bed.sink.endpoint,
      POWERTOOLS_METRICS_DISABLED: "true",
      POWERTOOLS_LOG_LEVEL: "SILENT",
      SMOKE_EVENT: JSON.stringify({ Records: records }),
    },
    timeout: 60_000,
  });
  const result = JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}") as {
    importMs: number;
    response: { batchItemFailures: unknown[] };
  };
  expect(result.response).toEqual({ batchItemFailures: [] });
  expect(await effectsOf(bed.db, "bundle-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });

  // Delete what the bundle acked, as the event source mapping would; the queue is then empty.
  await deliver(
    { sqs: bed.sqs, queueUrl: queue.url, queueArn: queue.arn },
    records,
    async () => result.response as never,
    {} as never,
  );
  expect(messagesIn(bed.emulator, "bundle-smoke")).toBe(0);

  const size = statSync(bundle).size;
  console.log(
    `award-points bundle: ${(size / 1024).toFixed(0)} KiB (index.mjs), cold import ${result.importMs.toFixed(0)} ms`,
  );
  expect(size).toBeGreaterThan(0);
  expect(result.importMs).toBeGreaterThan(0);
});
