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
import { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import { SQSClient } from "@aws-sdk/client-sqs";
import middy, { type MiddyfiedHandler } from "@middy/core";
import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from "aws-lambda";
import type pg from "pg";
import type { z } from "zod";
import {
  type ConsumerConfig,
  type ConsumerConfigInput,
  consumerConfigFromEnv,
  parseConsumerConfig,
} from "./config/consumer-config.ts";
import { CONSUMER_NAME } from "./config/fields.ts";
import { createPool } from "./db/pool.ts";
import { describeError } from "./dead-letters/last-error.ts";
import { ConfigurationError } from "./errors.ts";
import { type BatchRecord, settleBatch } from "./fence/batch-transaction.ts";
import { validateFenceTtl } from "./fence/ttl.ts";
import type { Transaction } from "./fence/work-transaction.ts";
import { METRIC, METRICS_NAMESPACE } from "./metrics/names.ts";
import { fenceTransaction } from "./middleware/fence-transaction.ts";
import { observeOutcome } from "./middleware/observe-outcome.ts";
import { parseEnvelope } from "./middleware/parse-envelope.ts";
import { recordDeadLetter } from "./middleware/record-dead-letter.ts";
import { type OutcomeObserver, RecordProtocol, type WorkJob, workJob } from "./record/protocol.ts";
import type { PreparedRecord, ReadMessage, RecordContext, RecordOutcome } from "./record/record-context.ts";
import { attemptOf, orderedGroupOf, sqsBatchProcessor } from "./record/sqs-batch.ts";
import {
  DEFAULT_RETRY_POLICY,
  type RetryOverride,
  type RetryPolicy,
  resolveRetryPolicy,
} from "./retry/policy.ts";
import { queueUrlFromArn } from "./sqs/queue-url.ts";

export type { OutcomeObserver, Transaction, WorkJob };

/**
 * How the records of one SQS batch commit: `per-record` (the default) gives each record its own
 * fence transaction; `batch` runs the batch's records in one transaction with one commit, and pays
 * for isolation only when a record fails (see shared/fence/batch-transaction.ts).
 */
export type CommitMode = "per-record" | "batch";

/** What a consumer author writes. */
export interface ConsumerDefinition<S extends z.ZodType> {
  /** The consumer's name: half of the fence key and the `consumer` of its dead letters. Lowercase, digits, dashes. */
  readonly name: string;
  /** The payload schema; a payload it refuses is poison. */
  readonly payload: S;
  /**
   * The effect. Runs inside the fence transaction on `tx`; throw `PermanentJobError` for a failure
   * that retrying cannot fix, anything else to retry.
   */
  readonly work: (job: WorkJob<z.output<S>>, tx: Transaction) => Promise<void>;
  /**
   * The payload fields that define the effect, when not all of them do: the job's fingerprint is
   * taken over `tenant_id` and what this returns instead of the whole payload (SPEC §2). A
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
   * @default read from the environment (`DATABASE_URL`, `JOBFENCE_OPS_BUS_NAME`, …)
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
export function createConsumer<S extends z.ZodType>(
  definition: ConsumerDefinition<S>,
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
        retryPolicy,
        functionTimeoutSeconds: config.functionTimeoutSeconds,
        fenceTtlSeconds: config.fenceTtlSeconds,
      }),
    );
  }
  if (problems.length > 0 || !config || !retryPolicy)
    throw new ConfigurationError(`consumer "${definition.name}"`, problems);

  const logger = runtime.logger ?? new Logger({ serviceName: definition.name });
  logger.appendPersistentKeys({ consumer: definition.name });
  const metrics =
    runtime.metrics ?? new Metrics({ namespace: METRICS_NAMESPACE, serviceName: definition.name });
  const pool =
    runtime.pool ??
    createPool({
      connectionString: config.databaseUrl,
      max: config.poolMax,
      lockTimeoutMs: config.lockTimeoutMs,
      ...(config.dbRole ? { role: config.dbRole } : {}),
      applicationName: `jobfence:${definition.name}`,
      onIdleError: (error) => logger.warn("idle database connection failed", { error: error.message }),
    });
  const sqs = runtime.sqs ?? new SQSClient({});
  const eventBridge = runtime.eventBridge ?? new EventBridgeClient({});

  const commitMode = definition.commitMode ?? "per-record";
  const protocol = new RecordProtocol<S>({
    consumer: definition.name,
    payload: definition.payload,
    work: definition.work,
    ...(definition.fingerprint ? { fingerprint: definition.fingerprint } : {}),
    pool,
    ttlSeconds: config.fenceTtlSeconds,
    sqs,
    retryPolicy,
    random: runtime.random ?? Math.random,
    deadLetters: { pool, consumer: definition.name, eventBridge, opsBusName: config.opsBusName },
    metrics,
    logger,
    ...(runtime.onOutcome ? { onOutcome: runtime.onOutcome } : {}),
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
  ): Promise<Map<SQSRecord, PreparedRecord<z.output<S>>>> => {
    const batch = records.map(
      (record): BatchRecord<z.output<S>> & { record: SQSRecord; read: ReadMessage<z.output<S>> } => {
        const read = protocol.readMessage(record);
        const message = "poison" in read ? undefined : read;
        return {
          record,
          read,
          message,
          group: orderedGroupOf(record),
          work: (tx) => definition.work(workJob(record, (message as NonNullable<typeof message>).job), tx),
        };
      },
    );
    const prepared = new Map<SQSRecord, PreparedRecord<z.output<S>>>(
      batch.map((r) => [r.record, { read: r.read }]),
    );
    try {
      const report = await settleBatch(
        { pool, consumer: definition.name, ttlSeconds: config.fenceTtlSeconds },
        batch,
      );
      for (const [r, settlement] of report.settlements) {
        const { record, read } = r as (typeof batch)[number];
        prepared.set(record, { read, settlement });
      }
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

  const processBatch = sqsBatchProcessor<z.output<S>>({
    contextOf: (record, prepared) => ({
      record,
      attempt: attemptOf(record),
      queueUrl: config.queueUrl ?? queueUrlFromArn(record.eventSourceARN),
      ...(prepared?.settlement ? { settlement: prepared.settlement } : {}),
      ...(prepared ? { read: prepared.read } : {}),
      state: { step: "received" },
    }),
    processRecord,
    ...(commitMode === "batch" ? { settleBatch: settle } : {}),
    keepGroupOrder: true,
    metrics,
    logger,
  });

  const handler = middy<SQSEvent, SQSBatchResponse, Error, Context>(processBatch)
    .use(injectLambdaContext(logger))
    .use(logMetrics(metrics));
  return Object.assign(handler, { consumer: definition.name, retryPolicy, commitMode, config, pool });
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
