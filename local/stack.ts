/**
 * The local stack: everything jobfence deploys, on one machine, with no AWS account. PostgreSQL
 * (embedded, or DATABASE_URL), the SQS emulator (or SQS_ENDPOINT), the queues and backstop queues
 * of every consumer in functions/consumers.ts, each consumer and backstop drain behind an event-
 * source poller, the dead-letter API on a real HTTP server with a local token issuer, an ops-bus
 * sink, the cleanup and escalation schedules on timers, and a fake external provider (charges and
 * emails, with Stripe's Idempotency-Key semantics) for the consumers' steps to call.
 */

import { randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import {
  CreateQueueCommand,
  GetQueueAttributesCommand,
  SetQueueAttributesCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import pg from "pg";
import {
  CONSUMERS,
  type ConsumerDeployment,
  declaredFollowUpTargets,
  expectedQueues,
} from "../functions/consumers.ts";
import { createDeadLetterApi } from "../functions/dead-letters-api/api.ts";
import { deploymentConsumers, deploymentMigrationSets } from "../functions/migrate/sets.ts";
import { EMAIL_PROVIDER_URL } from "../functions/notify-user/email.ts";
import { outboxRelayInvocation, outboxRelayService } from "../functions/outbox-relay/relay.ts";
import { verifyConsumerRegistry } from "../functions/registry.ts";
import { createBackstopDrain } from "../shared/backstop/drain.ts";
import { CONSUMER_DEFAULTS } from "../shared/config/consumer-config.ts";
import { createConsumer } from "../shared/consumer.ts";
import { runMigrations } from "../shared/db/migrate.ts";
import { createPool } from "../shared/db/pool.ts";
import { registerDeclaredFollowUpTargets } from "../shared/db/queries/follow-up-targets.ts";
import {
  consumerRoleName,
  registerConsumerQueues,
  registerFenceTtl,
} from "../shared/db/queries/provision-login.ts";
import { runBulkOperations } from "../shared/dead-letters/bulk-worker.ts";
import { escalateStaleDeadLetters, resolveHealedDeadLetters } from "../shared/dead-letters/escalation.ts";
import { sealKey } from "../shared/dead-letters/seal.ts";
import { describeError } from "../shared/errors/last-error.ts";
import { EmbeddedPostgresStartError } from "../shared/errors/local-stack.ts";
import { runFenceCleanup } from "../shared/fence/cleanup.ts";
import { createTokenVerifier } from "../shared/http/auth.ts";
import { METRICS_NAMESPACE } from "../shared/metrics/names.ts";
import { type OutcomeObserver, recordLogKeys } from "../shared/record/observe.ts";
import type { DeliveryTimings } from "../shared/retry/delivery-timings.ts";
import { type FakeProvider, startFakeProvider } from "../testing/fake-provider.ts";
import { LOCAL_ACCOUNT, LOCAL_REGION, localEventBridgeClient, localSqsClient } from "./aws-clients.ts";
import { type EventBridgeSink, startEventBridgeSink } from "./eventbridge-sink.ts";
import { serveHttpApi } from "./http-adapter.ts";
import { stackFilePath } from "./local-dir.ts";
import { type Poller, startPoller } from "./poller.ts";
import { ensurePortFree, listeningOn, portTaken } from "./ports.ts";
import { type RunningPostgres, startEmbeddedPostgres } from "./postgres.ts";
import { type SqsEmulator, startSqsEmulator } from "./sqs-emulator.ts";
import { type LocalStackConfig, localDeliveryTimings } from "./stack-config.ts";
import { createLocalIssuer } from "./tokens.ts";

/** The ops bus name the local functions publish to (the sink accepts any). */
export const LOCAL_OPS_BUS = "jobfence-ops-local";

/** What `.local/stack.json` holds. */
export interface StackInfo {
  apiUrl: string;
  sqsEndpoint: string;
  region: string;
  databaseUrl: string;
  /** The fake provider the consumers' steps call (POST /v1/charges, /v1/emails; GET /_fake/ledger). */
  providerUrl: string;
  queues: Record<string, { url: string; backstopUrl: string }>;
  tokens: Record<"admin" | "read" | "replay" | "discard" | "none", string>;
}

/** Outcome counts per consumer, written to `.local/stats.json` for the demo. */
export type StackStats = Record<string, Record<string, number>>;

/** A running stack. */
export interface LocalStack {
  readonly info: StackInfo;
  readonly stats: StackStats;
  stop(): Promise<void>;
}

/** Starts everything; `say` receives the readable progress lines. */
export async function startLocalStack(
  config: LocalStackConfig,
  say: (line: string) => void,
): Promise<LocalStack> {
  const cleanups: Array<() => Promise<void>> = [];
  const stop = async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch((error) => say(`stop: ${String(error)}`));
  };
  try {
    return await start(config, say, cleanups, stop);
  } catch (error) {
    // Whatever had started (PostgreSQL, the emulator, pools, pollers) stops: nothing is left behind.
    if (cleanups.length > 0) say("start      failed; stopping what had started");
    await stop();
    throw error;
  }
}

async function start(
  config: LocalStackConfig,
  say: (line: string) => void,
  cleanups: Array<() => Promise<void>>,
  stop: () => Promise<void>,
): Promise<LocalStack> {
  // The consumers as the synth checks them: refused before anything starts.
  await verifyConsumerRegistry(CONSUMERS, "local stack");
  await mkdir(config.localDir, { recursive: true });

  // PostgreSQL and the schema.
  let databaseUrl = config.databaseUrl;
  if (databaseUrl) {
    say("postgres   using DATABASE_URL");
  } else {
    const dataDir = join(config.localDir, "pg", "data");
    await stopOrphanedPostgres(dataDir, say);
    const port = config.ports.postgres;
    await ensurePortFree("postgres", port);
    const embedded: RunningPostgres = await listeningOn("postgres", port, () =>
      startEmbeddedPostgres({ dataDir, port }).catch((error: unknown) => {
        // Taken between the probe and the server's bind: its log is all that says so.
        throw error instanceof EmbeddedPostgresStartError && error.addressInUse
          ? portTaken("postgres", port, error)
          : error;
      }),
    );
    cleanups.push(() => embedded.stop());
    databaseUrl = embedded.url;
    say(`postgres   embedded PostgreSQL, data in ${dataDir}`);
  }
  const report = await runMigrations({
    connectionString: databaseUrl,
    sets: deploymentMigrationSets(),
    consumers: deploymentConsumers(),
  });
  say(`migrate    schema up to date (${report.applied.length} applied now, ${report.alreadyApplied} before)`);

  // SQS and the ops bus.
  let sqsEndpoint = config.sqsEndpoint;
  if (sqsEndpoint) {
    say(`sqs        using SQS_ENDPOINT ${sqsEndpoint}`);
  } else {
    const emulator: SqsEmulator = await listeningOn("sqs", config.ports.sqs, () =>
      startSqsEmulator({ port: config.ports.sqs, dataDir: join(config.localDir, "sqs") }),
    );
    cleanups.push(() => emulator.stop());
    sqsEndpoint = emulator.endpoint;
    say(`sqs        fauxqs emulator at ${sqsEndpoint}, messages kept in ${join(config.localDir, "sqs")}`);
  }
  const sqs = localSqsClient(sqsEndpoint);
  const sink: EventBridgeSink = await startEventBridgeSink();
  cleanups.push(() => sink.stop());
  sink.onEvent = (event) => {
    if (event.detailType === "DeadLettersEscalated") {
      const d = event.detail as { total: number; threshold_days: number };
      say(`ESCALATE   ${d.total} dead letter(s) pending longer than ${d.threshold_days} days`);
    }
  };
  const eventBridge = localEventBridgeClient(sink.endpoint);

  // The external provider the consumers' steps call, started before them.
  const provider: FakeProvider = await listeningOn("provider", config.ports.provider, () =>
    startFakeProvider({ port: config.ports.provider }),
  );
  cleanups.push(() => provider.close());
  // notify-user's own setting, as its deployed function's environment gives it (the consumers run
  // in this process, and read it when their first step runs).
  process.env[EMAIL_PROVIDER_URL] = provider.url;
  say(
    `provider   fake provider at ${provider.url} (POST /v1/charges, /v1/emails; ledger: GET /_fake/ledger)`,
  );

  // Per-function pools, each logged in as its least-privileged role.
  const pools: pg.Pool[] = [];
  cleanups.push(async () => {
    await Promise.all(pools.map((p) => p.end()));
  });
  const pool = (role: string, max: number) => {
    const created = createPool({
      connectionString: databaseUrl as string,
      role,
      max,
      lockTimeoutMs: config.lockTimeoutMs,
      applicationName: `jobfence-local:${role}`,
    });
    pools.push(created);
    return created;
  };

  const stats: StackStats = {};
  const logger = new Logger({ serviceName: "jobfence-local", logLevel: config.jsonLogs ? "INFO" : "SILENT" });
  const observe =
    (consumer: string): OutcomeObserver =>
    (outcome, rc) => {
      stats[consumer] ??= {};
      const counts = stats[consumer];
      const key = outcome.status === "dead-lettered" ? `dead-lettered:${outcome.kind}` : outcome.status;
      counts[key] = (counts[key] ?? 0) + 1;
      const job = recordLogKeys(rc).job_id;
      if (outcome.status === "retry") {
        say(
          outcome.recorded
            ? `retry      ${consumer} job ${job}: attempt ${outcome.attempt} failed (${describeError(outcome.error).message}); again in ${outcome.delaySeconds}s`
            : `retry      ${consumer} job ${job}: failed (${describeError(outcome.error).message}) and could not be counted; back after the queue's visibility timeout`,
        );
      } else if (outcome.status === "held") {
        say(
          `held       ${consumer} job ${job}: another delivery holds its fence; back in ${outcome.delaySeconds}s, no attempt spent`,
        );
      } else if (outcome.status === "dead-lettered") {
        say(
          `DEAD       ${consumer} job ${job}: ${outcome.kind} after ${outcome.attempts} attempt(s), dead letter ${outcome.deadLetterId}${outcome.created ? "" : " (already recorded)"} — ${describeError(outcome.error, { unwrapCause: outcome.kind === "exhausted" }).message}`,
        );
      } else if (outcome.status === "dead-letter-failed" || outcome.status === "failed") {
        say(
          `ERROR      ${consumer} job ${job}: could not be recorded, left in the queue — ${describeError("writeError" in outcome ? outcome.writeError : outcome.error).message}`,
        );
      }
    };

  // Queues, consumers, drains, pollers.
  const queues: StackInfo["queues"] = {};
  const pollers: Poller[] = [];
  cleanups.push(async () => {
    await Promise.all(pollers.map((p) => p.stop()));
  });
  // Every queue first: a consumer's follow-ups need its targets' queues.
  const createdQueues = new Map<string, Awaited<ReturnType<typeof createQueues>>>();
  for (const deployment of CONSUMERS) {
    const name = deployment.definition.name;
    const created = await createQueues(
      sqs,
      sqsEndpoint,
      deployment,
      localDeliveryTimings(config, deployment),
    );
    createdQueues.set(name, created);
    queues[name] = { url: created.source.url, backstopUrl: created.backstop.url };
    // A replay sends this consumer's dead letters to its own queue only (migration 0014).
    await registerQueues(databaseUrl, name, [created.source.url]);
  }
  // The follow-up targets each consumer declares, as the migrate function registers them on deploy:
  // the outbox takes a follow-up only to one of them (migration 0019).
  await registerFollowUpTargets(databaseUrl, declaredFollowUpTargets());
  const relays: { consumer: string; pool: pg.Pool; queues: Record<string, string> }[] = [];
  for (const deployment of CONSUMERS) {
    const name = deployment.definition.name;
    const timings = localDeliveryTimings(config, deployment);
    const { maxReceiveCount } = timings;
    const created = createdQueues.get(name) as Awaited<ReturnType<typeof createQueues>>;
    const outboxQueues = Object.fromEntries(
      Object.keys(deployment.definition.sends ?? {}).map((target) => [target, queues[target]?.url as string]),
    );
    if (Object.keys(outboxQueues).length > 0) {
      relays.push({ consumer: name, pool: pool(consumerRoleName(name), 1), queues: outboxQueues });
    }

    const consumer = createConsumer(deployment.definition, {
      config: {
        databaseUrl,
        opsBusName: LOCAL_OPS_BUS,
        queueUrl: created.source.url,
        lockTimeoutMs: config.lockTimeoutMs,
        functionTimeoutSeconds: deployment.functionTimeoutSeconds,
        queueRetentionSeconds: deployment.queueRetentionSeconds,
        // The queue's redrive and visibility as created above: the consumer validates them together
        // with its retry policy and time budget, as a deployed one does.
        maxReceiveCount,
        visibilityTimeoutSeconds: timings.visibilityTimeoutSeconds,
        batchingWindowSeconds: timings.batchingWindowSeconds,
        fifo: timings.fifo,
        maxInterruptions: timings.maxInterruptions,
        recordBudgetMs: timings.recordBudgetMs,
        returnReserveMs: timings.returnReserveMs,
        outboxQueues,
      },
      pool: pool(consumerRoleName(name), deployment.maxConcurrency + 1),
      sqs,
      eventBridge,
      logger,
      retryPolicy: config.retryPolicy,
      onOutcome: observe(name),
    });
    const drain = createBackstopDrain(
      {
        consumer: name,
        sourceQueueUrl: created.source.url,
        sourceMaxReceiveCount: maxReceiveCount,
        sourceRetentionSeconds: deployment.queueRetentionSeconds,
        databaseUrl,
        opsBusName: LOCAL_OPS_BUS,
      },
      {
        pool: pool(consumerRoleName(name), 2),
        eventBridge,
        logger,
        onOutcome: observe(`${name}-backstop`),
        definition: deployment.definition,
      },
    );
    const onError = (error: unknown) => say(`poller     ${name}: ${describeError(error).message}`);
    pollers.push(
      startPoller({
        source: {
          sqs,
          queueUrl: created.source.url,
          queueArn: created.source.arn,
          batchSize: deployment.batchSize,
          waitSeconds: config.pollWaitSeconds,
        },
        handler: consumer,
        functionName: name,
        concurrency: deployment.maxConcurrency,
        timeoutSeconds: deployment.functionTimeoutSeconds,
        onError,
        onTimeout: (timeout) =>
          say(
            `TIMEOUT    ${name}: an invocation of ${timeout.records.length} record(s) ran past its ${deployment.functionTimeoutSeconds}s timeout; nothing deleted, the batch comes back`,
          ),
      }),
      startPoller({
        source: {
          sqs,
          queueUrl: created.backstop.url,
          queueArn: created.backstop.arn,
          batchSize: 10,
          waitSeconds: config.pollWaitSeconds,
        },
        handler: drain,
        functionName: `${name}-backstop-drain`,
        concurrency: 1,
        timeoutSeconds: 30,
        onError,
      }),
    );
    say(
      `consumer   ${name}: ${created.source.url} (backstop after ${maxReceiveCount} receives: ${created.backstop.url})${Object.keys(outboxQueues).length > 0 ? `; sends follow-ups to ${Object.keys(outboxQueues).join(", ")}` : ""}`,
    );
  }

  // The dead-letter API.
  const issuer = await createLocalIssuer();
  const opsPool = pool("jobfence_ops", 4);
  const api = createDeadLetterApi({
    pool: opsPool,
    sqs,
    verifier: createTokenVerifier({ issuer: issuer.issuer, audience: issuer.audience, jwks: issuer.jwks }),
    // Made at start: cursors and plan tokens of an earlier run stop verifying, as after a rotation.
    sealKey: sealKey(randomBytes(32)),
    bulk: { confirmAbove: config.bulkConfirmAbove },
    logger,
  });
  const server = await listeningOn("api", config.ports.api, () =>
    serveHttpApi(api, { port: config.ports.api }),
  );
  cleanups.push(() => server.close());
  say(`api        ${server.url}/v1/core/dead-letters`);

  // Schedules.
  const cleanupPool = pool("jobfence_cleanup", 1);
  const timers = [
    setInterval(() => {
      runFenceCleanup({ db: cleanupPool, budgetMs: 10_000 })
        .then(
          (r) => r.deleted > 0 && say(`cleanup    deleted ${r.deleted} expired fence(s), ${r.backlog} left`),
        )
        .catch((error) => say(`cleanup    failed: ${describeError(error).message}`));
    }, config.cleanupIntervalMs),
    setInterval(() => {
      resolveHealedDeadLetters(opsPool)
        .then((healed) => healed > 0 && say(`escalate   ${healed} dead letter(s) of applied jobs superseded`))
        .then(() => escalateStaleDeadLetters({ db: opsPool, eventBridge, opsBusName: LOCAL_OPS_BUS }))
        .catch((error) => say(`escalate   failed: ${describeError(error).message}`));
    }, config.escalationIntervalMs),
    // Each sending consumer's scheduled outbox relay, as its EventBridge schedule runs it.
    ...relays.map((relay) => {
      const metrics = new Metrics({
        namespace: METRICS_NAMESPACE,
        serviceName: outboxRelayService(relay.consumer),
      });
      let running = false;
      return setInterval(() => {
        if (running) return; // a run still going (a slow SQS): the schedule skips a beat
        running = true;
        outboxRelayInvocation({
          config: { consumer: relay.consumer, opsBusName: LOCAL_OPS_BUS, outboxQueues: relay.queues },
          pool: relay.pool,
          sqs,
          eventBridge,
          metrics,
          logger,
        })
          .then((r) => {
            metrics.publishStoredMetrics();
            if (!r) say(`outbox     ${relay.consumer}: relay failed; its follow-ups wait for the next run`);
            else if (r.sent > 0)
              say(`outbox     ${relay.consumer}: relayed ${r.sent} follow-up(s) left behind`);
            for (const u of r?.undelivered ?? [])
              say(
                `UNDELIVERED ${relay.consumer} → ${u.key.target} job ${u.key.jobId}: dead letter ${u.deadLetterId}`,
              );
          })
          .finally(() => {
            running = false;
          });
      }, config.outboxIntervalMs);
    }),
  ];
  cleanups.push(async () => {
    for (const timer of timers) clearInterval(timer);
  });

  // The bulk-operations worker: what the scheduled Lambda does in AWS, as one loop that runs due
  // chunks and waits for the next one (each run is bounded; a stop aborts the wait).
  const workerPool = pool("jobfence_ops", 2);
  const stopWorker = new AbortController();
  const worker = (async () => {
    while (!stopWorker.signal.aborted) {
      try {
        const report = await runBulkOperations(
          { pool: workerPool, sqs, logger },
          { budgetMs: 5_000, signal: stopWorker.signal },
        );
        if (report.rows > 0)
          say(`bulk       ${report.rows} dead letter(s) handled in ${report.chunks} chunk(s)`);
        if (report.failedChunks > 0)
          say(`bulk       ${report.failedChunks} chunk(s) failed; retried with backoff`);
      } catch (error) {
        say(`bulk       worker failed: ${describeError(error).message}`);
      }
      await new Promise((resolve) => setTimeout(resolve, config.bulkWorkerIdleMs));
    }
  })();
  cleanups.push(async () => {
    stopWorker.abort();
    await worker;
  });

  const info: StackInfo = {
    apiUrl: server.url,
    sqsEndpoint,
    region: LOCAL_REGION,
    databaseUrl,
    providerUrl: provider.url,
    queues,
    tokens: await issuer.standardTokens(),
  };
  await writeFile(stackFilePath(config.localDir), `${JSON.stringify(info, null, 2)}\n`);

  // Progress: a summary line when counts change, and stats.json for the demo.
  let last = "";
  const progress = setInterval(() => {
    const now = JSON.stringify(stats);
    if (now === last) return;
    last = now;
    writeFile(join(config.localDir, "stats.json"), `${now}\n`).catch(() => {});
    for (const [consumer, counts] of Object.entries(stats)) {
      say(
        `progress   ${consumer}: ${Object.entries(counts)
          .map(([k, v]) => `${v} ${k}`)
          .join(", ")}`,
      );
    }
  }, 2000);
  cleanups.push(async () => clearInterval(progress));

  return { info, stats, stop };
}

/** Creates (or updates) a consumer's backstop and source queues; returns their URLs and ARNs. */
async function createQueues(
  sqs: SQSClient,
  endpoint: string,
  deployment: ConsumerDeployment,
  timings: DeliveryTimings,
): Promise<{ source: { url: string; arn: string }; backstop: { url: string; arn: string } }> {
  // What the doctor checks them against, too.
  const expected = expectedQueues(deployment, timings);
  const fifo = deployment.fifo ? { FifoQueue: "true" } : undefined;
  const backstop = await ensureQueue(sqs, endpoint, expected.backstop.name, fifo, {
    MessageRetentionPeriod: String(expected.backstop.retentionSeconds),
  });
  const source = await ensureQueue(sqs, endpoint, expected.source.name, fifo, {
    VisibilityTimeout: String(expected.source.visibilityTimeoutSeconds),
    MessageRetentionPeriod: String(expected.source.retentionSeconds),
    RedrivePolicy: JSON.stringify({
      deadLetterTargetArn: backstop.arn,
      maxReceiveCount: expected.source.maxReceiveCount,
    }),
  });
  return { source, backstop };
}

/**
 * Creates a queue if missing and sets its attributes either way: CreateQueue refuses an existing
 * queue whose attributes differ, and a restart with other settings must still come up.
 */
async function ensureQueue(
  sqs: SQSClient,
  endpoint: string,
  name: string,
  creationAttributes: Record<string, string> | undefined,
  attributes: Record<string, string>,
): Promise<{ url: string; arn: string }> {
  await sqs.send(
    new CreateQueueCommand({
      QueueName: name,
      ...(creationAttributes ? { Attributes: creationAttributes } : {}),
    }),
  );
  // The emulator's own URLs name a host that does not resolve: address it path-style.
  const url = `${endpoint}/${LOCAL_ACCOUNT}/${name}`;
  await sqs.send(new SetQueueAttributesCommand({ QueueUrl: url, Attributes: attributes }));
  const described = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["QueueArn"] }),
  );
  return { url, arn: described.Attributes?.QueueArn as string };
}

