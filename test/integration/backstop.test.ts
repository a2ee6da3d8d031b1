/**
 * The backstop (docs/design.md §5.6): with the database stopped, a message that exhausts its receives lands in
 * the backstop queue through the emulator's redrive, and once the database is back the drain turns
 * it into exactly one dead letter. Nothing is lost at any step. Uses a PostgreSQL of its own, so
 * stopping it touches no other test.
 */

import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ChangeMessageVisibilityCommand } from "@aws-sdk/client-sqs";
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { deploymentMigrationSets } from "../../functions/migrate/sets.ts";
import { localEventBridgeClient } from "../../local/aws-clients.ts";
import { pollOnce, type QueueSource } from "../../local/event-source.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { freePort, type RunningPostgres, startEmbeddedPostgres } from "../../local/postgres.ts";
import { createBackstopDrain } from "../../shared/backstop/drain.ts";
import { runMigrations } from "../../shared/db/migrate.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { DEFAULT_RETRY_POLICY } from "../../shared/retry/policy.ts";
import { award, type ConsumerTestBed, consumerTestBed, OPS_BUS } from "../support/consumer-harness.ts";
import { messagesIn, sendMessage } from "../support/sqs.ts";

let bed: ConsumerTestBed;
let dataRoot: string;
let port: number;
let postgres: RunningPostgres | undefined;
const start = async () => {
  postgres = await startEmbeddedPostgres({ dataDir: join(dataRoot, "pg", "data"), port, durability: "fast" });
  return postgres;
};

beforeAll(async () => {
  bed = await consumerTestBed();
  dataRoot = await mkdtemp(join(tmpdir(), "jobfence-backstop-"));
  // As root, PostgreSQL runs as the OS user postgres, who must be able to reach the data directory.
  await chmod(dataRoot, 0o755);
  port = await freePort();
  const server = await start();
  await runMigrations({ connectionString: server.url, sets: deploymentMigrationSets() });
});
afterAll(async () => {
  await postgres?.stop();
  await rm(dataRoot, { recursive: true, force: true });
  await bed?.close();
});

it("a message the harness could never record reaches the backstop, and the drain records it exactly once", async () => {
  const maxReceiveCount = DEFAULT_RETRY_POLICY.maxAttempts + 3;
  const backstop = await bed.queue("award-points-backstop", { MessageRetentionPeriod: String(14 * 86_400) });
  const source = await bed.queue("award-points-src", {
    VisibilityTimeout: "30",
    RedrivePolicy: JSON.stringify({ deadLetterTargetArn: backstop.arn, maxReceiveCount }),
  });
  const url = (postgres as RunningPostgres).url;
  const pool = createPool({
    connectionString: url,
    role: consumerRoleName("award-points"),
    connectionTimeoutMs: 1000,
  });
  const consumer = bed.consumer(awardPointsConsumer, { pool, queueUrl: source.url });
  const sourceQueue: QueueSource = { sqs: bed.sqs, queueUrl: source.url, queueArn: source.arn };

  await sendMessage(bed.sqs, source.url, award("backstop-1", 5, "u-backstop"));
  await (postgres as RunningPostgres).stop();
  postgres = undefined;

  // Every receive fails: the fence cannot be written, and from the last attempt on neither can the
  // dead letter. The message stays in the queue each time; time passing is simulated by making it
  // visible again at once.
  for (let receive = 1; receive <= maxReceiveCount; receive++) {
    const delivery = await pollOnce(sourceQueue, consumer, lambdaContext("award-points"));
    expect(delivery.received.map((r) => r.attributes.ApproximateReceiveCount)).toEqual([String(receive)]);
    expect(delivery.failedIds).toHaveLength(1);
    await bed.sqs.send(
      new ChangeMessageVisibilityCommand({
        QueueUrl: source.url,
        ReceiptHandle: delivery.received[0]?.receiptHandle,
        VisibilityTimeout: 0,
      }),
    );
  }
  // The next receive past maxReceiveCount moves it to the backstop instead of delivering it.
  expect((await pollOnce(sourceQueue, consumer, lambdaContext("award-points"))).received).toEqual([]);
  const inBackstop = bed.emulator.server.inspectQueue("award-points-backstop")?.messages.ready ?? [];
  expect(inBackstop).toHaveLength(1);

  const backstopQueue: QueueSource = { sqs: bed.sqs, queueUrl: backstop.url, queueArn: backstop.arn };
  const drainPool = createPool({
    connectionString: url,
    role: consumerRoleName("award-points"),
    connectionTimeoutMs: 1000,
  });
  const drain = createBackstopDrain(
    {
      consumer: "award-points",
      sourceQueueUrl: source.url,
      sourceMaxReceiveCount: maxReceiveCount,
      databaseUrl: url,
      opsBusName: OPS_BUS,
    },
    { pool: drainPool, eventBridge: localEventBridgeClient(bed.sink.endpoint) },
  );
  try {
    // Database still down: the drain cannot record it either, so it leaves the message in place.
    const whileDown = await pollOnce(backstopQueue, drain, lambdaContext("award-points-backstop"));
    expect(whileDown.failedIds).toHaveLength(1);
    await bed.sqs.send(
      new ChangeMessageVisibilityCommand({
        QueueUrl: backstop.url,
        ReceiptHandle: whileDown.received[0]?.receiptHandle,
        VisibilityTimeout: 0,
      }),
    );

    await start();
    const drained = await pollOnce(backstopQueue, drain, lambdaContext("award-points-backstop"));
    expect(drained.failedIds).toEqual([]);
    expect(drained.deletedIds).toHaveLength(1);

    // A second copy of the same message (a redelivery after a lost delete) adds no second row.
    await sendMessage(bed.sqs, backstop.url, award("backstop-1", 5, "u-backstop"));
    expect((await pollOnce(backstopQueue, drain, lambdaContext("award-points-backstop"))).failedIds).toEqual(
      [],
    );

    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query("SELECT * FROM core.dead_letters WHERE job_id = 'backstop-1'");
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({
        consumer: "award-points",
        error_kind: "unrecorded",
        status: "pending_review",
        attempts: maxReceiveCount,
        queue: source.url,
        correlation_id: "corr-backstop-1",
        payload: award("backstop-1", 5, "u-backstop"),
      });
      const effects = await client.query(
        "SELECT count(*)::int AS n FROM award_points.ledger WHERE job_id = 'backstop-1'",
      );
      expect(effects.rows[0].n).toBe(0);
    } finally {
      await client.end();
    }
    const alerts = bed.sink.events.filter((e) => (e.detail as { job_id?: string }).job_id === "backstop-1");
    expect(alerts.map((a) => (a.detail as { error_kind: string }).error_kind)).toEqual([
      "unrecorded",
      "unrecorded",
    ]);
    for (const q of ["award-points-src", "award-points-backstop"])
      expect(messagesIn(bed.emulator, q), q).toBe(0);
  } finally {
    await drainPool.end();
  }
});
