/**
 * One consumer, deployed (docs/design.md §3–§5): its source queue, the backstop queue the source
 * redrives to, the consumer function behind an SQS event source that reports partial batch
 * failures, the backstop drain, least-privilege IAM and the alarms an operator needs.
 *
 * Everything is validated at synth and every problem is reported together in one
 * ConfigurationError: the retry override (whose type already requires a rationale), the fence TTL
 * against retention and the retry window (the same `validateFenceTtl` the consumer runs at
 * start-up), the delivery timings together (`validateDeliveryTimings`: visibility, redrive count,
 * retention, time budget), and the queue and event-source bounds: provisioned pollers within
 * maxConcurrency, and no event filtering (Lambda deletes what a filter drops).
 *
 * Every failure path has an alarm: the queues (the backstop's depth, in-flight messages and age;
 * the source's age), both functions' errors, and the harness's failure metrics, which count what a
 * record that stays in its queue or an alert that was lost never shows as a Lambda error.
 *
 * A consumer whose definition sends follow-ups (`sends`) is given each target's queue: its function
 * and its scheduled outbox relay, which sends what the relay after COMMIT left behind, get the
 * queues' URLs and may send to those queues only; the relay has its own alarms (its outbox's oldest
 * row, undelivered rows, failed runs). A consumer that sends nothing gets none of it.
 */
import { Duration, Stack } from "aws-cdk-lib";
import * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import * as events from "aws-cdk-lib/aws-events";
import * as eventsTargets from "aws-cdk-lib/aws-events-targets";
import * as iam from "aws-cdk-lib/aws-iam";
import * as lambda from "aws-cdk-lib/aws-lambda";
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
import { OUTBOX_RELAY_ENV, outboxRelayService } from "../../functions/outbox-relay/relay.ts";
import { backstopDrainService, DRAIN_ENV } from "../../shared/backstop/drain.ts";
import { CONSUMER_ENV } from "../../shared/config/consumer-config.ts";
import { ConfigurationError } from "../../shared/errors.ts";
import { TTL_DEFAULTS, validateFenceTtl } from "../../shared/fence/ttl.ts";
import { METRIC, METRICS_NAMESPACE } from "../../shared/metrics/names.ts";
import { type DeliveryTimings, validateDeliveryTimings } from "../../shared/retry/delivery-timings.ts";
import { DEFAULT_RETRY_POLICY, type RetryPolicy, resolveRetryPolicy } from "../../shared/retry/policy.ts";
import { type ConsumerConnections, consumerConnections } from "../connection-budget.ts";
import { BACKSTOP_DRAIN_DEFAULTS, CONSUMER_DEFAULTS, OUTBOX_RELAY_DEFAULTS } from "../defaults.ts";
import type { DatabaseAccess } from "./database.ts";
import { JobfenceFunction } from "./jobfence-function.ts";
import { alarmNameOf } from "./ops-alerting.ts";
import { grantReplaySend } from "./replay-send.ts";

/** Props of {@link JobConsumer}. */
export interface JobConsumerProps {
  /**
   * The consumer and how it is deployed (an entry of `functions/consumers.ts`). Its definition's
   * `retry` override, if any, is the policy both the function and the queues use.
   */
  readonly deployment: ConsumerDeployment;
  /** The database the consumer, its drain and its outbox relay log in to, all as the consumer's own login. */
  readonly database: DatabaseAccess;
  /** The ops bus that receives DeadLetterRecorded. */
  readonly opsBus: events.IEventBus;
  /**
   * The consumer's entry point, relative to the repository root.
   * @default `functions/<consumer name>/handler.ts`
   */
  readonly entry?: string;
  /**
   * The fence TTL; validated at synth against every place a copy of a job can wait (the outbox
   * deadline, the source and backstop queues, the drain) and the retry window (docs/design.md §7.2).
   * @default TTL_DEFAULTS.fenceTtlSeconds (21 days)
   */
  readonly fenceTtlSeconds?: number;
  /**
   * The source queue's visibility timeout; at least 6 × the function timeout + the batching
   * window (AWS's guidance for SQS event sources).
   * @default 6 × the deployment's functionTimeoutSeconds + its batchingWindowSeconds
   */
  readonly visibilityTimeoutSeconds?: number;
  /**
   * Alarm when the oldest message in the source queue is older than this.
   * @default CONSUMER_DEFAULTS.oldestMessageAlarmSeconds (15 minutes)
   */
  readonly oldestMessageAlarmSeconds?: number;
  /**
   * Alarm when the oldest message in the backstop queue is older than this.
   * @default CONSUMER_DEFAULTS.backstopOldestMessageAlarmSeconds (1 hour)
   */
  readonly backstopOldestMessageAlarmSeconds?: number;
  /** Where the alarms notify. @default none (the alarms are still created) */
  readonly alarmActions?: readonly cloudwatch.IAlarmAction[];
  /**
   * The queue of each consumer the definition sends follow-ups to (its `sends`), by the target's
   * name: exactly those targets, checked at synth. A target named after this consumer itself is its
   * own queue and need not be given.
   * @default none: right only for a consumer that sends nothing
   */
  readonly followUpTargets?: Readonly<Record<string, sqs.IQueue>>;
}

