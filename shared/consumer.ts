/**
 * The consumer factory: what a consumer author calls. Give it a name, a zod payload schema and
 * `work(job, tx)`; get back a Lambda handler for SQS events that reports partial batch failures.
 *
 * The path of one record, from event to ack (SPEC §3–§5):
 *
 *   parse-envelope      body → job; a bad body, envelope or payload throws PoisonMessageError
 *   fence-transaction   BEGIN; insert fence (none: duplicate → ROLLBACK, skip work)
 *   work(job, tx)       the consumer's effect, on the fence's connection
 *   fence-transaction   COMMIT → applied            | any error → ROLLBACK, then:
 *   schedule-retry      transient, attempts left → ChangeMessageVisibility(backoff), stay in queue
 *                       transient, last attempt  → RetriesExhaustedError
 *   record-dead-letter  poison | hard | exhausted → dead letter (own transaction), alert, ack
 *                       write failed → stay in queue (the backstop queue catches it eventually)
 *   observe-outcome     one metric per outcome; a log line for anything but success or a duplicate
 *
 * Records run one after another, each through its own Middy chain, so one record's failure never
 * touches a batch-mate's committed work. In batch-commit mode (`commitMode: "batch"`) the fence
 * transaction step is taken for the whole batch first (shared/fence/batch-transaction.ts: one
 * BEGIN + fence insert, every record's work, one COMMIT; a failing record is taken out and the
 * batch redone), and each record's chain then starts from what the batch did with it. A record is acked (left out of batchItemFailures) only
 * when it was applied, was a duplicate, or its dead letter committed. On a FIFO queue, after a
 * record of a message group fails, the group's later records are not run and are reported too, so
 * ordering within a group holds.
 */

import { Logger } from "@aws-lambda-powertools/logger";
import { injectLambdaContext } from "@aws-lambda-powertools/logger/middleware";
import { Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import { SQSClient } from "@aws-sdk/client-sqs";
import middy, { type MiddyfiedHandler } from "@middy/core";
import type { Context, SQSBatchResponse, SQSEvent } from "aws-lambda";
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
import type { Queryable } from "./db/queryable.ts";
import { describeError } from "./dead-letters/last-error.ts";
import type { Job } from "./envelope/envelope.ts";
import { parseMessage } from "./envelope/envelope.ts";
import { ConfigurationError } from "./errors.ts";
import { settleBatch } from "./fence/batch-transaction.ts";
import { validateFenceTtl } from "./fence/ttl.ts";
import { METRIC, METRICS_NAMESPACE } from "./metrics/names.ts";
import { fenceTransaction } from "./middleware/fence-transaction.ts";
import { type OutcomeObserver, observeOutcome } from "./middleware/observe-outcome.ts";
import { parseEnvelope } from "./middleware/parse-envelope.ts";
import type { RecordContext, RecordOutcome } from "./middleware/record-context.ts";
import { recordDeadLetter } from "./middleware/record-dead-letter.ts";
import { scheduleRetry } from "./middleware/schedule-retry.ts";
import { attemptOf, sqsBatchProcessor } from "./middleware/sqs-batch.ts";
import {
  DEFAULT_RETRY_POLICY,
  type RetryOverride,
  type RetryPolicy,
  resolveRetryPolicy,
} from "./retry/policy.ts";
import { queueUrlFromArn } from "./sqs/queue-url.ts";

/** The job as `work` receives it. */
export interface WorkJob<P> extends Job<P> {
  /** 1 on the first delivery; the record's ApproximateReceiveCount. */
  readonly attempt: number;
  /** The SQS message id of this delivery. */
  readonly messageId: string;
}

/**
 * The fence transaction's connection, as `work` may use it: queries only. Committing or rolling
 * back is the harness's job, and the work must not keep the connection beyond its promise.
 */
export type Transaction = Queryable;

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
  const work = (rc: RecordContext<z.output<S>>, tx: pg.PoolClient) =>
    definition.work(
      { ...(rc.job as Job<z.output<S>>), attempt: rc.attempt, messageId: rc.record.messageId },
      tx,
    );

  const runWork = async (rc: RecordContext<z.output<S>>): Promise<RecordOutcome> => {
    if (rc.settled) {
      // Batch-commit mode: the batch's transaction already ran this record.
      if (rc.settled.status === "failed") throw rc.settled.error;
      return { status: rc.settled.status };
    }
    if (rc.duplicate) return { status: "duplicate" };
    await work(rc, rc.tx as pg.PoolClient);
    return { status: "applied" };
  };

  const prepareBatch = async (contexts: RecordContext<z.output<S>>[]): Promise<void> => {
    for (const rc of contexts) {
      const parsed = parseMessage(rc.record.body ?? "", definition.payload, rc.record.messageId);
      rc.identity = parsed.identity;
      if (parsed.ok) rc.job = parsed.job;
    }
    try {
      const report = await settleBatch(
        { pool, consumer: definition.name, ttlSeconds: config.fenceTtlSeconds, work, keepGroupOrder: true },
        contexts,
      );
      if (report.redos > 0) metrics.addMetric(METRIC.batchRedone, MetricUnit.Count, report.redos);
      if (report.redos > 0 || report.deferred > 0) {
        logger.info("batch transaction: records taken out, redone or left to transactions of their own", {
          ...report,
          records: contexts.length,
        });
      }
    } catch (error) {
      // A bug, not a database or work error (those are settlements): the records the batch did
      // not settle run one transaction each; their fences keep that safe.
      logger.error("batch transaction failed unexpectedly; records run one by one", {
        error: describeError(error),
      });
    }
  };

  // Middy runs `before` in `use` order and `after`/`onError` in reverse, so this order gives:
  // before: parse → fence; after: fence (commit) → observe;
  // onError: fence (rollback) → retry → dead letter → observe.
  // The early-timeout guard belongs to the invocation (the outer handler), not to each record: it
  // would cost every record a timer and an AbortController.
  const processRecord = middy<RecordContext<z.output<S>>, RecordOutcome>(runWork, { timeoutEarlyInMillis: 0 })
    .use(observeOutcome({ metrics, logger, ...(runtime.onOutcome ? { onOutcome: runtime.onOutcome } : {}) }))
    .use(recordDeadLetter({ pool, consumer: definition.name, eventBridge, opsBusName: config.opsBusName }))
    .use(scheduleRetry({ sqs, policy: retryPolicy, ...(runtime.random ? { random: runtime.random } : {}) }))
    .use(parseEnvelope({ payload: definition.payload }))
    .use(fenceTransaction({ pool, consumer: definition.name, ttlSeconds: config.fenceTtlSeconds }));

  const processBatch = sqsBatchProcessor<z.output<S>>({
    contextOf: (record) => ({
      record,
      attempt: attemptOf(record),
      queueUrl: config.queueUrl ?? queueUrlFromArn(record.eventSourceARN),
    }),
    processRecord,
    ...(commitMode === "batch" ? { prepareBatch } : {}),
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
