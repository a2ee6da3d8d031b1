/**
 * The consumer factory: what a consumer author calls. Give it a name, a zod payload schema and
 * `work(job, tx)`; get back a Lambda handler for SQS events that reports partial batch failures.
 *
 * It only validates (shared/config/consumer-checks.ts) and wires. The path of one record is the
 * spine, shared/record/spine.ts, which reads in the order it runs; the batch loop
 * (shared/record/batch-loop.ts) runs it for each record of an event, after the batch transaction
 * in batch-commit mode (shared/record/batch-commit.ts). A user who wants their own Middy
 * middlewares around or between jobfence's builds the same handler from `prepareConsumer` and the
 * middlewares of shared/middy/.
 */

import { Logger } from "@aws-lambda-powertools/logger";
import { injectLambdaContext } from "@aws-lambda-powertools/logger/middleware";
import { Metrics } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import type { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import type { SQSClient } from "@aws-sdk/client-sqs";
import middy, { type MiddyfiedHandler } from "@middy/core";
import type { Context, SQSBatchResponse, SQSEvent } from "aws-lambda";
import type pg from "pg";
import type { z } from "zod";
import { createEventBridgeClient, createSqsClient } from "./aws/clients.ts";
import { checkConsumer } from "./config/consumer-checks.ts";
import type { ConsumerConfig, ConsumerConfigInput } from "./config/consumer-config.ts";
import { databaseConnection } from "./config/fields.ts";
import { createPool } from "./db/pool.ts";
import { assertDataDeclaration, type DataDeclaration } from "./doctor/declared-data.ts";
import { reportJsonRuntime } from "./envelope/json-runtime-report.ts";
import { ConfigurationError } from "./errors/configuration.ts";
import type { WorkQueries } from "./fence/work-transaction.ts";
import { INTERRUPT_SHARE_OF_RESERVE } from "./invocation/deadline.ts";
import { METRICS_NAMESPACE } from "./metrics/names.ts";
import type { FollowUpSchemas } from "./outbox/follow-up.ts";
import type { Transaction } from "./outbox/work-follow-ups.ts";
import { WorkFollowUps } from "./outbox/work-follow-ups.ts";
import { batchCommit } from "./record/batch-commit.ts";
import { batchLoop } from "./record/batch-loop.ts";
import type { OutcomeObserver } from "./record/observe.ts";
import type { RecordOutcome } from "./record/outcome.ts";
import type { RecordContext, WorkJob } from "./record/record-context.ts";
import { returnToQueue } from "./record/return-to-queue.ts";
import { RecordSpine } from "./record/spine.ts";
import type { RetryOverride, RetryPolicy } from "./retry/policy.ts";
import type { StepsFunction } from "./steps/run-steps.ts";
import { RecordSpans } from "./tracing/spans.ts";

export type { OutcomeObserver, Transaction, WorkJob, WorkQueries };

/**
 * How the records of one SQS batch commit: `per-record` (the default) gives each record its own
 * fence transaction; `batch` runs the batch's records in one transaction with one commit, and pays
 * for isolation only when a record fails (see shared/fence/batch-transaction.ts).
 */
export type CommitMode = "per-record" | "batch";

/**
 * What a consumer author writes. `R` is what `steps` returns, which `work` receives as `job.steps`.
 */
export interface ConsumerDefinition<
  S extends z.ZodType,
  F extends FollowUpSchemas = Record<never, never>,
  R = undefined,
> {
  /** The consumer's name: half of the fence key and the `consumer` of its dead letters. Lowercase, digits, dashes. */
  readonly name: string;
  /** The payload schema; a payload it refuses is poison. */
  readonly payload: S;
  /**
   * The effect. Runs inside the fence transaction on `tx`; throw `PermanentJobError` for a failure
   * that retrying cannot fix, anything else to retry. `tx.send(target, { payload, key? })` writes a
   * follow-up to the outbox in the same transaction: sent only if it commits, and then at least once.
   */
  readonly work: (job: WorkJob<z.output<S>, R>, tx: Transaction<F>) => Promise<void>;
  /**
   * The job's calls outside the database (a payment, an email), run before the fence transaction:
   * each `job.step(name, schema, call)` calls with a provider idempotency key derived from the
   * consumer, the job id and the step's name, and checkpoints the result as soon as it returns; a
   * retry, a duplicate or a replay of the job gets the recorded results without calling again.
   * What this returns, the work receives as `job.steps` (docs/consumers.md "Steps"). A consumer
   * with steps commits per record. @default none: nothing is read or written for steps
   */
  readonly steps?: StepsFunction<z.output<S>, R>;
  /**
   * The consumers this one's work may send follow-ups to, by name, each with what it parses them
   * with: its definition (`{ "notify-user": notifyUserConsumer }`) or its payload schema. The
   * deployment gives each its queue (`JOBFENCE_OUTBOX_QUEUES`), checked at start-up; the registry
   * checks at synth that each is a registered consumer. @default none
   */
  readonly sends?: F;
  /**
   * The payload fields that define the effect, when not all of them do: the job's fingerprint is
   * taken over `tenant_id` and what this returns instead of the whole payload (docs/design.md §2.2). A
   * duplicate whose fingerprint differs from its fence's is a conflict.
   * @default the whole payload, as received
   */
  readonly fingerprint?: (payload: z.output<S>) => unknown;
  /** A change to the default retry policy, with its required rationale. */
  readonly retry?: RetryOverride;
  /** @default "per-record" */
  readonly commitMode?: CommitMode;
  /**
   * The service's own tables (or whole schemas) its work uses, outside jobfence's `core`: made and
   * granted to the consumer's role by the service's migration tool. The doctor checks the role's
   * privileges against it, and sharing a table with other consumers is declared here
   * (docs/schema.md). @default none: the consumer works on its own schema only
   */
  readonly data?: DataDeclaration;
}

/** What the environment provides; everything left out is built from {@link ConsumerConfig}. */
export interface ConsumerRuntime {
  /**
   * The configuration.
   * @default read from the environment (`DATABASE_URL` or `JOBFENCE_DB_SECRET_ARN` and the endpoint, `JOBFENCE_OPS_BUS_NAME`, …)
   */
  readonly config?: ConsumerConfigInput;
  /**
   * The pool. When given, the configuration's pool settings (poolMax, lockTimeoutMs, dbRole) are
   * the caller's business: they are not applied to it.
   * @default a pool built from `config`
   */
  readonly pool?: pg.Pool;
  /** @default a client for the region and endpoint of the environment */
  readonly sqs?: SQSClient;
  /** @default a client for the region and endpoint of the environment */
  readonly eventBridge?: EventBridgeClient;
  /** @default Powertools Metrics, namespace "jobfence", service = the consumer's name */
  readonly metrics?: Metrics;
  /** @default Powertools Logger, service = the consumer's name */
  readonly logger?: Logger;
  /** The policy a definition's override applies to. @default DEFAULT_RETRY_POLICY */
  readonly retryPolicy?: RetryPolicy;
  /** Uniform [0, 1) source for the backoff jitter. @default Math.random */
  readonly random?: () => number;
  /** Told every record's outcome (the local stack's progress). @default none */
  readonly onOutcome?: OutcomeObserver;
  /** Wall clock in ms (retention-aware retries). @default Date.now */
  readonly now?: () => number;
}

/** What a host (the local stack, a test) needs to manage a consumer. */
export interface ConsumerParts {
  /** The consumer's name. */
  readonly consumer: string;
  /** The effective retry policy. */
  readonly retryPolicy: RetryPolicy;
  /** How a batch's records commit. */
  readonly commitMode: CommitMode;
  /** The validated configuration. */
  readonly config: ConsumerConfig;
  /** The container's pool. */
  readonly pool: pg.Pool;
}

/** The Lambda handler, with what a host needs to manage it. */
export type ConsumerHandler = MiddyfiedHandler<SQSEvent, SQSBatchResponse, Error, Context> & ConsumerParts;

/**
 * A consumer's SQS handler however it was built (`createConsumer`, or a user's own Middy chain over
 * `prepareConsumer`), with what a host needs to manage it: what the local stack and the testing kit
 * invoke.
 */
export type HostedConsumer = ((event: SQSEvent, context: Context) => Promise<SQSBatchResponse>) &
  ConsumerParts;

/** The parts of a prepared consumer a host needs, beside its handler. */
export function consumerParts(prepared: ConsumerParts): ConsumerParts {
  const { consumer, retryPolicy, commitMode, config, pool } = prepared;
  return { consumer, retryPolicy, commitMode, config, pool };
}

/** Runs one record's path to its observed outcome: the spine's own, or a user's Middy chain. */
export type RecordRunner<P> = (rc: RecordContext<P>, context: Context) => Promise<RecordOutcome>;

/**
 * A consumer validated and wired, before it becomes a handler: its spine (what the middlewares of
 * jobfence/middy adapt) and the batch loop over it.
 */
export interface PreparedConsumer<S extends z.ZodType> extends ConsumerParts {
  readonly spine: RecordSpine<S>;
  readonly logger: Logger;
  readonly metrics: Metrics;
  /** The SQS handler's body: the batch loop, each record through `run`. @default the spine's handleRecord */
  records(run?: RecordRunner<z.output<S>>): (event: SQSEvent, context: Context) => Promise<SQSBatchResponse>;
}

/**
 * Validates and wires a consumer, at start-up (a Lambda's init): every problem is reported in one
 * ConfigurationError, so a misconfigured consumer never receives a message.
 */
export function prepareConsumer<
  S extends z.ZodType,
  F extends FollowUpSchemas = Record<never, never>,
  R = undefined,
>(definition: ConsumerDefinition<S, F, R>, runtime: ConsumerRuntime = {}): PreparedConsumer<S> {
  const { config, managed, retryPolicy, timings } = checkConsumer({
    name: definition.name,
    ...(definition.retry ? { retry: definition.retry } : {}),
    ...(definition.sends ? { sends: definition.sends } : {}),
    ...(runtime.config ? { config: runtime.config } : {}),
    ...(runtime.retryPolicy ? { retryPolicy: runtime.retryPolicy } : {}),
  });
  if (definition.data !== undefined) assertDataDeclaration(definition.name, definition.data);
  const consumer = definition.name;
  const commitMode = definition.commitMode ?? "per-record";
  if (definition.steps !== undefined && commitMode !== "per-record") {
    throw new ConfigurationError(`consumer "${consumer}"`, [
      `commitMode "${commitMode}" with steps: a job's steps run before its own fence transaction, one record at a time, so a consumer with steps commits per record (leave commitMode out)`,
    ]);
  }

  // A logger the host gives may serve several consumers (the local stack's): each gets a child of
  // its own, so one consumer's key never overwrites another's.
  const logger = runtime.logger?.createChild() ?? new Logger({ serviceName: consumer });
  logger.appendPersistentKeys({ consumer });
  const metrics = runtime.metrics ?? new Metrics({ namespace: METRICS_NAMESPACE, serviceName: consumer });
  reportJsonRuntime({ logger, metrics });
  const pool =
    runtime.pool ??
    createPool({
      ...databaseConnection(config),
      max: config.poolMax,
      lockTimeoutMs: config.lockTimeoutMs,
      ...(config.dbRole ? { role: config.dbRole } : {}),
      applicationName: `jobfence:${consumer}`,
      // Concurrent invocations may outnumber the connections: each waits within its own deadline.
      ...(managed ? { busyWait: "caller" as const } : {}),
      onIdleError: (error) => logger.warn("idle database connection failed", { error: error.message }),
    });
  const sqs = runtime.sqs ?? createSqsClient();
  const eventBridge = runtime.eventBridge ?? createEventBridgeClient();
  const spans = new RecordSpans(consumer);
  const sends = definition.sends ?? {};
  const outbox = new WorkFollowUps({
    consumer,
    ...(Object.keys(sends).length > 0 ? { followUps: { consumer, sends, queues: config.outboxQueues } } : {}),
    pool,
    sqs,
    metrics,
    logger,
  });
  const spine = new RecordSpine<S>({
    outbox,
    consumer,
    payload: definition.payload,
    work: definition.work,
    ...(definition.steps ? { steps: definition.steps as StepsFunction<z.output<S>, unknown> } : {}),
    ...(definition.fingerprint ? { fingerprint: definition.fingerprint } : {}),
    pool,
    ttlSeconds: config.fenceTtlSeconds,
    sqs,
    retryPolicy,
    maxInterruptions: config.maxInterruptions,
    queueRetentionSeconds: config.queueRetentionSeconds,
    functionTimeoutSeconds: config.functionTimeoutSeconds,
    ...(config.maxReceiveCount === undefined ? {} : { maxReceiveCount: config.maxReceiveCount }),
    random: runtime.random ?? Math.random,
    ...(runtime.now ? { now: runtime.now } : {}),
    deadLetters: { pool, consumer, eventBridge, opsBusName: config.opsBusName },
    ...(config.queueUrl ? { queueUrl: config.queueUrl } : {}),
    metrics,
    logger,
    ...(runtime.onOutcome ? { onOutcome: runtime.onOutcome } : {}),
    spans,
  });
  const settleFirst =
    commitMode === "batch"
      ? batchCommit(spine, {
          pool,
          ttlSeconds: config.fenceTtlSeconds,
          returnReserveMs: timings.returnReserveMs,
          consumer,
          outbox,
          metrics,
          logger,
        })
      : undefined;

  const records = (run: RecordRunner<z.output<S>> = (rc) => spine.handleRecord(rc)) => {
    const loop = batchLoop<z.output<S>>({
      receive: (record, signal, prepared) => spine.receive(record, signal, prepared),
      run,
      ...(settleFirst ? { settleFirst } : {}),
      keepGroupOrder: true,
      timing: {
        ...timings,
        interrupt: (rc) => spine.interrupt(rc, timings.returnReserveMs * INTERRUPT_SHARE_OF_RESERVE),
        returnUnrun: (unrun, timeoutMs) => returnToQueue(sqs, config.queueUrl, unrun, timeoutMs),
      },
      metrics,
      logger,
    });
    // A record the invocation did not report (left unstarted, returned, interrupted) ends its span here.
    return async (event: SQSEvent, context: Context): Promise<SQSBatchResponse> => {
      try {
        return await loop(event, context);
      } finally {
        spans.endRest(event.Records ?? []);
      }
    };
  };
  return { consumer, retryPolicy, commitMode, config, pool, spine, logger, metrics, records };
}

/** Builds the consumer's Lambda handler: {@link prepareConsumer}, its spine per record, Powertools around. */
export function createConsumer<
  S extends z.ZodType,
  F extends FollowUpSchemas = Record<never, never>,
  R = undefined,
>(definition: ConsumerDefinition<S, F, R>, runtime: ConsumerRuntime = {}): ConsumerHandler {
  const prepared = prepareConsumer(definition, runtime);
  const handler = middy<SQSEvent, SQSBatchResponse, Error, Context>(prepared.records())
    .use(injectLambdaContext(prepared.logger))
    .use(logMetrics(prepared.metrics));
  return Object.assign(handler, consumerParts(prepared));
}
