/**
 * The backstop drain (docs/design.md §5.6). Every source queue redrives to a backstop queue after
 * its validated maxReceiveCount receives (by default defaultMaxReceiveCount in
 * shared/retry/delivery-timings.ts: maxAttempts + maxInterruptions + 2, times 1 + 9 predecessors on
 * FIFO, plus spare receives; 19 on a standard queue, 100 on FIFO), so a message survives even when
 * the harness could never reach the database to record its failure. The drain consumes the
 * backstop queue and records each message as a dead letter with `error_kind = 'unrecorded'`,
 * alerts, and acks. Every message it receives ends in exactly one row: it writes whatever the body
 * and whether or not the job's fence exists (an applied job's row is resolved `superseded` by
 * replay or the daily escalation), idempotently per body, so a redelivery of the same message
 * finds its row. If the database is down it leaves the message where it is (the backstop keeps it
 * 14 days).
 *
 * Its record path is the spine's steps 1, 5 and 6 (shared/record/spine.ts) in the same batch loop:
 * read who the message is, record it, observe.
 */

import { Logger } from "@aws-lambda-powertools/logger";
import { injectLambdaContext } from "@aws-lambda-powertools/logger/middleware";
import { Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import type { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import middy, { type MiddyfiedHandler } from "@middy/core";
import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from "aws-lambda";
import type pg from "pg";
import { z } from "zod";
import { createEventBridgeClient } from "../aws/clients.ts";
import {
  CONSUMER_NAME,
  DATABASE_ENV,
  databaseConnection,
  databaseFields,
  dbRoleField,
  opsBusNameField,
  withDatabaseCheck,
} from "../config/fields.ts";
import { configFromEnv, parseConfig } from "../config/parse.ts";
import { createPool } from "../db/pool.ts";
import { EMPTY_LEDGER } from "../db/queries/message-attempts.ts";
import { writeDeadLetter } from "../dead-letters/write-dead-letter.ts";
import { reportJsonRuntime } from "../envelope/json-runtime-report.ts";
import { readMessage } from "../envelope/read-message.ts";
import { UnrecordedMessageError } from "../errors/job.ts";
import { BACKSTOP_RETENTION_SECONDS, TTL_DEFAULTS } from "../fence/ttl.ts";
import { METRIC, METRICS_NAMESPACE } from "../metrics/names.ts";
import { batchLoop } from "../record/batch-loop.ts";
import { type OutcomeObserver, observeRecord } from "../record/observe.ts";
import type { RecordOutcome } from "../record/outcome.ts";
import type { RecordContext } from "../record/record-context.ts";
import { isFifoQueue } from "../sqs/queue-url.ts";

/** The drain's configuration. */
const drainConfigSchema = withDatabaseCheck(
  z
    .object({
      /** The consumer whose backstop this is: the dead letters' `consumer`. */
      consumer: z.string().regex(CONSUMER_NAME, "must be a consumer name"),
      /** Where a replay sends the message: the source queue, not the backstop. */
      sourceQueueUrl: z.url(),
      /** The source queue's redrive maxReceiveCount: how many receives the message had there. */
      sourceMaxReceiveCount: z.coerce.number().int().min(1).max(1000),
      /**
       * The source queue's retention. On a FIFO queue SQS resets a message's enqueue time when it
       * moves it to the backstop, so the drain counts the copy as first sent up to this long before
       * its backstop SentTimestamp (see {@link firstSentAt}). @default TTL_DEFAULTS.queueRetentionSeconds
       */
      sourceRetentionSeconds: z.coerce.number().int().min(60).max(BACKSTOP_RETENTION_SECONDS).optional(),
      /** The consumer's login (the drain shares it): a connection string, or its secret and endpoint. */
      ...databaseFields,
      opsBusName: opsBusNameField,
      dbRole: dbRoleField.optional(),
    })
    .strict(),
);

export type BackstopDrainConfig = z.output<typeof drainConfigSchema>;

/** Environment variables of the drain Lambda, by configuration key. */
export const DRAIN_ENV = Object.freeze({
  consumer: "JOBFENCE_CONSUMER",
  sourceQueueUrl: "JOBFENCE_SOURCE_QUEUE_URL",
  sourceMaxReceiveCount: "JOBFENCE_SOURCE_MAX_RECEIVE_COUNT",
  sourceRetentionSeconds: "JOBFENCE_SOURCE_RETENTION_SECONDS",
  ...DATABASE_ENV,
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
  /**
   * The consumer's payload schema and fingerprint, so the drain's dead letters carry the job's
   * fingerprint as the consumer's fences do (replay and the daily escalation compare the two).
   * @default the whole payload is the fingerprint, as for a consumer that does not narrow it
   */
  readonly definition?: DrainedDefinition;
}

/** What the drain reads of its consumer's definition. */
export interface DrainedDefinition {
  readonly payload: z.ZodType;
  // biome-ignore lint/suspicious/noExplicitAny: a definition of any payload type
  readonly fingerprint?: (payload: any) => unknown;
}

/** The drain's handler, with its pool for the host to manage. */
export type BackstopDrainHandler = MiddyfiedHandler<SQSEvent, SQSBatchResponse, Error, Context> & {
  readonly pool: pg.Pool;
  readonly config: BackstopDrainConfig;
};

/**
 * The earliest the drained copy can have been first sent, which the database compares with its
 * job's fence lifetime (migration 0021: no fence and a copy this old is `outlived`). A standard
 * queue's SentTimestamp survives the move to the backstop; a FIFO queue's enqueue time restarts
 * there, so the copy may have waited the source's whole retention before it: counted as if it
 * had. Undefined when SQS gave no readable SentTimestamp (the database then decides from what the
 * row holds).
 */
export function firstSentAt(
  record: SQSRecord,
  config: Pick<BackstopDrainConfig, "sourceQueueUrl" | "sourceRetentionSeconds">,
): Date | undefined {
  const sent = Number(record.attributes.SentTimestamp);
  if (!Number.isSafeInteger(sent) || sent <= 0) return undefined;
  const retention = config.sourceRetentionSeconds ?? TTL_DEFAULTS.queueRetentionSeconds;
  const before = isFifoQueue(config.sourceQueueUrl) ? retention * 1000 : 0;
  return new Date(sent - before);
}

/** The drain's Powertools `service` (its metrics' dimension, its logs' service): `<consumer>-backstop`. */
export function backstopDrainService(consumer: string): string {
  return `${consumer}-backstop`;
}

export function createBackstopDrain(
  config: BackstopDrainConfig,
  runtime: BackstopDrainRuntime = {},
): BackstopDrainHandler {
  const service = backstopDrainService(config.consumer);
  // A child of a logger the host gives (shared by several drains locally), as the consumer's is.
  const logger = runtime.logger?.createChild() ?? new Logger({ serviceName: service });
  logger.appendPersistentKeys({ consumer: config.consumer });
  const metrics = runtime.metrics ?? new Metrics({ namespace: METRICS_NAMESPACE, serviceName: service });
  reportJsonRuntime({ logger, metrics });
  const pool =
    runtime.pool ??
    createPool({
      ...databaseConnection(config),
      applicationName: `jobfence:${service}`,
      ...(config.dbRole ? { role: config.dbRole } : {}),
      onIdleError: (error) => logger.warn("idle database connection failed", { error: error.message }),
    });
  const eventBridge = runtime.eventBridge ?? createEventBridgeClient();

  const sink = { pool, consumer: config.consumer, eventBridge, opsBusName: config.opsBusName };
  const definition: DrainedDefinition = runtime.definition ?? { payload: z.unknown() };
  const observers = { metrics, logger, ...(runtime.onOutcome ? { onOutcome: runtime.onOutcome } : {}) };

  /** Always a dead letter, whatever the body and the job's fence (see the module comment). Never throws. */
  const drainRecord = async (rc: RecordContext): Promise<RecordOutcome> => {
    // Step 1, as far as a drain needs it: who the message says it is, and its job's fingerprint.
    const { identity, fingerprint } = readMessage(rc.record, definition.payload, definition.fingerprint);
    rc.state = { step: "poison", identity, fingerprint };
    const error = new UnrecordedMessageError(
      `message ${rc.record.messageId} used up ${config.sourceMaxReceiveCount} receives on ${config.sourceQueueUrl} ` +
        "without the harness recording an outcome; it was moved to the backstop queue",
    );
    const written = await writeDeadLetter(sink, {
      record: rc.record,
      queueUrl: rc.queueUrl,
      attempts: rc.receiveCount,
      kind: "unrecorded",
      error,
      identity,
      jobFingerprint: fingerprint,
      fenceFingerprint: null,
      checkFence: false,
      firstSentAt: firstSentAt(rc.record, config),
    });
    let outcome: RecordOutcome;
    if (written.status === "dead-lettered") {
      const { status: _status, form: _form, ...rest } = written;
      outcome = { status: "dead-lettered", ...rest, error };
    } else if (written.status === "dead-letter-failed") {
      outcome = { status: "dead-letter-failed", kind: written.kind, error, writeError: written.writeError };
    } else {
      outcome = { status: "failed", error: new RangeError("the drain's write cannot find a job applied") };
    }
    observeRecord(observers, rc, outcome);
    return outcome;
  };

  const processBatch = batchLoop<unknown>({
    receive: (record) => ({
      record,
      // The backstop's own count says nothing of the source queue; the redrive happened after this many.
      receiveCount: config.sourceMaxReceiveCount,
      ledger: EMPTY_LEDGER,
      claimed: false,
      queueUrl: config.sourceQueueUrl,
      state: { step: "received" },
    }),
    run: drainRecord,
    keepGroupOrder: false,
    metrics,
    logger,
  });
  const drainBatch = async (event: SQSEvent, context: Context): Promise<SQSBatchResponse> => {
    const response = await processBatch(event, context);
    // Counted from the response, whatever path failed each record: a record left in the backstop
    // fails no invocation, so Lambda's Errors never sees a drain that cannot record anything.
    const failed = response.batchItemFailures.length;
    if (failed > 0) metrics.addMetric(METRIC.backstopRecordFailed, MetricUnit.Count, failed);
    return response;
  };
  const handler = middy<SQSEvent, SQSBatchResponse, Error, Context>(drainBatch)
    .use(injectLambdaContext(logger))
    .use(logMetrics(metrics));
  return Object.assign(handler, { pool, config });
}