/** SQS event sources: FIFO batches hold at most 10 records; standard ones up to 10,000. */
const MAX_BATCH = { fifo: 10, standard: 10_000 } as const;
/** Standard batches above 10 records need a batching window. */
const MAX_BATCH_WITHOUT_WINDOW = 10;
/** SQS event source maximum concurrency bounds. */
const MAX_CONCURRENCY = { min: 2, max: 1000 } as const;
/** SQS provisioned mode's poller bounds. */
const PROVISIONED_POLLERS = { minimum: { min: 2, max: 200 }, maximum: { min: 2, max: 2000 } } as const;
/** The event source metrics both event sources publish: records polled, invoked, failed, dropped. */
const EVENT_SOURCE_METRICS: lambda.MetricsConfig = { metrics: [lambda.MetricType.EVENT_COUNT] };
const CONSUMER_NAME = /^[a-z][a-z0-9-]{0,62}$/;

/** How the construct makes an alarm: named by alarmNameOf, notifying the alarm actions. */
type AlarmFactory = (
  alarmId: string,
  metric: cloudwatch.IMetric,
  threshold: number,
  description: string,
) => cloudwatch.Alarm;

/** A consumer's resolved settings, after validation. */
interface ConsumerSettings {
  /** The targets its definition sends follow-ups to, by name; empty when it sends nothing. */
  readonly followUpTargets: readonly string[];
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
  if (deployment.provisionedPollers) {
    problems.push(...validateProvisionedPollers(deployment.provisionedPollers, concurrency));
  } else if (
    !Number.isInteger(concurrency) ||
    concurrency < MAX_CONCURRENCY.min ||
    concurrency > MAX_CONCURRENCY.max
  ) {
    problems.push(
      `maxConcurrency must be ${MAX_CONCURRENCY.min}–${MAX_CONCURRENCY.max} (the SQS event source's bounds), got ${concurrency}`,
    );
  }
  if (deployment.filters !== undefined) {
    problems.push(
      "filters are refused: Lambda deletes every message an event filter drops, never processed and never " +
        "dead-lettered, a silent loss; remove them and decide in the work (a job it returns from is applied)",
    );
  }

  const fenceTtlSeconds = props.fenceTtlSeconds ?? TTL_DEFAULTS.fenceTtlSeconds;
  problems.push(
    ...validateFenceTtl({
      queueRetentionSeconds: deployment.queueRetentionSeconds,
      backstopRetentionSeconds: BACKSTOP_RETENTION_SECONDS,
      fifo: deployment.fifo,
      drainTimeoutSeconds: BACKSTOP_DRAIN_DEFAULTS.timeout.toSeconds(),
      retryPolicy,
      functionTimeoutSeconds: timeout,
      fenceTtlSeconds,
    }),
  );

  const followUpTargets = Object.keys(deployment.definition.sends ?? {}).sort();
  problems.push(...followUpTargetProblems(name, followUpTargets, props.followUpTargets ?? {}));

  // validateDeliveryTimings and validateFenceTtl word the function-timeout and retention bounds
  // alike; report such a line once.
  if (problems.length > 0) throw new ConfigurationError(`JobConsumer "${name}"`, [...new Set(problems)]);
  return {
    followUpTargets,
    retryPolicy,
    visibilityTimeoutSeconds: timings.visibilityTimeoutSeconds,
    fenceTtlSeconds,
    maxReceiveCount: timings.maxReceiveCount,
    timings,
  };
}

