/**
 * The consumer factory: what a consumer author calls. Give it a name, a zod payload schema and
 * `work(job, tx)`; get back a Lambda handler for SQS events that reports partial batch failures.
 *
 * The path of one record is shared/record/protocol.ts, which reads in the order it runs. Here it is
 * wired: the protocol's steps behind Middy middlewares (one per concern: schema validation, the
 * fence transaction, dead-letter writing, observation), one chain per record, records one after
 * another so one record's failure never touches a batch-mate's committed work, and in batch-commit
 * mode one shared transaction settling the batch first (shared/fence/batch-transaction.ts).
 */

import { Logger } from "@aws-lambda-powertools/logger";
import { injectLambdaContext } from "@aws-lambda-powertools/logger/middleware";
import { Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import type { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import type { SQSClient } from "@aws-sdk/client-sqs";
import middy, { type MiddyfiedHandler } from "@middy/core";
import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from "aws-lambda";
import type pg from "pg";
import type { z } from "zod";
import { createEventBridgeClient, createSqsClient } from "./aws/clients.ts";
import {
  type ConsumerConfig,
  type ConsumerConfigInput,
  consumerConfigFromEnv,
  parseConsumerConfig,
} from "./config/consumer-config.ts";
import { CONSUMER_NAME, databaseConnection } from "./config/fields.ts";
import { createPool } from "./db/pool.ts";
import { EMPTY_LEDGER } from "./db/queries/message-attempts.ts";
import { reportJsonRuntime } from "./envelope/json-runtime-report.ts";
import { describeError } from "./errors/last-error.ts";
import { ConfigurationError } from "./errors.ts";
import { type BatchRecord, settleBatch } from "./fence/batch-transaction.ts";
import { validateFenceTtl } from "./fence/ttl.ts";
import type { Transaction, WorkQueries } from "./fence/work-transaction.ts";
import { METRIC, METRICS_NAMESPACE } from "./metrics/names.ts";
import { fenceTransaction } from "./middleware/fence-transaction.ts";
import { observeOutcome } from "./middleware/observe-outcome.ts";
import { parseEnvelope } from "./middleware/parse-envelope.ts";
import { recordDeadLetter } from "./middleware/record-dead-letter.ts";
import type { FollowUpSchemas } from "./outbox/follow-up.ts";
import { type OutcomeObserver, RecordProtocol, type WorkJob, workJob } from "./record/protocol.ts";
import type { PreparedRecord, ReadMessage, RecordContext, RecordOutcome } from "./record/record-context.ts";
import { returnToQueue } from "./record/return-to-queue.ts";
import {
  INTERRUPT_SHARE_OF_RESERVE,
  type InvocationClock,
  orderedGroupOf,
  receiveCountOf,
  sqsBatchProcessor,
} from "./record/sqs-batch.ts";
import {
  defaultRecordBudgetMs,
  defaultReturnReserveMs,
  validateDeliveryTimings,
  validateTimeBudget,
} from "./retry/delivery-timings.ts";
import {
  DEFAULT_RETRY_POLICY,
  type RetryOverride,
  type RetryPolicy,
  resolveRetryPolicy,
} from "./retry/policy.ts";
import { isFifoQueue, queueUrlFromArn } from "./sqs/queue-url.ts";
import { inSpan, RecordSpans, traceparentOf } from "./tracing/spans.ts";

export type { OutcomeObserver, Transaction, WorkJob, WorkQueries };

/**
 * How the records of one SQS batch commit: `per-record` (the default) gives each record its own
 * fence transaction; `batch` runs the batch's records in one transaction with one commit, and pays
 * for isolation only when a record fails (see shared/fence/batch-transaction.ts).
 */
export type CommitMode = "per-record" | "batch";

/** What a consumer author writes. */
export interface ConsumerDefinition<S extends z.ZodType, F extends FollowUpSchemas = Record<never, never>> {
  /** The consumer's name: half of the fence key and the `consumer` of its dead letters. Lowercase, digits, dashes. */
  readonly name: string;
  /** The payload schema; a payload it refuses is poison. */
  readonly payload: S;
  /**
   * The effect. Runs inside the fence transaction on `tx`; throw `PermanentJobError` for a failure
   * that retrying cannot fix, anything else to retry. `tx.send(target, { payload, key? })` writes a
   * follow-up to the outbox in the same transaction: sent only if it commits, and then at least once.
   */
  readonly work: (job: WorkJob<z.output<S>>, tx: Transaction<F>) => Promise<void>;
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

/** The Lambda handler, with what a host (the local stack, a test) needs to manage it. */
export type ConsumerHandler = MiddyfiedHandler<SQSEvent, SQSBatchResponse, Error, Context> & {
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
};

/**
 * Builds the handler. Everything is validated here, at start-up (a Lambda's init), so a
 * misconfigured consumer never receives a message: every problem is reported in one
 * {@link ConfigurationError}.
 */
export function createConsumer<S extends z.ZodType, F extends FollowUpSchemas = Record<never, never>>(
  definition: ConsumerDefinition<S, F>,
  runtime: ConsumerRuntime = {},
): ConsumerHandler {
  const problems: string[] = [];
  if (!CONSUMER_NAME.test(definition.name)) {
    problems.push(
      `name "${definition.name}" must be 1–63 lowercase letters, digits or dashes, starting with a letter`,
    );
  }
  const config = collect(problems, () =>
    runtime.config ? parseConsumerConfig(runtime.config, definition.name) : consumerConfigFromEnv(),
  );
  const retryPolicy = collect(problems, () =>
    definition.retry
      ? resolveRetryPolicy(definition.retry, runtime.retryPolicy)
      : (runtime.retryPolicy ?? DEFAULT_RETRY_POLICY),
  );
  if (config && retryPolicy) {
    problems.push(
      ...validateFenceTtl({
        queueRetentionSeconds: config.queueRetentionSeconds,
        backstopRetentionSeconds: config.backstopRetentionSeconds,
        retryPolicy,
        functionTimeoutSeconds: config.functionTimeoutSeconds,
        fenceTtlSeconds: config.fenceTtlSeconds,
        // Unknown until a record names its queue: FIFO, the longer of the two waits.
        fifo: config.fifo ?? (config.queueUrl === undefined ? true : isFifoQueue(config.queueUrl)),
      }),
    );
  }
  const timings = config && {
    recordBudgetMs:
      config.recordBudgetMs ?? defaultRecordBudgetMs(config.functionTimeoutSeconds, config.lockTimeoutMs),
    returnReserveMs: config.returnReserveMs ?? defaultReturnReserveMs(config.functionTimeoutSeconds),
  };
  if (config && retryPolicy && timings) problems.push(...timingProblems(config, retryPolicy, timings));
  if (config)
    problems.push(...followUpProblems(definition.name, definition.sends ?? {}, config.outboxQueues));
  if (problems.length > 0 || !config || !retryPolicy || !timings)
    throw new ConfigurationError(`consumer "${definition.name}"`, problems);
  const { queueUrl } = config;

  const logger = runtime.logger ?? new Logger({ serviceName: definition.name });
  logger.appendPersistentKeys({ consumer: definition.name });
  const metrics =
    runtime.metrics ?? new Metrics({ namespace: METRICS_NAMESPACE, serviceName: definition.name });
  reportJsonRuntime({ logger, metrics });
  const pool =
    runtime.pool ??
    createPool({
      ...databaseConnection(config),
      max: config.poolMax,
      lockTimeoutMs: config.lockTimeoutMs,
      ...(config.dbRole ? { role: config.dbRole } : {}),
      applicationName: `jobfence:${definition.name}`,
      onIdleError: (error) => logger.warn("idle database connection failed", { error: error.message }),
    });
  const sqs = runtime.sqs ?? createSqsClient();
  const eventBridge = runtime.eventBridge ?? createEventBridgeClient();

  const commitMode = definition.commitMode ?? "per-record";
  const spans = new RecordSpans(definition.name);
  const protocol = new RecordProtocol<S>({
    consumer: definition.name,
    payload: definition.payload,
    work: definition.work,
    ...(definition.fingerprint ? { fingerprint: definition.fingerprint } : {}),
    ...(definition.sends && Object.keys(definition.sends).length > 0
      ? { followUps: { consumer: definition.name, sends: definition.sends, queues: config.outboxQueues } }
      : {}),
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
    deadLetters: { pool, consumer: definition.name, eventBridge, opsBusName: config.opsBusName },
    metrics,
    logger,
    ...(runtime.onOutcome ? { onOutcome: runtime.onOutcome } : {}),
    spans,
  });

  // Middy is an onion: `before` runs outside-in, `after` and `onError` inside-out. Declared from
  // the outside in, each layer catches what the layers inside it leave: observation sees every
  // outcome, dead-letter writing every failure, and the fence transaction wraps the work alone.
  // The timeout guard belongs to the invocation, not to each record (it would cost every record a
  // timer and an AbortController).
  const processRecord = middy<RecordContext<z.output<S>>, RecordOutcome>(
    (rc: RecordContext<z.output<S>>) => protocol.work(rc),
    {
      timeoutEarlyInMillis: 0,
    },
  )
    .use(observeOutcome(protocol))
    .use(recordDeadLetter(protocol))
    .use(parseEnvelope(protocol))
    .use(fenceTransaction(protocol));

  const settle = async (
    records: readonly SQSRecord[],
    clock: InvocationClock,
  ): Promise<Map<SQSRecord, PreparedRecord<z.output<S>>>> => {
    // First deliveries go with the batch. A redelivery takes its own path (and on FIFO so do the
    // later records of its group): it claims its delivery in the attempt ledger right before its
    // work, so a marker names only a record whose work really started (protocol.ts).
    const batch = records.map(
      (record): BatchRecord<z.output<S>> & { record: SQSRecord; read: ReadMessage<z.output<S>> } => {
        const read = protocol.readMessage(record);
        const message = "poison" in read || receiveCountOf(record) > 1 ? undefined : read;
        return {
          record,
          read,
          message,
          group: orderedGroupOf(record),
          work: (transaction) => {
            const { job } = message as NonNullable<typeof message>;
            const span = spans.of(record);
            const tx = protocol.workTransaction(transaction, job, traceparentOf(span)) as Transaction<F>;
            return inSpan(span, () => definition.work(workJob(record, job, 1), tx));
          },
        };
      },
    );
    const prepared = new Map<SQSRecord, PreparedRecord<z.output<S>>>(
      batch.map((r) => [r.record, { read: r.read }]),
    );
    try {
      const report = await settleBatch(
        { pool, consumer: definition.name, ttlSeconds: config.fenceTtlSeconds, clock },
        batch,
      );
      for (const [r, settlement] of report.settlements) {
        const { record, read } = r as (typeof batch)[number];
        prepared.set(record, { read, settlement });
      }
      if (report.interrupted) {
        // The batch's time ran out in this record's work: the batch is rolled back and returned,
        // and the interruption is this record's.
        const { record, read } = report.interrupted as (typeof batch)[number];
        const rc = contextOf(record, { read }, clock.signal);
        if (!("poison" in read)) rc.state = { step: "parsed", message: read };
        // Its work was the one running when the deadline came.
        rc.working = true;
        await protocol.interrupt(rc, timings.returnReserveMs * INTERRUPT_SHARE_OF_RESERVE);
        metrics.addMetric(METRIC.recordInterrupted, MetricUnit.Count, 1);
        logger.warn(
          "the invocation's time ran out in the batch transaction; rolled back, every record returned",
          {
            message_id: record.messageId,
            receive_count: rc.receiveCount,
            records: records.length,
          },
        );
      }
      // The batch committed: its follow-ups go now, before any record is reported.
      await protocol.relay(report.followUps, { records: records.length });
      if (report.redos > 0) metrics.addMetric(METRIC.batchRedone, MetricUnit.Count, report.redos);
      if (report.redos > 0 || report.deferred > 0) {
        logger.info("batch transaction: records taken out, redone or left to transactions of their own", {
          settled: report.settlements.size,
          deferred: report.deferred,
          redos: report.redos,
          committed: report.committed,
          records: records.length,
        });
      }
    } catch (error) {
      // A bug, not a database or work error (those are settlements): the records the batch did
      // not settle run one transaction each; their fences keep that safe.
      logger.error("batch transaction failed unexpectedly; records run one by one", {
        error: describeError(error),
      });
    }
    return prepared;
  };

  // The records of an event come from one queue: its URL is derived once, not once per record.
  let lastQueue: { arn: string; url: string } | undefined;
  const queueUrlOf = (arn: string): string => {
    if (lastQueue === undefined || lastQueue.arn !== arn) lastQueue = { arn, url: queueUrlFromArn(arn) };
    return lastQueue.url;
  };

  function contextOf(
    record: SQSRecord,
    prepared: PreparedRecord<z.output<S>> | undefined,
    signal: AbortSignal,
  ): RecordContext<z.output<S>> {
    return {
      record,
      receiveCount: receiveCountOf(record),
      ledger: EMPTY_LEDGER,
      claimed: false,
      signal,
      queueUrl: queueUrl ?? queueUrlOf(record.eventSourceARN),
      span: spans.of(record),
      ...(prepared?.settlement ? { settlement: prepared.settlement } : {}),
      ...(prepared ? { read: prepared.read } : {}),
      state: { step: "received" },
    };
  }

  const processBatch = sqsBatchProcessor<z.output<S>>({
    contextOf,
    processRecord,
    ...(commitMode === "batch" ? { settleBatch: settle } : {}),
    keepGroupOrder: true,
    timing: {
      recordBudgetMs: timings.recordBudgetMs,
      returnReserveMs: timings.returnReserveMs,
      interrupt: (rc) => protocol.interrupt(rc, timings.returnReserveMs * INTERRUPT_SHARE_OF_RESERVE),
      returnUnrun: (records, timeoutMs) => returnToQueue(sqs, queueUrl, records, timeoutMs),
    },
    metrics,
    logger,
  });

  // A record the invocation did not report (left unstarted, returned, interrupted) ends its span here.
  const processTraced = async (event: SQSEvent, context: Context): Promise<SQSBatchResponse> => {
    try {
      return await processBatch(event, context);
    } finally {
      spans.endRest(event.Records ?? []);
    }
  };
  const handler = middy<SQSEvent, SQSBatchResponse, Error, Context>(processTraced)
    .use(injectLambdaContext(logger))
    .use(logMetrics(metrics));
  return Object.assign(handler, { consumer: definition.name, retryPolicy, commitMode, config, pool });
}

/**
 * The delivery timings validated together (docs/design.md §4.5), as far as the configuration tells them: all
 * of them when the deployment passed the queue's redrive count and visibility timeout (the CDK
 * construct does), the time budget alone otherwise (the local stack, tests).
 */
function timingProblems(
  config: ConsumerConfig,
  retryPolicy: RetryPolicy,
  budget: { recordBudgetMs: number; returnReserveMs: number },
): string[] {
  const known = {
    functionTimeoutSeconds: config.functionTimeoutSeconds,
    lockTimeoutMs: config.lockTimeoutMs,
    ...budget,
  };
  if (config.maxReceiveCount === undefined || config.visibilityTimeoutSeconds === undefined)
    return validateTimeBudget(known);
  return validateDeliveryTimings({
    ...known,
    retryPolicy,
    maxInterruptions: config.maxInterruptions,
    maxReceiveCount: config.maxReceiveCount,
    visibilityTimeoutSeconds: config.visibilityTimeoutSeconds,
    batchingWindowSeconds: config.batchingWindowSeconds,
    queueRetentionSeconds: config.queueRetentionSeconds,
    fifo: config.fifo ?? false,
  });
}

/**
 * The follow-up targets against the deployment's queues: every target a consumer name with a
 * queue URL, and no queue for a target the definition does not declare (a deployment wired for
 * another version of the consumer).
 */
function followUpProblems(
  consumer: string,
  sends: FollowUpSchemas,
  queues: Readonly<Record<string, string>>,
): string[] {
  const problems: string[] = [];
  for (const [target, declared] of Object.entries(sends)) {
    if (!CONSUMER_NAME.test(target)) {
      problems.push(`sends: "${target}" is not a consumer name`);
      continue;
    }
    const schema = (declared as { safeParse?: unknown; payload?: { safeParse?: unknown } } | null) ?? {};
    if (typeof schema.safeParse !== "function" && typeof schema.payload?.safeParse !== "function") {
      problems.push(`sends: "${target}" must be the target's definition or its payload schema`);
    }
    if (!Object.hasOwn(queues, target)) {
      problems.push(
        `sends: "${target}" has no queue URL: the deployment gives each target's (outboxQueues, JOBFENCE_OUTBOX_QUEUES)`,
      );
    }
  }
  for (const target of Object.keys(queues)) {
    if (!Object.hasOwn(sends, target)) {
      problems.push(
        `outboxQueues: "${target}" is not a target of consumer "${consumer}" (its definition's sends)`,
      );
    }
  }
  return problems;
}

function collect<T>(problems: string[], build: () => T): T | undefined {
  try {
    return build();
  } catch (error) {
    if (error instanceof ConfigurationError) problems.push(...error.problems);
    else throw error;
    return undefined;
  }
}
