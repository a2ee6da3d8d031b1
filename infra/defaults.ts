/**
 * Every default the CDK constructs apply, in one place (the AWS Solutions Constructs habit): a
 * construct reads its defaults from here, and the tests assert them on the synthesized template.
 */
import { Duration } from "aws-cdk-lib";
import { Architecture, Runtime } from "aws-cdk-lib/aws-lambda";
import { type BundlingOptions, OutputFormat } from "aws-cdk-lib/aws-lambda-nodejs";
import { RetentionDays } from "aws-cdk-lib/aws-logs";
import { BULK_WORKER_METRIC, BULK_WORKER_SERVICE } from "../functions/bulk-operations/worker.ts";
import { DRAIN_TIMEOUT_SECONDS, TTL_DEFAULTS } from "../shared/fence/ttl.ts";

/** Every jobfence Lambda function. */
export const FUNCTION_DEFAULTS = Object.freeze({
  /** Node 24: jobfence's own functions run on it, and so does a consumer that chooses no runtime. */
  runtime: Runtime.NODEJS_24_X,
  /** Graviton: cheaper per GB-second, and nothing in the bundles is native. */
  architecture: Architecture.ARM_64,
  /** @default 256 MB: the functions hold one small pool and do no heavy computation. */
  memorySize: 256,
  /** CloudWatch Logs retention of every function's log group. */
  logRetention: RetentionDays.ONE_MONTH,
});

/**
 * The Lambda runtimes a function may run on, each with the esbuild target its bundle is built for
 * (docs/deploy.md, Runtimes): Node 22 and Node 24. Anything else is refused at synth.
 */
export const SUPPORTED_RUNTIMES: Readonly<Record<string, string>> = Object.freeze({
  [Runtime.NODEJS_22_X.name]: "node22",
  [Runtime.NODEJS_24_X.name]: "node24",
});

/**
 * How every function is bundled: esbuild (local, no Docker), ESM output (`.mjs`) for its runtime
 * (the target here is Node 24's; a function on Node 22 is built for node22), with a `require` for
 * the CommonJS dependencies ESM bundles still carry.
 */
export const BUNDLING_DEFAULTS: BundlingOptions = Object.freeze({
  format: OutputFormat.ESM,
  target: "node24",
  mainFields: ["module", "main"],
  banner: "import { createRequire } from 'module'; const require = createRequire(import.meta.url);",
  // Bundle the AWS SDK too (only pg's optional native binding stays out): the versions in
  // package-lock.json are the ones the tests ran, not whatever the runtime ships.
  externalModules: ["pg-native"],
  minify: true,
  sourceMap: true,
  sourcesContent: false,
  // With format ESM, NodejsFunction writes `index.mjs`: Node loads it as ESM without a package.json.
});

/** A consumer's queues, event source and alarms (docs/design.md §4, §5, §8.4). */
export const CONSUMER_DEFAULTS = Object.freeze({
  /** Alarm when a message has waited this long in the source queue. */
  oldestMessageAlarmSeconds: 15 * 60,
  /**
   * Alarm when a message has waited this long in the backstop queue: the drain takes one within
   * seconds when it can record it, so an hour means it cannot (its 14-day retention is running).
   */
  backstopOldestMessageAlarmSeconds: 60 * 60,
  /** Period of the alarms on the harness's failure metrics (summed; any count in it alarms). */
  failureAlarmPeriod: Duration.minutes(5),
  /** Period of the alarms on queue depth and age (SQS reports those every minute). */
  queueAlarmPeriod: Duration.minutes(1),
  /**
   * Invocations one provisioned event poller runs at once, as AWS documents provisioned mode
   * (2,000 pollers, 20,000 concurrent invocations): how far a consumer's pollers can reach.
   */
  invocationsPerPoller: 10,
});

/**
 * The deployment settings a JobConsumer applies when its props leave them out: those of a small
 * standard-queue consumer (the reference stack's award-points).
 */
export const CONSUMER_DEPLOYMENT_DEFAULTS = Object.freeze({
  /** A standard queue. */
  fifo: false,
  /** @default 30 s: the source queue then hides a message 180 s (6 ×). */
  functionTimeoutSeconds: 30,
  /** The source queue's retention: TTL_DEFAULTS.queueRetentionSeconds (4 days), within the fence TTL. */
  queueRetentionSeconds: TTL_DEFAULTS.queueRetentionSeconds,
  /** Records per invocation (the most a standard queue takes without a batching window). */
  batchSize: 10,
  /** The SQS event source's smallest maximum concurrency: 2 invocations at once. */
  maxConcurrency: 2,
  /** The runtime of the consumer, its backstop drain and its outbox relay. */
  runtime: Runtime.NODEJS_24_X,
});

/** The backstop drain: it only records dead letters, one batch at a time. */
export const BACKSTOP_DRAIN_DEFAULTS = Object.freeze({
  timeout: Duration.seconds(DRAIN_TIMEOUT_SECONDS),
  batchSize: 10,
  maxConcurrency: 2,
});

