/**
 * One consumer, deployed (SPEC §3–§5, §10): its source queue, the backstop queue the source
 * redrives to, the consumer function behind an SQS event source that reports partial batch
 * failures, the backstop drain, least-privilege IAM and the alarms an operator needs.
 *
 * Everything is validated at synth and every problem is reported together in one
 * ConfigurationError: the retry override (whose type already requires a rationale), the fence TTL
 * against retention and the retry window (the same `validateFenceTtl` the consumer runs at
 * start-up), the delivery timings together (`validateDeliveryTimings`: visibility, redrive count,
 * retention, time budget), and the queue and event-source bounds.
 */
import { Duration } from "aws-cdk-lib";
import * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import type * as events from "aws-cdk-lib/aws-events";
import * as iam from "aws-cdk-lib/aws-iam";
import * as lambdaEventSources from "aws-cdk-lib/aws-lambda-event-sources";
import * as sqs from "aws-cdk-lib/aws-sqs";
import { Construct } from "constructs";
import {
  BACKSTOP_RETENTION_SECONDS,
  type ConsumerDeployment,
  queueNames,
  resolveDeliveryTimings,
  VISIBILITY_TO_TIMEOUT_RATIO,
} from "../../functions/consumers.ts";
import { DRAIN_ENV } from "../../shared/backstop/drain.ts";
import { CONSUMER_ENV } from "../../shared/config/consumer-config.ts";
import { ConfigurationError } from "../../shared/errors.ts";
import { TTL_DEFAULTS, validateFenceTtl } from "../../shared/fence/ttl.ts";
import { type DeliveryTimings, validateDeliveryTimings } from "../../shared/retry/delivery-timings.ts";
import { DEFAULT_RETRY_POLICY, type RetryPolicy, resolveRetryPolicy } from "../../shared/retry/policy.ts";
import { BACKSTOP_DRAIN_DEFAULTS, CONSUMER_DEFAULTS } from "../defaults.ts";
import type { DatabaseAccess } from "./database.ts";
import { JobfenceFunction } from "./jobfence-function.ts";

/** Props of {@link JobConsumer}. */
export interface JobConsumerProps {
  /**
   * The consumer and how it is deployed (an entry of `functions/consumers.ts`). Its definition's
   * `retry` override, if any, is the policy both the function and the queues use.
   */
  readonly deployment: ConsumerDeployment;
  /** The database the consumer and its drain log in to (as the `consumer` login). */
  readonly database: DatabaseAccess;
  /** The ops bus that receives DeadLetterRecorded (SPEC §8). */
  readonly opsBus: events.IEventBus;
  /**
   * The consumer's entry point, relative to the repository root.
   * @default `functions/<consumer name>/handler.ts`
   */
  readonly entry?: string;
  /**
   * The fence TTL; validated against retention and the retry window at synth (SPEC §7).
   * @default TTL_DEFAULTS.fenceTtlSeconds (7 days)
   */
  readonly fenceTtlSeconds?: number;
  /**
   * The source queue's visibility timeout; at least 6 × the function timeout + the batching
   * window (SPEC §10, AWS's guidance for SQS event sources).
   * @default 6 × the deployment's functionTimeoutSeconds + its batchingWindowSeconds
   */
  readonly visibilityTimeoutSeconds?: number;
  /**
   * Alarm when the oldest message in the source queue is older than this.
   * @default CONSUMER_DEFAULTS.oldestMessageAlarmSeconds (15 minutes)
   */
  readonly oldestMessageAlarmSeconds?: number;
  /** Where the alarms notify. @default none (the alarms are still created) */
  readonly alarmActions?: readonly cloudwatch.IAlarmAction[];
}

/** SQS event sources: FIFO batches hold at most 10 records; standard ones up to 10,000. */
const MAX_BATCH = { fifo: 10, standard: 10_000 } as const;
/** Standard batches above 10 records need a batching window. */
const MAX_BATCH_WITHOUT_WINDOW = 10;
/** SQS event source maximum concurrency bounds. */
const MAX_CONCURRENCY = { min: 2, max: 1000 } as const;
const CONSUMER_NAME = /^[a-z][a-z0-9-]{0,62}$/;

/** A consumer's resolved settings, after validation. */
interface ConsumerSettings {
  readonly retryPolicy: RetryPolicy;
  readonly visibilityTimeoutSeconds: number;
  readonly fenceTtlSeconds: number;
  readonly maxReceiveCount: number;
  /** Everything `validateDeliveryTimings` checked, as deployed. */
  readonly timings: DeliveryTimings;
}

