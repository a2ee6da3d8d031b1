/**
 * The local stack's parts for the end-to-end benchmark, in this process, wired as local/stack.ts
 * wires them (why not startLocalStack itself: bench/local-e2e.ts): the fauxqs emulator (on this
 * event loop as the stack runs it, or in a worker thread), award-points's source queue, backstop
 * and follow-up queues, the ops bus sink, and the consumer with its SQS client and pool timed
 * (./timing.ts), behind a poller that the benchmark starts and stops per repetition.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { Logger } from "@aws-lambda-powertools/logger";
import type { SQSClient } from "@aws-sdk/client-sqs";
import {
  BACKSTOP_RETENTION_SECONDS,
  type ConsumerDeployment,
  queueNames,
  resolveDeliveryTimings,
  VISIBILITY_TO_TIMEOUT_RATIO,
} from "../../functions/consumers.ts";
import { LOCAL_REGION, localEventBridgeClient, localSqsClient } from "../../local/aws-clients.ts";
import { startEventBridgeSink } from "../../local/eventbridge-sink.ts";
import { type Poller, startPoller } from "../../local/poller.ts";
import { startSqsEmulator } from "../../local/sqs-emulator.ts";
import { LOCAL_RETRY_POLICY } from "../../local/stack-config.ts";
import { createConsumer } from "../../shared/consumer.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { createQueueWith } from "../lib/sqs.ts";
import type { Cleanups } from "../lib/support.ts";
import { CallLog, instrumentPool, instrumentSqs } from "./timing.ts";

/** The local stack's defaults (local/stack-config.ts). */
export const POLL_WAIT_SECONDS = 1;
const LOCK_TIMEOUT_MS = 2000;

export interface StackOptions {
  /** The emulator keeps messages in memory (the stack: SQLite in its data directory). */
  readonly sqsMemory: boolean;
  /** The emulator runs in a worker thread (the stack: on its own event loop). */
  readonly sqsThread: boolean;
}

export interface BenchStack {
  /** For sending and checking, not timed. */
  readonly setupSqs: SQSClient;
  readonly sourceUrl: string;
  /** The timed calls of the poller's and the harness's clients. */
  readonly log: CallLog;
  /** Outcomes the harness reported, by status; the benchmark clears it per repetition. */
  readonly outcomes: Map<string, number>;
  readonly pollerErrors: { count: number; first: unknown };
  /** A poller over the source queue, started now. */
  poll(): Poller;
}

/**
 * The emulator as local/sqs-emulator.ts starts it, but in a worker thread of its own, so its work
 * (and its synchronous SQLite writes) does not hold up this event loop.
 */
async function startEmulatorThread(
  dataDir: string | undefined,
): Promise<{ endpoint: string; stop(): Promise<void> }> {
  const code = `
    const { parentPort, workerData } = require("node:worker_threads");
    import(workerData.fauxqs).then(async ({ startFauxqs }) => {
      const server = await startFauxqs({ port: 0, host: "127.0.0.1", logger: false, defaultRegion: workerData.region,
        ...(workerData.dataDir ? { dataDir: workerData.dataDir } : {}) });
      parentPort.on("message", () => server.stop().then(() => parentPort.postMessage({ stopped: true })));
      parentPort.postMessage({ port: server.port });
    }).catch((error) => parentPort.postMessage({ error: String(error) }));`;
  const worker = new Worker(code, {
    eval: true,
    workerData: { fauxqs: import.meta.resolve("fauxqs"), region: LOCAL_REGION, dataDir },
  });
  const port = await new Promise<number>((resolve, reject) => {
    worker.once("message", (m: { port?: number; error?: string }) =>
      m.port ? resolve(m.port) : reject(new Error(`emulator thread: ${m.error}`)),
    );
    worker.once("error", reject);
  });
  return {
    endpoint: `http://127.0.0.1:${port}`,
    async stop() {
      await new Promise((resolve) => {
        worker.once("message", resolve);
        worker.postMessage("stop");
      });
      await worker.terminate();
    },
  };
}