/**
 * The queues given for the follow-up targets against the definition's `sends`, as the consumer's
 * start-up checks its `JOBFENCE_OUTBOX_QUEUES`: a queue for every target (but itself, whose queue is
 * its own), and none for a consumer it does not send to (a deployment wired for another version).
 */
function followUpTargetProblems(
  consumer: string,
  declared: readonly string[],
  given: Readonly<Record<string, sqs.IQueue>>,
): string[] {
  const problems: string[] = [];
  for (const target of declared) {
    if (target !== consumer && !Object.hasOwn(given, target)) {
      problems.push(
        `sends: "${target}" has no queue: give followUpTargets["${target}"], the target consumer's source queue`,
      );
    }
  }
  for (const target of Object.keys(given)) {
    if (!declared.includes(target)) {
      problems.push(
        `followUpTargets: "${target}" is not a target of consumer "${consumer}" (its definition's sends): remove it`,
      );
    }
  }
  return problems;
}

/**
 * Provisioned pollers within SQS's bounds, and within maxConcurrency: AWS takes no maximum
 * concurrency beside them, so the pollers' reach is the bound, and maxConcurrency must cover it.
 */
function validateProvisionedPollers(
  pollers: NonNullable<ConsumerDeployment["provisionedPollers"]>,
  maxConcurrency: number,
): string[] {
  const { minimumPollers: min, maximumPollers: max } = pollers;
  const problems: string[] = [];
  const { minimum, maximum } = PROVISIONED_POLLERS;
  if (!Number.isInteger(min) || min < minimum.min || min > minimum.max) {
    problems.push(
      `provisionedPollers.minimumPollers must be ${minimum.min}–${minimum.max} (SQS's bounds), got ${min}`,
    );
  }
  if (!Number.isInteger(max) || max < maximum.min || max > maximum.max) {
    problems.push(
      `provisionedPollers.maximumPollers must be ${maximum.min}–${maximum.max} (SQS's bounds), got ${max}`,
    );
  }
  if (problems.length > 0) return problems;
  if (min > max) {
    return [`provisionedPollers.minimumPollers ${min} must not exceed maximumPollers ${max}`];
  }
  const perPoller = CONSUMER_DEFAULTS.invocationsPerPoller;
  const reach = max * perPoller;
  if (!Number.isInteger(maxConcurrency) || maxConcurrency < reach) {
    problems.push(
      `maxConcurrency ${maxConcurrency} is below what the provisioned pollers can run: maximumPollers ${max} × ` +
        `${perPoller} invocations per poller = ${reach} (provisioned mode has no maximum concurrency of its own, ` +
        `and each invocation holds its pool's connections); raise maxConcurrency to ${reach} or lower maximumPollers`,
    );
  }
  return problems;
}

/** What a consumer that sends follow-ups has besides: its targets and its scheduled outbox relay. */
export interface ConsumerOutbox {
  /** The queue of each target, by name: what the consumer and the relay may send to, and only that. */
  readonly targets: Readonly<Record<string, sqs.IQueue>>;
  /** The relay: logs in as the consumer, whose outbox rows are the only ones it sees. */
  readonly relayFunction: JobfenceFunction;
  /** `rate(1 minute)`. */
  readonly schedule: events.Rule;
  /** The relay's failure paths, each > 0 (or the age above its bound) in 5 minutes. */
  readonly alarms: {
    /** A row waiting longer than 15 minutes: its sends keep failing, or the relay is not running. */
    readonly oldestRowAge: cloudwatch.Alarm;
    /** Rows the relay gave up on, now dead letters of their target (`undelivered`). */
    readonly undelivered: cloudwatch.Alarm;
    /** Runs that could not reach the database or SQS. */
    readonly relayFailed: cloudwatch.Alarm;
    /** Runs that failed as Lambda invocations (a bad configuration, a timeout): they emit no metric. */
    readonly relayErrors: cloudwatch.Alarm;
    /** DeadLetterRecorded alerts of undelivered rows that could not be published. */
    readonly alertFailed: cloudwatch.Alarm;
  };
}

