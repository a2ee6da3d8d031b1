/**
 * A host that gives several consumers one logger (the local stack gives them all its own) sees each
 * consumer's lines under that consumer's name: each consumer and each drain logs through a child of
 * the logger given, so one's `consumer` key never overwrites another's.
 */
import { Logger } from "@aws-lambda-powertools/logger";
import { afterEach, expect, it, vi } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { notifyUserConsumer } from "../../functions/notify-user/consumer.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { createConsumer } from "../../shared/consumer.ts";
import { sqsRecord } from "../support/consumer-harness.ts";

afterEach(() => {
  vi.restoreAllMocks();
});

it("logs each consumer's lines under its own name through one shared logger", async () => {
  const lines: Record<string, unknown>[] = [];
  vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
    const text = String(chunk);
    for (const line of text.split("\n").filter((l) => l.startsWith("{"))) lines.push(JSON.parse(line));
    return true;
  });
  const logger = new Logger({ serviceName: "jobfence-local", logLevel: "INFO" });
  const config = {
    databaseUrl: "postgres://nobody@127.0.0.1:1/none",
    opsBusName: "bus",
    queueUrl: "http://127.0.0.1:1/000000000000/award-points",
    outboxQueues: { "notify-user": "http://127.0.0.1:1/000000000000/notify-user" },
  };
  const award = createConsumer(awardPointsConsumer, { config, logger });
  const notify = createConsumer(notifyUserConsumer, {
    config: { ...config, queueUrl: "http://127.0.0.1:1/000000000000/notify-user", outboxQueues: {} },
    logger,
  });
  // A body that is not JSON: the record is poison, and its dead letter cannot be written (no
  // database answers), which award-points logs about.
  await award(
    { Records: [sqsRecord("{", { messageId: "m-shared-logger" })] },
    lambdaContext("award-points", 5000),
  );
  await Promise.all([award.pool.end(), notify.pool.end()]);
  const about = lines.filter((line) => line.message_id === "m-shared-logger");
  expect(about.length).toBeGreaterThan(0);
  expect(new Set(about.map((line) => line.consumer))).toEqual(new Set(["award-points"]));
});
