/**
 * The backstop drain (SPEC §5). Every source queue redrives to a backstop queue after
 * maxAttempts + 3 receives, so a message survives even when the harness could never reach the
 * database to record its failure. The drain consumes the backstop queue and records each message
 * as a dead letter with `error_kind = 'unrecorded'` — idempotently with the harness's own write
 * (one pending dead letter per consumer and job) — alerts, and acks. If the database is down it
 * leaves the message where it is (the backstop keeps it 14 days).
 */

import { Logger } from "@aws-lambda-powertools/logger";
import { injectLambdaContext } from "@aws-lambda-powertools/logger/middleware";
import { Metrics } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import middy, { type MiddlewareObj, type MiddyfiedHandler } from "@middy/core";
import type { Context, SQSBatchResponse, SQSEvent } from "aws-lambda";
import type pg from "pg";
import { z } from "zod";
import { CONSUMER_NAME, databaseUrlField, dbRoleField, opsBusNameField } from "../config/fields.ts";
import { configFromEnv, parseConfig } from "../config/parse.ts";
import { createPool } from "../db/pool.ts";
import { parseMessage } from "../envelope/envelope.ts";
import { UnrecordedMessageError } from "../errors.ts";
import { METRICS_NAMESPACE } from "../metrics/names.ts";
import { type OutcomeObserver, observeOutcome } from "../middleware/observe-outcome.ts";
import type { RecordContext, RecordOutcome } from "../middleware/record-context.ts";
import { recordDeadLetter } from "../middleware/record-dead-letter.ts";
import { sqsBatchProcessor } from "../middleware/sqs-batch.ts";

/** The drain's configuration. */
const drainConfigSchema = z
  .object({
    /** The consumer whose backstop this is: the dead letters' `consumer`. */
    consumer: z.string().regex(CONSUMER_NAME, "must be a consumer name"),
    /** Where a replay sends the message: the source queue, not the backstop. */
    sourceQueueUrl: z.url(),
    /** The source queue's redrive maxReceiveCount: how many receives the message had there. */
    sourceMaxReceiveCount: z.coerce.number().int().min(1).max(1000),
    databaseUrl: databaseUrlField,
    opsBusName: opsBusNameField,
    dbRole: dbRoleField.optional(),
  })
  .strict();

export type BackstopDrainConfig = z.output<typeof drainConfigSchema>;

/** Environment variables of the drain Lambda, by configuration key. */
export const DRAIN_ENV = Object.freeze({
  consumer: "JOBFENCE_CONSUMER",
  sourceQueueUrl: "JOBFENCE_SOURCE_QUEUE_URL",
  sourceMaxReceiveCount: "JOBFENCE_SOURCE_MAX_RECEIVE_COUNT",
  databaseUrl: "DATABASE_URL",
  opsBusName: "JOBFENCE_OPS_BUS_NAME",
  dbRole: "JOBFENCE_DB_ROLE",
} satisfies Record<keyof BackstopDrainConfig, string>);

/** Validates the drain's configuration object; every problem at once. */
export function parseDrainConfig(input: Record<string, unknown>): BackstopDrainConfig {
  return parseConfig(drainConfigSchema, input, "backstop drain");
}

/** Reads the drain's configuration from its environment (see {@link DRAIN_ENV}). */
export function drainConfigFromEnv(env: NodeJS.ProcessEnv = process.env): BackstopDrainConfig {
  return configFromEnv(drainConfigSchema, DRAIN_ENV, env, "backstop drain environment");
}

/** What the environment provides; the rest is built from the configuration. */
export interface BackstopDrainRuntime {
  readonly pool?: pg.Pool;
  readonly eventBridge?: EventBridgeClient;
  readonly metrics?: Metrics;
  readonly logger?: Logger;
  /** Told every record's outcome (the local stack's progress). */
  readonly onOutcome?: OutcomeObserver;
}

/** Middleware: reads what identity the message offers (its envelope's, or the message id). */
function readIdentity(): MiddlewareObj<RecordContext, RecordOutcome> {
  return {
    name: "jobfence-backstop-identity",
    before: (request) => {
      const rc = request.event;
      rc.identity = parseMessage(rc.record.body ?? "", z.unknown(), rc.record.messageId).identity;
    },
  };
}

/** The drain's handler, with its pool for the host to manage. */
export type BackstopDrainHandler = MiddyfiedHandler<SQSEvent, SQSBatchResponse, Error, Context> & {
  readonly pool: pg.Pool;
  readonly config: BackstopDrainConfig;
};

export function createBackstopDrain(
  config: BackstopDrainConfig,
  runtime: BackstopDrainRuntime = {},
): BackstopDrainHandler {
  const service = `${config.consumer}-backstop`;
  const logger = runtime.logger ?? new Logger({ serviceName: service });
  logger.appendPersistentKeys({ consumer: config.consumer });
  const metrics = runtime.metrics ?? new Metrics({ namespace: METRICS_NAMESPACE, serviceName: service });
  const pool =
    runtime.pool ??
    createPool({
      connectionString: config.databaseUrl,
      applicationName: `jobfence:${service}`,
      ...(config.dbRole ? { role: config.dbRole } : {}),
      onIdleError: (error) => logger.warn("idle database connection failed", { error: error.message }),
    });
  const eventBridge = runtime.eventBridge ?? new EventBridgeClient({});

  const unrecorded = async (rc: RecordContext): Promise<RecordOutcome> => {
    throw new UnrecordedMessageError(
      `message ${rc.record.messageId} used up ${config.sourceMaxReceiveCount} receives on ${config.sourceQueueUrl} ` +
        "without the harness recording an outcome; it was moved to the backstop queue",
    );
  };

  // onError runs in reverse `use` order: dead letter, then observe.
  const processRecord = middy<RecordContext, RecordOutcome>(unrecorded)
    .use(observeOutcome({ metrics, logger, ...(runtime.onOutcome ? { onOutcome: runtime.onOutcome } : {}) }))
    .use(recordDeadLetter({ pool, consumer: config.consumer, eventBridge, opsBusName: config.opsBusName }))
    .use(readIdentity());

  const processBatch = sqsBatchProcessor<unknown>({
    contextOf: (record) => ({
      record,
      attempt: config.sourceMaxReceiveCount,
      queueUrl: config.sourceQueueUrl,
    }),
    processRecord,
    keepGroupOrder: false,
    metrics,
    logger,
  });
  const handler = middy<SQSEvent, SQSBatchResponse, Error, Context>(processBatch)
    .use(injectLambdaContext(logger))
    .use(logMetrics(metrics));
  return Object.assign(handler, { pool, config });
}