/**
 * A stack killed without a chance to stop (SIGKILL) leaves its embedded PostgreSQL running, which
 * would keep the data directory locked. Stop that orphan so this start can use the directory.
 */
async function stopOrphanedPostgres(dataDir: string, say: (line: string) => void): Promise<void> {
  let pid: number;
  try {
    pid = Number((await readFile(join(dataDir, "postmaster.pid"), "utf8")).split("\n")[0]);
  } catch {
    return;
  }
  if (!Number.isInteger(pid) || pid <= 0 || !alive(pid)) return;
  say(`postgres   stopping PostgreSQL ${pid} left running by an earlier stack`);
  process.kill(pid, "SIGINT"); // fast shutdown: rolls back open transactions, keeps committed data
  for (let i = 0; i < 100 && alive(pid); i++) await new Promise((r) => setTimeout(r, 100));
  if (alive(pid)) throw new Error(`PostgreSQL ${pid} on ${dataDir} did not stop; stop it and start again`);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Registers every consumer's declared follow-up targets, as the migrate function does on deploy. */
async function registerFollowUpTargets(
  databaseUrl: string,
  declared: Readonly<Record<string, readonly string[]>>,
): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await registerDeclaredFollowUpTargets(client, declared);
  } finally {
    await client.end();
  }
}

/** Registers `consumer`'s queues and fence TTL, as the migrate function does on deploy. */
async function registerQueues(
  databaseUrl: string,
  consumer: string,
  queues: readonly string[],
): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await registerConsumerQueues(client, consumer, queues);
    // The database judges a copy's age by the consumer's TTL (migration 0021); the local stack's
    // consumers run with the default one.
    await registerFenceTtl(client, consumer, CONSUMER_DEFAULTS.fenceTtlSeconds);
  } finally {
    await client.end();
  }
}
