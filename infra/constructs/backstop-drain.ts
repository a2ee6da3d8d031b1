/**
 * A consumer's backstop drain (docs/design.md §5.6): the function behind an SQS event source on the
 * backstop queue that records what reached it as `unrecorded` dead letters, and the alarms that
 * watch the backstop (its depth, its messages in flight and their age, the drain's errors and the
 * failures it reports back).
 */
import type * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import type * as events from "aws-cdk-lib/aws-events";
import type * as lambda from "aws-cdk-lib/aws-lambda";
import * as lambdaEventSources from "aws-cdk-lib/aws-lambda-event-sources";
import type * as sqs from "aws-cdk-lib/aws-sqs";
import type { Construct } from "constructs";
import { backstopDrainService, DRAIN_ENV } from "../../shared/backstop/drain.ts";
import { METRIC } from "../../shared/metrics/names.ts";
import { BACKSTOP_DRAIN_DEFAULTS, CONSUMER_DEFAULTS } from "../defaults.ts";
import type { AlarmFactory } from "./alarms.ts";
import type { DatabaseAccess } from "./database.ts";
import { jobfenceEntry } from "./entries.ts";
import { JobfenceFunction } from "./jobfence-function.ts";
import { jobfenceMetric } from "./metrics.ts";

/** What a consumer's backstop drain is made from. */
export interface BackstopDrainProps {
  /** The consumer's runtime (Node 22 or 24): every function of a consumer runs on it. */
  readonly runtime: lambda.Runtime;
  /**
   * The drain's entry point: the user's own (JobConsumer's `drainEntry`) for a definition with a
   * custom fingerprint. @default jobfence's own drain
   */
  readonly entry?: string;
  /** Where esbuild resolves the user's entry's packages from. @default found from the entry */
  readonly projectRoot?: string;
  /** @default the lock file found with {@link projectRoot} */
  readonly depsLockFilePath?: string;
  /** The consumer: the drain logs in as it and records its dead letters. */
  readonly consumerName: string;
  readonly database: DatabaseAccess;
  /** The ops bus, for the alerts of its `unrecorded` dead letters. */
  readonly opsBus: events.IEventBus;
  /** The consumer's source queue, which redrives to the backstop. */
  readonly sourceQueue: sqs.IQueue;
  /** The validated maxReceiveCount of the source queue's redrive. */
  readonly sourceMaxReceiveCount: number;
  readonly sourceRetentionSeconds: number;
  readonly backstopQueue: sqs.IQueue;
  /** Alarm when the backstop's oldest message is older than this. */
  readonly oldestMessageAlarmSeconds: number;
  /** The event source metrics to publish, as the consumer's own event source does. */
  readonly eventSourceMetrics: lambda.MetricsConfig;
  /** The consumer's alarm factory: the drain's alarms are the consumer's. */
  readonly alarm: AlarmFactory;
}

/** The drain, its event source and the backstop's alarms. */
export interface BackstopDrain {
  readonly drainFunction: JobfenceFunction;
  readonly drainEventSource: lambdaEventSources.SqsEventSource;
  readonly alarms: {
    readonly backstopDepth: cloudwatch.Alarm;
    readonly backstopInFlight: cloudwatch.Alarm;
    readonly backstopOldestMessageAge: cloudwatch.Alarm;
    readonly drainErrors: cloudwatch.Alarm;
    readonly backstopRecordFailed: cloudwatch.Alarm;
    readonly drainAlertFailed: cloudwatch.Alarm;
  };
}

/** A metric a consumer's backstop drain emits (dimension `service` = `<consumer>-backstop`). */
export function backstopDrainMetric(
  consumerName: string,
  metricName: string,
  options: cloudwatch.MetricOptions = {},
): cloudwatch.Metric {
  return jobfenceMetric(backstopDrainService(consumerName), metricName, options);
}

/**
 * The backstop drain of a consumer, made in the consumer's own scope (`scope`), where its function
 * and alarms have always stood: their construct paths, and so their logical ids and alarm names,
 * are those deployed.
 */
