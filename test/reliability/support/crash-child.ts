/**
 * The crash matrix's victim: a real process that runs one role (a consumer polling the SQS
 * emulator, a single or bulk replay, the TTL cleanup, or the scheduled outbox relay) with the product's fault hook installed,
 * and kills itself with SIGKILL the nth time the configured fault point is reached. Nothing runs
 * after the kill (no ROLLBACK, no ack, no finally), which is what a Lambda container dying
 * mid-invocation looks like to the database and the queue.
 *
 * Configured by JOBFENCE_CRASH_CHILD (JSON, {@link CrashChildConfig}). Exits 3 if the role
 * finished without reaching the point, so the parent can tell "never crashed" from "crashed".
 */
import { writeSync } from "node:fs";
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import { notifyUserConsumer } from "../../../functions/notify-user/consumer.ts";
import { localEventBridgeClient, localSqsClient } from "../../../local/aws-clients.ts";
import { pollOnce } from "../../../local/event-source.ts";
import { lambdaContext } from "../../../local/lambda-context.ts";
import { type ConsumerHandler, createConsumer } from "../../../shared/consumer.ts";
import { createPool } from "../../../shared/db/pool.ts";
import { consumerRoleName } from "../../../shared/db/queries/provision-login.ts";
import { runBulkOperations } from "../../../shared/dead-letters/bulk-worker.ts";
import { replayDeadLetter } from "../../../shared/dead-letters/replay.ts";
import { installFaultHook } from "../../../shared/fault-points.ts";
import { runFenceCleanup } from "../../../shared/fence/cleanup.ts";
import { sweepOutbox } from "../../../shared/outbox/sweep.ts";
import {
  CRASH_CHILD_ENV,
  CRASH_MARK,
  CRASH_RETRY_POLICY,
  type CrashChildConfig,
  type CrashReport,
  crashConsumer,
  IN_FLIGHT_POINTS,
} from "./crash-consumer.ts";

const config = JSON.parse(process.env[CRASH_CHILD_ENV] ?? "") as CrashChildConfig;

let hits = 0;
installFaultHook(async (point, context) => {
  if (point !== config.point) return;
  hits++;
  if (hits !== config.nth) return;
  const report: CrashReport = { point, hit: hits, jobIds: context.jobIds ?? [] };
  const line = `${CRASH_MARK} ${JSON.stringify(report)}\n`;
  if (IN_FLIGHT_POINTS.has(point)) {
    if (config.inFlightMs === 0) {
      // At once, before this turn of the event loop ends: the statement was issued but the pool
      // has not yet written it to the socket, so the server never sees it.
      writeSync(1, line);
      process.kill(process.pid, "SIGKILL");
    }
    // Otherwise the statement gets a moment to reach the server, so the kill lands while it runs
    // or just after it committed: the invariant must hold for either outcome.
    await new Promise((resolve) => setTimeout(resolve, config.inFlightMs));
  }
  // Flush the line before dying: SIGKILL leaves no chance to write it afterwards.
  process.stdout.write(line, () => process.kill(process.pid, "SIGKILL"));
  await new Promise(() => {});
});

const sqs = localSqsClient(config.sqsEndpoint);
const role = config.role;

/** A pool of `consumer`'s role, named for the parent's session checks. */
function consumerPool(consumer: string): ReturnType<typeof createPool> {
  return createPool({
    connectionString: config.databaseUrl,
    role: consumerRoleName(consumer),
    max: 2,
    applicationName: config.applicationName,
  });
}

/** Polls the queue with `handler` until an empty receive: the emulator may hand its messages over in more than one batch. */
async function consumeQueue(
  handler: ConsumerHandler,
  queue: { readonly queueUrl: string; readonly queueArn: string },
  timeoutSeconds = 30,
): Promise<void> {
  const source = { sqs, queueUrl: queue.queueUrl, queueArn: queue.queueArn };
  for (;;) {
    const delivered = await pollOnce(source, handler, lambdaContext(handler.consumer, timeoutSeconds * 1000));
    if (delivered.received.length === 0) break;
  }
}

const runtimeOf = (pool: ReturnType<typeof createPool>) => ({
  pool,
  sqs,
  eventBridge: localEventBridgeClient(config.eventBridgeEndpoint),
  retryPolicy: CRASH_RETRY_POLICY,
});

if (role.kind === "consume") {
  const handler = createConsumer(
    { ...crashConsumer, commitMode: role.commitMode },
    {
      config: {
        databaseUrl: config.databaseUrl,
        opsBusName: "jobfence-ops-test",
        queueUrl: role.queueUrl,
        outboxQueues: { "notify-user": role.followUpQueueUrl },
        // A short timeout's budget must still outlast a fence lock wait (the consumer checks).
        ...(role.timeoutSeconds
          ? { functionTimeoutSeconds: role.timeoutSeconds, lockTimeoutMs: 500, returnReserveMs: 500 }
          : {}),
      },
      ...runtimeOf(consumerPool("award-points")),
    },
  );
  await consumeQueue(handler, role, role.timeoutSeconds);
} else if (role.kind === "notify") {
  const handler = createConsumer(notifyUserConsumer, {
    config: { databaseUrl: config.databaseUrl, opsBusName: "jobfence-ops-test", queueUrl: role.queueUrl },
    ...runtimeOf(consumerPool("notify-user")),
  });
  await consumeQueue(handler, role);
} else if (role.kind === "replay-single" || role.kind === "replay-bulk") {
  const pool = createPool({
    connectionString: config.databaseUrl,
    role: "jobfence_ops",
    max: 1,
    applicationName: config.applicationName,
  });
  if (role.kind === "replay-single") {
    await replayDeadLetter({ pool, sqs }, role.deadLetterId, "crash-matrix");
  } else {
    await runBulkOperations({ pool, sqs }, { budgetMs: 60_000 });
  }
} else if (role.kind === "sweep") {
  const pool = createPool({
    connectionString: config.databaseUrl,
    role: consumerRoleName("award-points"),
    max: 1,
    applicationName: config.applicationName,
  });
  await sweepOutbox({
    pool,
    sqs,
    eventBridge: localEventBridgeClient(config.eventBridgeEndpoint),
    opsBusName: "jobfence-ops-test",
    consumer: "award-points",
    queues: { "notify-user": role.followUpQueueUrl },
    metrics: new Metrics({ namespace: "jobfence", serviceName: "award-points-outbox" }),
    logger: new Logger({ serviceName: "award-points-outbox", logLevel: "SILENT" }),
    batchSize: role.batchSize,
  });
} else {
  const pool = createPool({
    connectionString: config.databaseUrl,
    role: "jobfence_cleanup",
    max: 1,
    applicationName: config.applicationName,
  });
  await runFenceCleanup({ db: pool, budgetMs: 60_000, batchSize: role.batchSize });
}

process.stdout.write("crash-matrix: finished without reaching the fault point\n", () => process.exit(3));