/** Validates the props and resolves what they leave out; throws one error listing every problem. */
export function resolveConsumerSettings(props: JobConsumerProps): ConsumerSettings {
  const { deployment } = props;
  const name = deployment.definition.name;
  const problems: string[] = [];
  if (!CONSUMER_NAME.test(name)) {
    problems.push(`name "${name}" must be 1–63 lowercase letters, digits or dashes, starting with a letter`);
  }

  let retryPolicy: RetryPolicy = DEFAULT_RETRY_POLICY;
  try {
    if (deployment.definition.retry) retryPolicy = resolveRetryPolicy(deployment.definition.retry);
  } catch (error) {
    if (!(error instanceof ConfigurationError)) throw error;
    problems.push(...error.problems);
  }

  const timeout = deployment.functionTimeoutSeconds;
  // Visibility, redrive count, retention and time budget are only safe together: one validation
  // checks them as a set (the consumer's start-up runs the same one).
  const timings = resolveDeliveryTimings(deployment, retryPolicy, props.visibilityTimeoutSeconds);
  problems.push(...validateDeliveryTimings(timings));

  const maxBatch = deployment.fifo ? MAX_BATCH.fifo : MAX_BATCH_WITHOUT_WINDOW;
  if (
    !Number.isInteger(deployment.batchSize) ||
    deployment.batchSize < 1 ||
    deployment.batchSize > maxBatch
  ) {
    problems.push(
      `batch size must be 1–${maxBatch} for a ${deployment.fifo ? "FIFO" : "standard"} queue ` +
        `(without a batching window; SQS allows ${deployment.fifo ? MAX_BATCH.fifo : MAX_BATCH.standard}), ` +
        `got ${deployment.batchSize}`,
    );
  }
  const concurrency = deployment.maxConcurrency;
  if (
    !Number.isInteger(concurrency) ||
    concurrency < MAX_CONCURRENCY.min ||
    concurrency > MAX_CONCURRENCY.max
  ) {
    problems.push(
      `maxConcurrency must be ${MAX_CONCURRENCY.min}–${MAX_CONCURRENCY.max} (the SQS event source's bounds), got ${concurrency}`,
    );
  }

  const fenceTtlSeconds = props.fenceTtlSeconds ?? TTL_DEFAULTS.fenceTtlSeconds;
  problems.push(
    ...validateFenceTtl({
      queueRetentionSeconds: deployment.queueRetentionSeconds,
      retryPolicy,
      functionTimeoutSeconds: timeout,
      fenceTtlSeconds,
    }),
  );

  // validateDeliveryTimings and validateFenceTtl word the function-timeout and retention bounds
  // alike; report such a line once.
  if (problems.length > 0) throw new ConfigurationError(`JobConsumer "${name}"`, [...new Set(problems)]);
  return {
    retryPolicy,
    visibilityTimeoutSeconds: timings.visibilityTimeoutSeconds,
    fenceTtlSeconds,
    maxReceiveCount: timings.maxReceiveCount,
    timings,
  };
}

/** A consumer's queues, function, backstop drain and alarms. */
export class JobConsumer extends Construct {
  /** The queue producers send jobs to. */
  readonly queue: sqs.Queue;
  /**
   * Where the source queue redrives after the validated maxReceiveCount (SPEC §5): by default the
   * minimum that still leaves room for the receives that run nothing.
   */
  readonly backstopQueue: sqs.Queue;
  /** The consumer function. */
  readonly consumerFunction: JobfenceFunction;
  /** The backstop drain function. */
  readonly drainFunction: JobfenceFunction;
  /** The event source of the consumer function. */
  readonly eventSource: lambdaEventSources.SqsEventSource;
  /** The effective retry policy (the definition's override applied to the default). */
  readonly retryPolicy: RetryPolicy;
  /** Backstop depth > 0, oldest message age, function errors (consumer and drain). */
  readonly alarms: {
    readonly backstopDepth: cloudwatch.Alarm;
    readonly oldestMessageAge: cloudwatch.Alarm;
    readonly consumerErrors: cloudwatch.Alarm;
    readonly drainErrors: cloudwatch.Alarm;
  };