export async function startBenchStack(
  deployment: ConsumerDeployment,
  databaseUrl: string,
  options: StackOptions,
  cleanups: Cleanups,
): Promise<BenchStack> {
  let sqsDir: string | undefined;
  if (!options.sqsMemory) {
    const dir = await mkdtemp(join(tmpdir(), "jobfence-bench-sqs-"));
    sqsDir = dir;
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
  }
  const emulator = options.sqsThread
    ? await startEmulatorThread(sqsDir)
    : await startSqsEmulator(sqsDir ? { dataDir: sqsDir } : {});
  cleanups.push(() => emulator.stop());
  console.log(
    `sqs: fauxqs ${options.sqsThread ? "in a worker thread" : "on this event loop (as the stack runs it)"} at ` +
      `${emulator.endpoint}, ${sqsDir ? "messages in SQLite (as the stack keeps them)" : "messages in memory"}`,
  );
  const setupSqs = localSqsClient(emulator.endpoint);
  // The redrive count the local stack and the CDK construct use (only maxAttempts of the policy counts).
  const { maxReceiveCount } = resolveDeliveryTimings(deployment, {
    ...LOCAL_RETRY_POLICY,
    maxAttempts: deployment.definition.retry?.maxAttempts ?? LOCAL_RETRY_POLICY.maxAttempts,
  });
  const names = queueNames(deployment);
  const backstop = await createQueueWith(setupSqs, emulator.endpoint, names.backstop, {
    MessageRetentionPeriod: String(BACKSTOP_RETENTION_SECONDS),
  });
  const source = await createQueueWith(setupSqs, emulator.endpoint, names.source, {
    VisibilityTimeout: String(deployment.functionTimeoutSeconds * VISIBILITY_TO_TIMEOUT_RATIO),
    MessageRetentionPeriod: String(deployment.queueRetentionSeconds),
    RedrivePolicy: JSON.stringify({ deadLetterTargetArn: backstop.arn, maxReceiveCount }),
  });
  // Its follow-ups' targets' queues, as the stack gives it (award-points tells notify-user).
  const outboxQueues: Record<string, string> = {};
  for (const target of Object.keys(deployment.definition.sends ?? {})) {
    outboxQueues[target] = (await createQueueWith(setupSqs, emulator.endpoint, target, {})).url;
  }
  const sink = await startEventBridgeSink();
  cleanups.push(() => sink.stop());

  // The consumer, as the stack builds it, with its clients timed.
  const log = new CallLog();
  const sqs = localSqsClient(emulator.endpoint);
  instrumentSqs(sqs, log);
  const pool = createPool({
    connectionString: databaseUrl,
    role: consumerRoleName("award-points"),
    max: deployment.maxConcurrency + 1,
    lockTimeoutMs: LOCK_TIMEOUT_MS,
    applicationName: "jobfence-local:award-points",
  });
  cleanups.push(() => pool.end());
  instrumentPool(pool, log);
  const outcomes = new Map<string, number>();
  const consumer = createConsumer(deployment.definition, {
    config: {
      databaseUrl,
      opsBusName: "jobfence-ops-local",
      queueUrl: source.url,
      lockTimeoutMs: LOCK_TIMEOUT_MS,
      functionTimeoutSeconds: deployment.functionTimeoutSeconds,
      queueRetentionSeconds: deployment.queueRetentionSeconds,
      outboxQueues,
    },
    pool,
    sqs,
    eventBridge: localEventBridgeClient(sink.endpoint),
    logger: new Logger({ serviceName: "jobfence-local", logLevel: "SILENT" }),
    retryPolicy: LOCAL_RETRY_POLICY,
    onOutcome: (outcome) => outcomes.set(outcome.status, (outcomes.get(outcome.status) ?? 0) + 1),
  });
  const pollerErrors = { count: 0, first: undefined as unknown };
  return {
    setupSqs,
    sourceUrl: source.url,
    log,
    outcomes,
    pollerErrors,
    poll: () =>
      startPoller({
        source: {
          sqs,
          queueUrl: source.url,
          queueArn: source.arn,
          batchSize: deployment.batchSize,
          waitSeconds: POLL_WAIT_SECONDS,
        },
        handler: consumer,
        functionName: deployment.definition.name,
        concurrency: deployment.maxConcurrency,
        timeoutSeconds: deployment.functionTimeoutSeconds,
        onError: (error) => {
          pollerErrors.count++;
          pollerErrors.first ??= error;
        },
      }),
  };
}
