/**
 * A consumer's runtime configuration: parsed with zod from the Lambda's environment (or given
 * directly by the local stack and tests), with named defaults, and refused at start-up with every
 * problem listed when anything is wrong.
 */
import { z } from "zod";
import { BACKSTOP_RETENTION_SECONDS, TTL_DEFAULTS } from "../fence/ttl.ts";
import {
  DATABASE_ENV,
  databaseFields,
  dbRoleField,
  opsBusNameField,
  targetQueuesField,
  withDatabaseCheck,
} from "./fields.ts";
import { configFromEnv, parseConfig } from "./parse.ts";

/** Named defaults of {@link ConsumerConfig}. */
export const CONSUMER_DEFAULTS = Object.freeze({
  /** Default: 21 days (outbox deadline 1 day + backstop 14 days, or 18 on FIFO + retry window + 1 day margin fits). */
  fenceTtlSeconds: TTL_DEFAULTS.fenceTtlSeconds,
  /** Default queue retention: 4 days. */
  queueRetentionSeconds: TTL_DEFAULTS.queueRetentionSeconds,
  /** Default backstop retention: 14 days. */
  backstopRetentionSeconds: BACKSTOP_RETENTION_SECONDS,
  /** The consumer function's timeout; the CDK construct sets the real one. */
  functionTimeoutSeconds: 30,
  /** Bound on a concurrent duplicate's wait for the fence lock. */
  lockTimeoutMs: 5000,
  /** Connections in the container's pool, on Lambda's default compute (one invocation at a time). */
  poolMax: 2,
  /** Confirmed interruptions after which a message is dead-lettered as `interrupted`. */
  maxInterruptions: 2,
  /** The event source's batching window. */
  batchingWindowSeconds: 0,
});

const positiveInt = z.coerce.number().int().positive();

const configSchema = withDatabaseCheck(
  z
    .object({
      /** The consumer's login: a connection string, or its secret and endpoint. */
      ...databaseFields,
      /** Name of the ops EventBridge bus that receives DeadLetterRecorded (never a domain bus). */
      opsBusName: opsBusNameField,
      /** URL of the source queue; derived from the record's queue ARN when absent. */
      queueUrl: z.url().optional(),
      fenceTtlSeconds: positiveInt.default(CONSUMER_DEFAULTS.fenceTtlSeconds),
      /** The source queue's retention; with the retry policy it bounds how late a delivery can come. */
      queueRetentionSeconds: positiveInt.default(CONSUMER_DEFAULTS.queueRetentionSeconds),
      /** The backstop queue's retention: a copy of a job can wait there too (docs/design.md §7.2). */
      backstopRetentionSeconds: positiveInt.default(CONSUMER_DEFAULTS.backstopRetentionSeconds),
      functionTimeoutSeconds: positiveInt.default(CONSUMER_DEFAULTS.functionTimeoutSeconds),
      lockTimeoutMs: positiveInt.default(CONSUMER_DEFAULTS.lockTimeoutMs),
      /**
       * Connections in the worker's pool. @default 2 on Lambda's default compute; on Lambda Managed
       * Instances the worker's share of its environment's concurrency (shared/config/consumer-checks.ts)
       */
      poolMax: positiveInt.max(100).optional(),
      /** A role to SET on each connection, for a login that does not inherit its jobfence role. */
      dbRole: dbRoleField.optional(),
      /**
       * The source queue's redrive count. When set, a transient failure on the last receive before
       * the backstop is dead-lettered by the harness, and the timings are validated together.
       */
      maxReceiveCount: z.coerce.number().int().min(1).max(1000).optional(),
      /** The source queue's visibility timeout (validated with the other timings when given). */
      visibilityTimeoutSeconds: z.coerce.number().int().min(0).max(43_200).optional(),
      /** The event source's MaximumBatchingWindowInSeconds. */
      batchingWindowSeconds: z.coerce
        .number()
        .int()
        .min(0)
        .max(300)
        .default(CONSUMER_DEFAULTS.batchingWindowSeconds),
      /** Whether the source queue is FIFO. @default taken from each record's queue ARN */
      fifo: z.union([z.boolean(), z.stringbool()]).optional(),
      maxInterruptions: positiveInt.max(10).default(CONSUMER_DEFAULTS.maxInterruptions),
      /** No record starts when less than this remains of the invocation. @default a third of the timeout, at most 10 s */
      recordBudgetMs: positiveInt.optional(),
      /** The harness returns this long before the function timeout. @default a tenth of the timeout, at most 2 s */
      returnReserveMs: positiveInt.optional(),
      /**
       * The queue URL of each consumer this one sends follow-ups to, by name; in the environment
       * a JSON object. @default none
       */
      outboxQueues: targetQueuesField.default({}),
    })
    .strict(),
);

/** A consumer's validated configuration. */
export type ConsumerConfig = z.output<typeof configSchema>;
/** What a caller may pass: defaults may be left out. */
export type ConsumerConfigInput = z.input<typeof configSchema>;

/** The environment variables the Lambda reads, by configuration key. */
export const CONSUMER_ENV = Object.freeze({
  ...DATABASE_ENV,
  opsBusName: "JOBFENCE_OPS_BUS_NAME",
  queueUrl: "JOBFENCE_QUEUE_URL",
  fenceTtlSeconds: "JOBFENCE_FENCE_TTL_SECONDS",
  queueRetentionSeconds: "JOBFENCE_QUEUE_RETENTION_SECONDS",
  backstopRetentionSeconds: "JOBFENCE_BACKSTOP_RETENTION_SECONDS",
  functionTimeoutSeconds: "JOBFENCE_FUNCTION_TIMEOUT_SECONDS",
  lockTimeoutMs: "JOBFENCE_LOCK_TIMEOUT_MS",
  poolMax: "JOBFENCE_POOL_MAX",
  dbRole: "JOBFENCE_DB_ROLE",
  maxReceiveCount: "JOBFENCE_MAX_RECEIVE_COUNT",
  visibilityTimeoutSeconds: "JOBFENCE_VISIBILITY_TIMEOUT_SECONDS",
  batchingWindowSeconds: "JOBFENCE_BATCHING_WINDOW_SECONDS",
  fifo: "JOBFENCE_FIFO",
  maxInterruptions: "JOBFENCE_MAX_INTERRUPTIONS",
  recordBudgetMs: "JOBFENCE_RECORD_BUDGET_MS",
  returnReserveMs: "JOBFENCE_RETURN_RESERVE_MS",
  outboxQueues: "JOBFENCE_OUTBOX_QUEUES",
} satisfies Record<keyof ConsumerConfig, string>);

/** Validates a configuration object; unknown keys are refused. */
export function parseConsumerConfig(input: ConsumerConfigInput, source = "consumer"): ConsumerConfig {
  return parseConfig(configSchema, input, source);
}

/** Reads the configuration from environment variables (see {@link CONSUMER_ENV}). */
export function consumerConfigFromEnv(env: NodeJS.ProcessEnv = process.env): ConsumerConfig {
  return configFromEnv(configSchema, CONSUMER_ENV, env, "consumer environment");
}