/**
 * A sending consumer's scheduled outbox relay: it sends the follow-ups the relay after COMMIT left
 * behind (a crash, a failed send), one run a minute.
 */
export const OUTBOX_RELAY_DEFAULTS = Object.freeze({
  /** How often the schedule starts it: a follow-up left behind waits about a minute. */
  rate: Duration.minutes(1),
  /**
   * Below the schedule's minute, and no run is retried, so runs do not overlap and the relay holds
   * its one connection at a time (an overlap would still be safe: rows are claimed with SKIP LOCKED).
   */
  timeout: Duration.seconds(50),
  /** Runs at once, as the connection budget counts them (see {@link timeout}). */
  concurrency: 1,
  /** Its handler's pool holds one connection. */
  poolMax: 1,
  /**
   * Alarm when a row has waited this long: the relay after COMMIT sends within milliseconds and the
   * scheduled one within a minute or two, so a quarter of an hour means its sends keep failing (it
   * retries a row for about 45 minutes before dead-lettering it `undelivered`).
   */
  oldestRowAlarmSeconds: 15 * 60,
});

/** TTL cleanup and escalation (docs/design.md §7, §8.2). */
export const SCHEDULE_DEFAULTS = Object.freeze({
  /** Cleanup every 15 minutes. */
  cleanupRate: Duration.minutes(15),
  /** Long enough for hundreds of 20,000-row batches and their pauses; the handler stops at 80 % of it. */
  cleanupTimeout: Duration.minutes(5),
  /** Escalation once a day, at 08:00 UTC so a person sees it during the day. */
  escalationHourUtc: 8,
  escalationTimeout: Duration.minutes(1),
  /** A dead letter pending longer than this is escalated. */
  escalationThresholdDays: 3,
});

/** The dead-letter API (docs/api.md). */
export const API_DEFAULTS = Object.freeze({
  /** Steady-state requests per second across the API. */
  throttlingRateLimit: 50,
  throttlingBurstLimit: 100,
  timeout: Duration.seconds(29),
  /** Retention of the API's access log. */
  accessLogRetention: RetentionDays.THREE_MONTHS,
  /** A bulk replay or discard over more dead letters than this needs its plan's token. */
  bulkConfirmAbove: 100,
  /** Upper bound of `bulkConfirmAbove` (the function refuses more). */
  bulkConfirmAboveMax: 1_000_000,
  /**
   * Characters of the generated signing key (letters and digits, about 5.95 bits each: some 380
   * bits; the function needs at least 32 bytes).
   */
  signingKeyLength: 64,
});

/** The bulk-operations worker (the API's bulk replays and discards, run in chunks). */
export const BULK_WORKER_DEFAULTS = Object.freeze({
  /** How often the schedule starts it; each run works until shortly before its timeout. */
  rate: Duration.minutes(1),
  /**
   * The run keeps BULK_WORKER_RESERVE_MS (10 s) back, so it works about 60 s of each 70 s:
   * one run hands over to the next with no gap; an overlap is safe (operations are claimed with
   * SKIP LOCKED).
   */
  timeout: Duration.seconds(70),
  /** The metric its chunk-failure alarm watches. */
  chunkFailuresMetric: BULK_WORKER_METRIC.failedChunks,
  /** Its Powertools `service` dimension. */
  metricsService: BULK_WORKER_SERVICE,
  /** Period of its alarms. */
  alarmPeriod: Duration.minutes(5),
});

/** The ops alerting (docs/design.md §8). */
export const ALERTING_DEFAULTS = Object.freeze({
  /** BetterStack's API key header for incoming webhooks. */
  apiKeyHeader: "Authorization",
  /** Invocations per second to the API destination. */
  rateLimitPerSecond: 10,
  /** An alert that could not be delivered for a day is stale. */
  retryMaxEventAge: Duration.hours(24),
  retryAttempts: 185,
});

/** The PostgreSQL connection the functions receive. */
export const DATABASE_DEFAULTS = Object.freeze({
  port: 5432,
  databaseName: "jobfence",
  /**
   * RDS Proxy and RDS present certificates that must be verified (pg treats `require` as
   * `verify-full` and warns); `verify-full` says so explicitly.
   */
  sslMode: "verify-full",
  /** Lambda's Node.js runtimes ship the RDS certificate authorities here. */
  extraCaCertsPath: "/var/runtime/ca-cert.pem",
});

/** The doctor: the live database and queues against what the migrations and the configuration intend. */
export const DOCTOR_DEFAULTS = Object.freeze({
  /** Daily at 06:00 UTC, so its findings are waiting when the day starts. */
  hourUtc: 6,
  /** Catalog reads and two SQS calls per queue. */
  timeout: Duration.minutes(2),
  /** Its alarms look at one run's metric: a day's period covers the daily run. */
  alarmPeriod: Duration.days(1),
});
