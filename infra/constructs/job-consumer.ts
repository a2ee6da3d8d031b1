/**
 * One consumer, deployed (docs/design.md §3–§5): its source queue, the backstop queue the source
 * redrives to, the consumer function behind an SQS event source that reports partial batch
 * failures, the backstop drain (./backstop-drain.ts), least-privilege IAM and the alarms an
 * operator needs. Its props are validated at synth, every problem reported together
 * (./consumer-settings.ts).
 *
 * Every failure path has an alarm: the queues (the backstop's depth, in-flight messages and age;
 * the source's age), both functions' errors, and the harness's failure metrics, which count what a
 * record that stays in its queue or an alert that was lost never shows as a Lambda error.
 *
 * Its dead letters alarm too, whatever the ops bus routes: `deadLettered` watches the dead-letter
 * metrics the harness, the drain and the outbox relay publish as they record one, so a deployment
 * with no alert target of its own still hears of them through the alarm topic.
 *
 * A consumer whose definition sends follow-ups (`sends`) is given each target's queue: its function
 * and its scheduled outbox relay (./outbox-relay.ts) get the queues' URLs and may send to those
 * queues only. A consumer that sends nothing gets none of it.
 *
 * It takes the user's own entry point and definition: nothing here knows of a registry or of a
 * repository's layout. The backstop drain is jobfence's own unless the definition has a custom
 * `fingerprint`: then the user's `drainEntry` passes the definition to the drain (refused without).
 */
import { Duration, Stack } from "aws-cdk-lib";
import * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import type * as events from "aws-cdk-lib/aws-events";
import * as iam from "aws-cdk-lib/aws-iam";
import * as lambda from "aws-cdk-lib/aws-lambda";
import * as lambdaEventSources from "aws-cdk-lib/aws-lambda-event-sources";
import * as sqs from "aws-cdk-lib/aws-sqs";
import { Construct } from "constructs";
import {
  BACKSTOP_RETENTION_SECONDS,
  type ConsumerDeploymentSettings,
  expectedQueues,
  queueNames,
  VISIBILITY_TO_TIMEOUT_RATIO,
} from "../../functions/consumer-deployment.ts";
import { outboxRelayService } from "../../functions/outbox-relay/relay.ts";
import { CONSUMER_ENV } from "../../shared/config/consumer-config.ts";
import type { ExpectedConsumerQueues } from "../../shared/doctor/check-queues.ts";
import { ERROR_KIND, ERROR_KINDS } from "../../shared/errors/error-kind.ts";
import { deadLetteredMetric, METRIC } from "../../shared/metrics/names.ts";
import type { RetryPolicy } from "../../shared/retry/policy.ts";
import { type ConsumerConnections, consumerConnections } from "../connection-budget.ts";
import { BACKSTOP_DRAIN_DEFAULTS, CONSUMER_DEFAULTS } from "../defaults.ts";
import { alarmFactory } from "./alarms.ts";
import { backstopDrainMetric, createBackstopDrain } from "./backstop-drain.ts";
import { type ConsumerSettingsProps, resolveConsumerSettings } from "./consumer-settings.ts";
import type { DatabaseAccess } from "./database.ts";
import { JobfenceFunction } from "./jobfence-function.ts";
import { runOnManagedInstances } from "./managed-instances.ts";
import { jobfenceMetric } from "./metrics.ts";
import { type ConsumerOutbox, createOutboxRelay } from "./outbox-relay.ts";
import { grantReplaySend } from "./replay-send.ts";

/** Props of {@link JobConsumer}. */
export interface JobConsumerProps extends ConsumerSettingsProps {
  /** The database the consumer, its drain and its outbox relay log in to, all as the consumer's own login. */
  readonly database: DatabaseAccess;
  /** The ops bus that receives DeadLetterRecorded. */
  readonly opsBus: events.IEventBus;
  /**
   * The consumer's Lambda entry point, an absolute path (`.ts`, `.js` or `.mjs`) exporting
   * `handler` (`export const handler = createConsumer(definition)`).
   */
  readonly entry: string;
  /**
   * The folder esbuild resolves the entry's packages from.
   * @default the nearest folder above the entry holding a lock file
   */
  readonly projectRoot?: string;
  /** @default the lock file found with {@link projectRoot} */
  readonly depsLockFilePath?: string;
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
}

/** The event source metrics both event sources publish: records polled, invoked, failed, dropped. */
const EVENT_SOURCE_METRICS: lambda.MetricsConfig = { metrics: [lambda.MetricType.EVENT_COUNT] };