/** A consumer's queues, function, backstop drain and alarms. */
export class JobConsumer extends Construct {
  /** The consumer's name: its metrics' `service` dimension. */
  readonly consumerName: string;
  /** Its validated fence TTL: the migrate function registers it (core.register_fence_ttl, migration 0021). */
  readonly fenceTtlSeconds: number;
  /** The database connections its function, drain and outbox relay can hold at once, at most. */
  readonly connections: ConsumerConnections;
  /** The queue producers send jobs to. */
  readonly queue: sqs.Queue;
  /**
   * Where the source queue redrives after the validated maxReceiveCount (docs/design.md §5.6): by default the
   * minimum that still leaves room for the receives that run nothing.
   */
  readonly backstopQueue: sqs.Queue;
  /** The consumer function. */
  readonly consumerFunction: JobfenceFunction;
  /** The backstop drain function. */
  readonly drainFunction: JobfenceFunction;
  /** The event source of the consumer function. */
  readonly eventSource: lambdaEventSources.SqsEventSource;
  /** The event source of the backstop drain. */
  readonly drainEventSource: lambdaEventSources.SqsEventSource;
  /** The effective retry policy (the definition's override applied to the default). */
  readonly retryPolicy: RetryPolicy;
  /** Its follow-up targets and outbox relay, when its definition sends follow-ups. */
  readonly outbox?: ConsumerOutbox;
  /**
   * One alarm per failure path (docs/operations.md says what each means): the queues, the
   * functions' errors, and every failure metric of the harness and the drain.
   */
  readonly alarms: {
    /** Messages visible in the backstop: the harness could not record them. */
    readonly backstopDepth: cloudwatch.Alarm;
    /** Messages in flight in the backstop: the drain has them (and may be failing them). */
    readonly backstopInFlight: cloudwatch.Alarm;
    /** A message waiting in the backstop longer than an hour: the drain cannot record it. */
    readonly backstopOldestMessageAge: cloudwatch.Alarm;
    readonly oldestMessageAge: cloudwatch.Alarm;
    readonly consumerErrors: cloudwatch.Alarm;
    readonly drainErrors: cloudwatch.Alarm;
    readonly deadLetterWriteFailed: cloudwatch.Alarm;
    readonly alertFailed: cloudwatch.Alarm;
    readonly recordFailed: cloudwatch.Alarm;
    readonly retryScheduleFailed: cloudwatch.Alarm;
    readonly failureUnrecorded: cloudwatch.Alarm;
    readonly recordInterrupted: cloudwatch.Alarm;
    /** Records the drain reported back: not Lambda errors, so drainErrors never sees them. */
    readonly backstopRecordFailed: cloudwatch.Alarm;
    /** DeadLetterRecorded alerts of the drain's unrecorded dead letters that could not be published. */
    readonly drainAlertFailed: cloudwatch.Alarm;
  };