  constructor(scope: Construct, id: string, props: JobConsumerProps) {
    super(scope, id);
    const settings = resolveConsumerSettings(props);
    const { timings } = settings;
    const { deployment } = props;
    const name = deployment.definition.name;
    const names = queueNames(deployment);
    this.retryPolicy = settings.retryPolicy;
    const fifo = deployment.fifo ? { fifo: true } : {};

    this.backstopQueue = new sqs.Queue(this, "Backstop", {
      queueName: names.backstop,
      ...fifo,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.seconds(BACKSTOP_RETENTION_SECONDS),
      visibilityTimeout: Duration.seconds(
        VISIBILITY_TO_TIMEOUT_RATIO * BACKSTOP_DRAIN_DEFAULTS.timeout.toSeconds(),
      ),
    });
    this.queue = new sqs.Queue(this, "Queue", {
      queueName: names.source,
      ...fifo,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.seconds(deployment.queueRetentionSeconds),
      visibilityTimeout: Duration.seconds(settings.visibilityTimeoutSeconds),
      deadLetterQueue: { queue: this.backstopQueue, maxReceiveCount: settings.maxReceiveCount },
    });

    this.consumerFunction = new JobfenceFunction(this, "Consumer", {
      entry: props.entry ?? `functions/${name}/handler.ts`,
      description: `jobfence consumer ${name}`,
      timeout: Duration.seconds(deployment.functionTimeoutSeconds),
      database: props.database,
      login: "consumer",
      environment: {
        [CONSUMER_ENV.opsBusName]: props.opsBus.eventBusName,
        [CONSUMER_ENV.queueUrl]: this.queue.queueUrl,
        [CONSUMER_ENV.fenceTtlSeconds]: String(settings.fenceTtlSeconds),
        [CONSUMER_ENV.queueRetentionSeconds]: String(deployment.queueRetentionSeconds),
        [CONSUMER_ENV.functionTimeoutSeconds]: String(deployment.functionTimeoutSeconds),
        // The delivery timings, so the consumer's start-up validates what was deployed.
        [CONSUMER_ENV.lockTimeoutMs]: String(timings.lockTimeoutMs),
        [CONSUMER_ENV.maxReceiveCount]: String(timings.maxReceiveCount),
        [CONSUMER_ENV.visibilityTimeoutSeconds]: String(timings.visibilityTimeoutSeconds),
        [CONSUMER_ENV.batchingWindowSeconds]: String(timings.batchingWindowSeconds),
        [CONSUMER_ENV.maxInterruptions]: String(timings.maxInterruptions),
        [CONSUMER_ENV.recordBudgetMs]: String(timings.recordBudgetMs),
        [CONSUMER_ENV.returnReserveMs]: String(timings.returnReserveMs),
        [CONSUMER_ENV.fifo]: timings.fifo ? "true" : "false",
      },
    });
    this.eventSource = new lambdaEventSources.SqsEventSource(this.queue, {
      batchSize: deployment.batchSize,
      maxConcurrency: deployment.maxConcurrency,
      reportBatchItemFailures: true,
      // Only when set: CDK refuses any batching window on a FIFO queue, even 0.
      ...(timings.batchingWindowSeconds > 0
        ? { maxBatchingWindow: Duration.seconds(timings.batchingWindowSeconds) }
        : {}),
    });
    this.consumerFunction.function.addEventSource(this.eventSource);
    // The retry middleware hides a failed message for its backoff delay (SPEC §4); the event
    // source's own grant covers receive and delete.
    this.consumerFunction.function.addToRolePolicy(
      new iam.PolicyStatement({ actions: ["sqs:ChangeMessageVisibility"], resources: [this.queue.queueArn] }),
    );
    props.opsBus.grantPutEventsTo(this.consumerFunction.function);

    this.drainFunction = new JobfenceFunction(this, "BackstopDrain", {
      entry: "functions/backstop-drain/handler.ts",
      description: `jobfence backstop drain of ${name}`,
      timeout: BACKSTOP_DRAIN_DEFAULTS.timeout,
      database: props.database,
      login: "consumer",
      environment: {
        [DRAIN_ENV.consumer]: name,
        [DRAIN_ENV.sourceQueueUrl]: this.queue.queueUrl,
        [DRAIN_ENV.sourceMaxReceiveCount]: String(settings.maxReceiveCount),
        [DRAIN_ENV.opsBusName]: props.opsBus.eventBusName,
      },
    });
    this.drainFunction.function.addEventSource(
      new lambdaEventSources.SqsEventSource(this.backstopQueue, {
        batchSize: BACKSTOP_DRAIN_DEFAULTS.batchSize,
        maxConcurrency: BACKSTOP_DRAIN_DEFAULTS.maxConcurrency,
        reportBatchItemFailures: true,
      }),
    );
    props.opsBus.grantPutEventsTo(this.drainFunction.function);

    const alarm = (alarmId: string, metric: cloudwatch.IMetric, threshold: number, description: string) => {
      const created = new cloudwatch.Alarm(this, alarmId, {
        metric,
        threshold,
        evaluationPeriods: 1,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        alarmDescription: description,
      });
      for (const action of props.alarmActions ?? []) created.addAlarmAction(action);
      return created;
    };
    const oldest = props.oldestMessageAlarmSeconds ?? CONSUMER_DEFAULTS.oldestMessageAlarmSeconds;
    this.alarms = {
      backstopDepth: alarm(
        "BackstopDepthAlarm",
        this.backstopQueue.metricApproximateNumberOfMessagesVisible({
          period: Duration.minutes(1),
          statistic: "Maximum",
        }),
        0,
        `${name}: messages reached the backstop queue (the harness could not record their outcome)`,
      ),
      oldestMessageAge: alarm(
        "OldestMessageAlarm",
        this.queue.metricApproximateAgeOfOldestMessage({ period: Duration.minutes(1), statistic: "Maximum" }),
        oldest,
        `${name}: a message has waited more than ${oldest} s in the source queue`,
      ),
      consumerErrors: alarm(
        "ConsumerErrorsAlarm",
        this.consumerFunction.function.metricErrors({ period: Duration.minutes(5), statistic: "Sum" }),
        0,
        `${name}: the consumer function failed an invocation (not a job: the whole batch)`,
      ),
      drainErrors: alarm(
        "DrainErrorsAlarm",
        this.drainFunction.function.metricErrors({ period: Duration.minutes(5), statistic: "Sum" }),
        0,
        `${name}: the backstop drain failed an invocation`,
      ),
    };
  }
}