/** A consumer's queues, function, backstop drain and alarms. */
export class JobConsumer extends Construct {
  /** The consumer's name: its metrics' `service` dimension. */
  readonly consumerName: string;
  /** Its deployment settings, every default filled in. */
  readonly deployment: ConsumerDeploymentSettings;
  /** What its queues are created with: the doctor checks the live queues against it. */
  readonly expectedQueues: ExpectedConsumerQueues;
  /**
   * The consumers its definition sends follow-ups to (its `sends`), sorted; empty when it sends
   * nothing. The migrate function registers them (core.register_follow_up_targets).
   */
  readonly followUpTargets: readonly string[];
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
    /**
     * A dead letter was recorded (any kind: by the harness, the backstop drain or the outbox
     * relay): what an operator must look at, in the alarm topic whatever else the ops bus routes.
     */
    readonly deadLettered: cloudwatch.Alarm;
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
    const { timings, deployment, runtime } = settings;
    const name = deployment.definition.name;
    const names = queueNames(deployment);
    this.consumerName = name;
    this.deployment = deployment;
    this.expectedQueues = expectedQueues(deployment, timings);
    this.fenceTtlSeconds = settings.fenceTtlSeconds;
    this.followUpTargets = settings.followUpTargets;
    this.connections = consumerConnections(deployment, props.managedInstances);
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
      entry: props.entry,
      ...(props.projectRoot !== undefined ? { projectRoot: props.projectRoot } : {}),
      ...(props.depsLockFilePath !== undefined ? { depsLockFilePath: props.depsLockFilePath } : {}),
      runtime,
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
        // The pool size the connection budget counted, deployed rather than left to the default; on
        // Managed Instances each worker sizes its own from the concurrency Lambda gives it.
        ...(props.managedInstances ? {} : { [CONSUMER_ENV.poolMax]: String(this.connections.poolMax) }),
        ...(outboxQueues ? { [CONSUMER_ENV.outboxQueues]: outboxQueues } : {}),
      },
    });
    if (props.managedInstances) runOnManagedInstances(this.consumerFunction.function, props.managedInstances);
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

    const alarm = alarmFactory(this, { actions: props.alarmActions });
    const backstop = createBackstopDrain(this, {
      ...(props.drainEntry !== undefined
        ? {
            entry: props.drainEntry,
            ...(props.projectRoot !== undefined ? { projectRoot: props.projectRoot } : {}),
            ...(props.depsLockFilePath !== undefined ? { depsLockFilePath: props.depsLockFilePath } : {}),
          }
        : {}),
      consumerName: name,
      runtime,
      database: props.database,
      opsBus: props.opsBus,
      sourceQueue: this.queue,
      sourceMaxReceiveCount: settings.maxReceiveCount,
      sourceRetentionSeconds: deployment.queueRetentionSeconds,
      backstopQueue: this.backstopQueue,
      oldestMessageAlarmSeconds:
        props.backstopOldestMessageAlarmSeconds ?? CONSUMER_DEFAULTS.backstopOldestMessageAlarmSeconds,
      eventSourceMetrics: EVENT_SOURCE_METRICS,
      alarm,
    });
    this.drainFunction = backstop.drainFunction;
    this.drainEventSource = backstop.drainEventSource;

    const oldest = props.oldestMessageAlarmSeconds ?? CONSUMER_DEFAULTS.oldestMessageAlarmSeconds;
    const queuePeriod = { period: CONSUMER_DEFAULTS.queueAlarmPeriod, statistic: "Maximum" };
    const failures = (metricName: string) =>
      this.metric(metricName, { period: CONSUMER_DEFAULTS.failureAlarmPeriod, statistic: "Sum" });
    // In the order they have always been listed (the dashboard shows them so).
    const { backstopDepth, backstopInFlight, backstopOldestMessageAge, drainErrors } = backstop.alarms;
    this.alarms = {
      deadLettered: alarm(
        "DeadLetteredAlarm",
        this.deadLetteredMetric(),
        0,
        `${name}: a dead letter was recorded; list it with the dead-letter API (docs/operations.md, Dead letters)`,
      ),
      backstopDepth,
      backstopInFlight,
      backstopOldestMessageAge,
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
      drainErrors,
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
      backstopRecordFailed: backstop.alarms.backstopRecordFailed,
      drainAlertFailed: backstop.alarms.drainAlertFailed,
    };
    if (targets && outboxQueues) {
      this.outbox = createOutboxRelay(this, {
        consumerName: name,
        runtime,
        database: props.database,
        opsBus: props.opsBus,
        targets,
        outboxQueues,
        alarm,
      });
    }
  }

  /** Every alarm of the consumer, its outbox relay's included: what the deployment routes to the operator. */
  get allAlarms(): cloudwatch.Alarm[] {
    return [...Object.values(this.alarms), ...Object.values(this.outbox?.alarms ?? {})];
  }

  /** A metric the consumer's harness emits (namespace `jobfence`, dimension `service` = the consumer). */
  metric(metricName: string, options: cloudwatch.MetricOptions = {}): cloudwatch.Metric {
    return jobfenceMetric(this.consumerName, metricName, options);
  }

  /**
   * Dead letters recorded, of every kind, summed per period: the harness's (one metric per kind),
   * the backstop drain's `unrecorded` and the outbox relay's `undelivered` (ten metrics, CloudWatch's
   * limit for an alarm's expression).
   */
  deadLetteredMetric(period: Duration = CONSUMER_DEFAULTS.failureAlarmPeriod): cloudwatch.MathExpression {
    const options = { period, statistic: "Sum" };
    const metrics: Record<string, cloudwatch.IMetric> = {
      ...Object.fromEntries(
        ERROR_KINDS.map((kind) => [kind, this.metric(deadLetteredMetric(kind), options)]),
      ),
      drainUnrecorded: this.drainMetric(deadLetteredMetric(ERROR_KIND.unrecorded), options),
      outboxUndelivered: this.outboxMetric(METRIC.outboxUndelivered, options),
    };
    return new cloudwatch.MathExpression({
      expression: "SUM(METRICS())",
      usingMetrics: metrics,
      period,
      label: `${this.consumerName}: dead letters recorded`,
    });
  }

  /** A metric its outbox relay emits (dimension `service` = `<consumer>-outbox`). */
  outboxMetric(metricName: string, options: cloudwatch.MetricOptions = {}): cloudwatch.Metric {
    return jobfenceMetric(outboxRelayService(this.consumerName), metricName, options);
  }

  /** A metric its backstop drain emits (dimension `service` = `<consumer>-backstop`). */
  drainMetric(metricName: string, options: cloudwatch.MetricOptions = {}): cloudwatch.Metric {
    return backstopDrainMetric(this.consumerName, metricName, options);
  }
}