export function createBackstopDrain(scope: Construct, props: BackstopDrainProps): BackstopDrain {
  const name = props.consumerName;
  const drainFunction = new JobfenceFunction(scope, "BackstopDrain", {
    ...(props.entry === undefined
      ? { entry: jobfenceEntry("backstop-drain") }
      : {
          entry: props.entry,
          ...(props.projectRoot !== undefined ? { projectRoot: props.projectRoot } : {}),
          ...(props.depsLockFilePath !== undefined ? { depsLockFilePath: props.depsLockFilePath } : {}),
        }),
    runtime: props.runtime,
    description: `jobfence backstop drain of ${name}`,
    timeout: BACKSTOP_DRAIN_DEFAULTS.timeout,
    database: props.database,
    login: { consumer: name },
    environment: {
      [DRAIN_ENV.consumer]: name,
      [DRAIN_ENV.sourceQueueUrl]: props.sourceQueue.queueUrl,
      [DRAIN_ENV.sourceMaxReceiveCount]: String(props.sourceMaxReceiveCount),
      [DRAIN_ENV.sourceRetentionSeconds]: String(props.sourceRetentionSeconds),
      [DRAIN_ENV.opsBusName]: props.opsBus.eventBusName,
    },
  });
  const drainEventSource = new lambdaEventSources.SqsEventSource(props.backstopQueue, {
    batchSize: BACKSTOP_DRAIN_DEFAULTS.batchSize,
    maxConcurrency: BACKSTOP_DRAIN_DEFAULTS.maxConcurrency,
    reportBatchItemFailures: true,
    metricsConfig: props.eventSourceMetrics,
  });
  drainFunction.function.addEventSource(drainEventSource);
  props.opsBus.grantPutEventsTo(drainFunction.function);
  return { drainFunction, drainEventSource, alarms: backstopAlarms(props, drainFunction) };
}

/** The backstop's alarms, in the order the consumer's alarms list them. */
function backstopAlarms(props: BackstopDrainProps, drainFunction: JobfenceFunction): BackstopDrain["alarms"] {
  const { alarm, backstopQueue, consumerName: name } = props;
  const queuePeriod = { period: CONSUMER_DEFAULTS.queueAlarmPeriod, statistic: "Maximum" };
  const oldest = props.oldestMessageAlarmSeconds;
  const failures = (metricName: string) =>
    backstopDrainMetric(name, metricName, { period: CONSUMER_DEFAULTS.failureAlarmPeriod, statistic: "Sum" });
  return {
    backstopDepth: alarm(
      "BackstopDepthAlarm",
      backstopQueue.metricApproximateNumberOfMessagesVisible(queuePeriod),
      0,
      `${name}: messages reached the backstop queue (the harness could not record their outcome)`,
    ),
    backstopInFlight: alarm(
      "BackstopInFlightAlarm",
      backstopQueue.metricApproximateNumberOfMessagesNotVisible(queuePeriod),
      0,
      `${name}: the backstop drain holds messages in flight (it records them as unrecorded dead letters, or keeps failing to)`,
    ),
    backstopOldestMessageAge: alarm(
      "BackstopOldestMessageAlarm",
      backstopQueue.metricApproximateAgeOfOldestMessage(queuePeriod),
      oldest,
      `${name}: a message has waited more than ${oldest} s in the backstop queue (the drain cannot record it; the backstop keeps it 14 days)`,
    ),
    drainErrors: alarm(
      "DrainErrorsAlarm",
      drainFunction.function.metricErrors({ period: CONSUMER_DEFAULTS.failureAlarmPeriod, statistic: "Sum" }),
      0,
      `${name}: the backstop drain failed an invocation`,
    ),
    backstopRecordFailed: alarm(
      "BackstopRecordFailedAlarm",
      failures(METRIC.backstopRecordFailed),
      0,
      `${name}: the backstop drain could not record messages as dead letters (they stay in the backstop)`,
    ),
    drainAlertFailed: alarm(
      "DrainAlertFailedAlarm",
      failures(METRIC.alertFailed),
      0,
      `${name}: the backstop drain could not publish a DeadLetterRecorded alert (the unrecorded dead letter is recorded)`,
    ),
  };
}