  constructor(scope: Construct, id: string, props: JobConsumerProps) {
    super(scope, id);
    const settings = resolveConsumerSettings(props);
    const { timings } = settings;
    const { deployment } = props;
    const name = deployment.definition.name;
    const names = queueNames(deployment);
    this.consumerName = name;
    this.fenceTtlSeconds = settings.fenceTtlSeconds;
    this.connections = consumerConnections(deployment);
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

    // Only a consumer that sends follow-ups is given queues to send to: the rest get no variable, no
    // grant and no relay.
    const given = props.followUpTargets ?? {};
    const targets =
      settings.followUpTargets.length > 0
        ? Object.fromEntries(
            settings.followUpTargets.map((target) => [
              target,
              // Validated: every target but the consumer itself was given.
              (Object.hasOwn(given, target) ? given[target] : this.queue) as sqs.IQueue,
            ]),
          )
        : undefined;
    const outboxQueues =
      targets &&
      Stack.of(this).toJsonString(
        Object.fromEntries(Object.entries(targets).map(([target, queue]) => [target, queue.queueUrl])),
      );

    this.consumerFunction = new JobfenceFunction(this, "Consumer", {
      entry: props.entry ?? `functions/${name}/handler.ts`,
      description: `jobfence consumer ${name}`,
      timeout: Duration.seconds(deployment.functionTimeoutSeconds),
      database: props.database,
      login: { consumer: name },
      environment: {
        [CONSUMER_ENV.opsBusName]: props.opsBus.eventBusName,
        [CONSUMER_ENV.queueUrl]: this.queue.queueUrl,
        [CONSUMER_ENV.fenceTtlSeconds]: String(settings.fenceTtlSeconds),
        [CONSUMER_ENV.queueRetentionSeconds]: String(deployment.queueRetentionSeconds),
        [CONSUMER_ENV.backstopRetentionSeconds]: String(BACKSTOP_RETENTION_SECONDS),
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
        // The pool size the connection budget counted, deployed rather than left to the default.
        [CONSUMER_ENV.poolMax]: String(this.connections.poolMax),
        ...(outboxQueues ? { [CONSUMER_ENV.outboxQueues]: outboxQueues } : {}),
      },
    });
    const pollers = deployment.provisionedPollers;
    this.eventSource = new lambdaEventSources.SqsEventSource(this.queue, {
      batchSize: deployment.batchSize,
      // AWS takes one or the other; with pollers, maxConcurrency was checked to cover their reach.
      ...(pollers
        ? {
            provisionedPollerConfig: {
              minimumPollers: pollers.minimumPollers,
              maximumPollers: pollers.maximumPollers,
            },
          }
        : { maxConcurrency: deployment.maxConcurrency }),
      reportBatchItemFailures: true,
      // Only when set: CDK refuses any batching window on a FIFO queue, even 0.
      ...(timings.batchingWindowSeconds > 0
        ? { maxBatchingWindow: Duration.seconds(timings.batchingWindowSeconds) }
        : {}),
      metricsConfig: EVENT_SOURCE_METRICS,
    });
    this.consumerFunction.function.addEventSource(this.eventSource);
    // The retry middleware hides a failed message for its backoff delay; the event
    // source's own grant covers receive and delete.
    this.consumerFunction.function.addToRolePolicy(
      new iam.PolicyStatement({ actions: ["sqs:ChangeMessageVisibility"], resources: [this.queue.queueArn] }),
    );
    props.opsBus.grantPutEventsTo(this.consumerFunction.function);
    // The relay after COMMIT sends each follow-up to its target's queue.
    if (targets) grantReplaySend(this.consumerFunction.function, Object.values(targets));

    this.drainFunction = new JobfenceFunction(this, "BackstopDrain", {
      entry: "functions/backstop-drain/handler.ts",
      description: `jobfence backstop drain of ${name}`,
      timeout: BACKSTOP_DRAIN_DEFAULTS.timeout,
      database: props.database,
      login: { consumer: name },
      environment: {
        [DRAIN_ENV.consumer]: name,
        [DRAIN_ENV.sourceQueueUrl]: this.queue.queueUrl,
        [DRAIN_ENV.sourceMaxReceiveCount]: String(settings.maxReceiveCount),
        [DRAIN_ENV.sourceRetentionSeconds]: String(deployment.queueRetentionSeconds),
        [DRAIN_ENV.opsBusName]: props.opsBus.eventBusName,
      },
    });
    this.drainEventSource = new lambdaEventSources.SqsEventSource(this.backstopQueue, {
      batchSize: BACKSTOP_DRAIN_DEFAULTS.batchSize,
      maxConcurrency: BACKSTOP_DRAIN_DEFAULTS.maxConcurrency,
      reportBatchItemFailures: true,
      metricsConfig: EVENT_SOURCE_METRICS,
    });
    this.drainFunction.function.addEventSource(this.drainEventSource);
    props.opsBus.grantPutEventsTo(this.drainFunction.function);

    // Every alarm treats missing data as not breaching: the failure metrics are only emitted when
    // something fails, and SQS stops reporting an idle queue's metrics.
    const alarm: AlarmFactory = (alarmId, metric, threshold, description) => {
      const created = new cloudwatch.Alarm(this, alarmId, {
        alarmName: alarmNameOf(this, alarmId),
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
    const backstopOldest =
      props.backstopOldestMessageAlarmSeconds ?? CONSUMER_DEFAULTS.backstopOldestMessageAlarmSeconds;
    const queuePeriod = { period: CONSUMER_DEFAULTS.queueAlarmPeriod, statistic: "Maximum" };
    const failures = (metricName: string) =>
      this.metric(metricName, { period: CONSUMER_DEFAULTS.failureAlarmPeriod, statistic: "Sum" });
    const drainFailures = (metricName: string) =>
      this.drainMetric(metricName, { period: CONSUMER_DEFAULTS.failureAlarmPeriod, statistic: "Sum" });
    this.alarms = {
      backstopDepth: alarm(
        "BackstopDepthAlarm",
        this.backstopQueue.metricApproximateNumberOfMessagesVisible(queuePeriod),
        0,
        `${name}: messages reached the backstop queue (the harness could not record their outcome)`,
      ),
      backstopInFlight: alarm(
        "BackstopInFlightAlarm",
        this.backstopQueue.metricApproximateNumberOfMessagesNotVisible(queuePeriod),
        0,
        `${name}: the backstop drain holds messages in flight (it records them as unrecorded dead letters, or keeps failing to)`,
      ),
      backstopOldestMessageAge: alarm(
        "BackstopOldestMessageAlarm",
        this.backstopQueue.metricApproximateAgeOfOldestMessage(queuePeriod),
        backstopOldest,
        `${name}: a message has waited more than ${backstopOldest} s in the backstop queue (the drain cannot record it; the backstop keeps it 14 days)`,
      ),
      oldestMessageAge: alarm(
        "OldestMessageAlarm",
        this.queue.metricApproximateAgeOfOldestMessage(queuePeriod),
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
      deadLetterWriteFailed: alarm(
        "DeadLetterWriteFailedAlarm",
        failures(METRIC.deadLetterWriteFailed),
        0,
        `${name}: a dead letter could not be written (the message stays in the queue and comes back)`,
      ),
      alertFailed: alarm(
        "AlertFailedAlarm",
        failures(METRIC.alertFailed),
        0,
        `${name}: a DeadLetterRecorded alert could not be published to the ops bus (the dead letter is recorded)`,
      ),
      recordFailed: alarm(
        "RecordFailedAlarm",
        failures(METRIC.recordFailed),
        0,
        `${name}: a record failed with an error the harness could not classify (the message stays in the queue)`,
      ),
      retryScheduleFailed: alarm(
        "RetryScheduleFailedAlarm",
        failures(METRIC.retryScheduleFailed),
        0,
        `${name}: a retry's backoff could not be set (ChangeMessageVisibility failed; the visibility timeout paces it instead)`,
      ),
      failureUnrecorded: alarm(
        "FailureUnrecordedAlarm",
        failures(METRIC.failureUnrecorded),
        0,
        `${name}: a failure could not be counted in the attempt ledger (the database is unreachable)`,
      ),
      recordInterrupted: alarm(
        "RecordInterruptedAlarm",
        failures(METRIC.recordInterrupted),
        0,
        `${name}: a record's work was still running when the invocation's time ran out (rolled back, interruption recorded)`,
      ),
      backstopRecordFailed: alarm(
        "BackstopRecordFailedAlarm",
        drainFailures(METRIC.backstopRecordFailed),
        0,
        `${name}: the backstop drain could not record messages as dead letters (they stay in the backstop)`,
      ),
      drainAlertFailed: alarm(
        "DrainAlertFailedAlarm",
        drainFailures(METRIC.alertFailed),
        0,
        `${name}: the backstop drain could not publish a DeadLetterRecorded alert (the unrecorded dead letter is recorded)`,
      ),
    };
    if (targets && outboxQueues) this.outbox = this.createOutbox(props, targets, outboxQueues, alarm);
  }

  /** Every alarm of the consumer, its outbox relay's included: what the deployment routes to the operator. */
  get allAlarms(): cloudwatch.Alarm[] {
    return [...Object.values(this.alarms), ...Object.values(this.outbox?.alarms ?? {})];
  }

  /**
   * The scheduled outbox relay of a sending consumer: the same login, VPC and security group as the
   * consumer function (it reads and deletes the consumer's outbox rows), the same target queues,
   * the ops bus for the alerts of undelivered rows, and its alarms.
   */
  private createOutbox(
    props: JobConsumerProps,
    targets: Readonly<Record<string, sqs.IQueue>>,
    outboxQueues: string,
    alarm: AlarmFactory,
  ): ConsumerOutbox {
    const name = this.consumerName;
    const relayFunction = new JobfenceFunction(this, "OutboxRelay", {
      entry: "functions/outbox-relay/handler.ts",
      description: `jobfence outbox relay of ${name}`,
      timeout: OUTBOX_RELAY_DEFAULTS.timeout,
      database: props.database,
      login: { consumer: name },
      environment: {
        [OUTBOX_RELAY_ENV.consumer]: name,
        [OUTBOX_RELAY_ENV.opsBusName]: props.opsBus.eventBusName,
        [OUTBOX_RELAY_ENV.outboxQueues]: outboxQueues,
      },
    });
    grantReplaySend(relayFunction.function, Object.values(targets));
    props.opsBus.grantPutEventsTo(relayFunction.function);
    // A failed run is not retried: the next one starts within a minute and finds the same rows, so
    // a retry would only add an overlapping run (and a connection the budget does not count).
    const rate = OUTBOX_RELAY_DEFAULTS.rate;
    relayFunction.function.configureAsyncInvoke({ retryAttempts: 0, maxEventAge: rate });
    const schedule = new events.Rule(this, "OutboxRelaySchedule", {
      description: `jobfence outbox relay of ${name}, every minute`,
      schedule: events.Schedule.rate(rate),
      targets: [
        new eventsTargets.LambdaFunction(relayFunction.function, { retryAttempts: 0, maxEventAge: rate }),
      ],
    });

    const period = CONSUMER_DEFAULTS.failureAlarmPeriod;
    const failures = (metricName: string) => this.outboxMetric(metricName, { period, statistic: "Sum" });
    const oldest = OUTBOX_RELAY_DEFAULTS.oldestRowAlarmSeconds;
    return {
      targets,
      relayFunction,
      schedule,
      alarms: {
        oldestRowAge: alarm(
          "OutboxOldestRowAlarm",
          this.outboxMetric(METRIC.outboxOldestAge, { period, statistic: "Maximum" }),
          oldest,
          `${name}: a follow-up has waited more than ${oldest} s in the outbox (its sends keep failing; the relay retries, then dead-letters it undelivered)`,
        ),
        undelivered: alarm(
          "OutboxUndeliveredAlarm",
          failures(METRIC.outboxUndelivered),
          0,
          `${name}: the outbox relay gave up on follow-ups and recorded them as undelivered dead letters of their target (the parent's effect stands; replay them)`,
        ),
        relayFailed: alarm(
          "OutboxRelayFailedAlarm",
          failures(METRIC.outboxRelayFailed),
          0,
          `${name}: an outbox relay run could not reach the database or SQS (the follow-ups wait for the next run)`,
        ),
        relayErrors: alarm(
          "OutboxRelayErrorsAlarm",
          relayFunction.function.metricErrors({ period, statistic: "Sum" }),
          0,
          `${name}: the outbox relay failed an invocation (its configuration, or a timeout): such a run reports no outbox metric`,
        ),
        alertFailed: alarm(
          "OutboxAlertFailedAlarm",
          failures(METRIC.alertFailed),
          0,
          `${name}: the outbox relay could not publish a DeadLetterRecorded alert (the undelivered dead letter is recorded)`,
        ),
      },
    };
  }

  /** A metric the consumer's harness emits (namespace `jobfence`, dimension `service` = the consumer). */
  metric(metricName: string, options: cloudwatch.MetricOptions = {}): cloudwatch.Metric {
    return new cloudwatch.Metric({
      namespace: METRICS_NAMESPACE,
      metricName,
      dimensionsMap: { service: this.consumerName },
      ...options,
    });
  }

  /** A metric its outbox relay emits (dimension `service` = `<consumer>-outbox`). */
  outboxMetric(metricName: string, options: cloudwatch.MetricOptions = {}): cloudwatch.Metric {
    return new cloudwatch.Metric({
      namespace: METRICS_NAMESPACE,
      metricName,
      dimensionsMap: { service: outboxRelayService(this.consumerName) },
      ...options,
    });
  }

  /** A metric its backstop drain emits (dimension `service` = `<consumer>-backstop`). */
  drainMetric(metricName: string, options: cloudwatch.MetricOptions = {}): cloudwatch.Metric {
    return new cloudwatch.Metric({
      namespace: METRICS_NAMESPACE,
      metricName,
      dimensionsMap: { service: backstopDrainService(this.consumerName) },
      ...options,
    });
  }
}
