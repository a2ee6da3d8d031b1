/**
 * TTL cleanup and escalation (docs/design.md §7, §8.2): the cleanup function on a 15-minute schedule, logging in
 * as the cleanup login (it can only call the SECURITY DEFINER delete of expired fences), and the
 * daily escalation of stale pending dead letters, logging in as the ops login and publishing one
 * `DeadLettersEscalated` to the ops bus. Each has an error alarm.
 */
import { Duration } from "aws-cdk-lib";
import type * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import * as events from "aws-cdk-lib/aws-events";
import * as targets from "aws-cdk-lib/aws-events-targets";
import { Construct } from "constructs";
import { CLEANUP_SERVICE } from "../../functions/fence-cleanup/cleanup.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { SCHEDULE_DEFAULTS } from "../defaults.ts";
import { alarmFactory } from "./alarms.ts";
import type { DatabaseAccess } from "./database.ts";
import { jobfenceEntry } from "./entries.ts";
import { JobfenceFunction } from "./jobfence-function.ts";
import { jobfenceMetric } from "./metrics.ts";

/** Props of {@link FenceCleanup}. */
export interface FenceCleanupProps {
  readonly database: DatabaseAccess;
  /** The ops bus escalation publishes to. */
  readonly opsBus: events.IEventBus;
  /**
   * A dead letter pending longer than this many days is escalated.
   * @default SCHEDULE_DEFAULTS.escalationThresholdDays (3)
   */
  readonly escalationThresholdDays?: number;
  /**
   * The UTC hour of the daily escalation.
   * @default SCHEDULE_DEFAULTS.escalationHourUtc (8)
   */
  readonly escalationHourUtc?: number;
  /**
   * Fences deleted per transaction.
   * @default the function's own (5,000)
   */
  readonly cleanupBatchSize?: number;
  /** Where the error alarms notify. @default none */
  readonly alarmActions?: readonly cloudwatch.IAlarmAction[];
}

/** The cleanup and escalation functions and their schedules. */
export class FenceCleanup extends Construct {
  readonly cleanupFunction: JobfenceFunction;
  readonly escalationFunction: JobfenceFunction;
  /** `rate(15 minutes)`. */
  readonly cleanupSchedule: events.Rule;
  /** Once a day. */
  readonly escalationSchedule: events.Rule;
  readonly alarms: { readonly cleanupErrors: cloudwatch.Alarm; readonly escalationErrors: cloudwatch.Alarm };

  constructor(scope: Construct, id: string, props: FenceCleanupProps) {
    super(scope, id);
    const days = props.escalationThresholdDays ?? SCHEDULE_DEFAULTS.escalationThresholdDays;
    const hour = props.escalationHourUtc ?? SCHEDULE_DEFAULTS.escalationHourUtc;
    const problems: string[] = [];
    if (!(days > 0 && days <= 365)) problems.push(`escalationThresholdDays must be in (0, 365], got ${days}`);
    if (!Number.isInteger(hour) || hour < 0 || hour > 23) {
      problems.push(`escalationHourUtc must be a whole hour 0–23, got ${hour}`);
    }
    const batch = props.cleanupBatchSize;
    if (batch !== undefined && (!Number.isInteger(batch) || batch < 1 || batch > 100_000)) {
      problems.push(`cleanupBatchSize must be 1–100000, got ${batch}`);
    }
    if (problems.length > 0) throw new ConfigurationError("FenceCleanup", problems);

    this.cleanupFunction = new JobfenceFunction(this, "Cleanup", {
      entry: jobfenceEntry("fence-cleanup"),
      description: "jobfence TTL cleanup of expired fences",
      timeout: SCHEDULE_DEFAULTS.cleanupTimeout,
      database: props.database,
      login: "cleanup",
      environment: batch !== undefined ? { JOBFENCE_CLEANUP_BATCH_SIZE: String(batch) } : {},
    });
    this.cleanupSchedule = new events.Rule(this, "CleanupSchedule", {
      description: "jobfence TTL cleanup, every 15 minutes",
      schedule: events.Schedule.rate(SCHEDULE_DEFAULTS.cleanupRate),
      targets: [new targets.LambdaFunction(this.cleanupFunction.function, { retryAttempts: 0 })],
    });

    this.escalationFunction = new JobfenceFunction(this, "Escalation", {
      entry: jobfenceEntry("escalation"),
      description: "jobfence daily escalation of stale pending dead letters",
      timeout: SCHEDULE_DEFAULTS.escalationTimeout,
      database: props.database,
      login: "ops",
      environment: {
        JOBFENCE_OPS_BUS_NAME: props.opsBus.eventBusName,
        JOBFENCE_ESCALATION_DAYS: String(days),
      },
    });
    props.opsBus.grantPutEventsTo(this.escalationFunction.function);
    this.escalationSchedule = new events.Rule(this, "EscalationSchedule", {
      description: "jobfence escalation of stale dead letters, daily",
      schedule: events.Schedule.cron({ minute: "0", hour: String(hour) }),
      targets: [new targets.LambdaFunction(this.escalationFunction.function, { retryAttempts: 2 })],
    });

    const alarm = alarmFactory(this, { actions: props.alarmActions });
    const errors = (alarmId: string, fn: JobfenceFunction, what: string) =>
      alarm(
        alarmId,
        fn.function.metricErrors({ period: Duration.minutes(15), statistic: "Sum" }),
        0,
        `jobfence ${what} failed`,
      );
    this.alarms = {
      cleanupErrors: errors("CleanupErrorsAlarm", this.cleanupFunction, "TTL cleanup"),
      escalationErrors: errors("EscalationErrorsAlarm", this.escalationFunction, "escalation"),
    };
  }

  /** A metric of the cleanup run (`CLEANUP_METRIC`; dimension `service` = `fence-cleanup`). */
  cleanupMetric(metricName: string, options: cloudwatch.MetricOptions = {}): cloudwatch.Metric {
    return jobfenceMetric(CLEANUP_SERVICE, metricName, options);
  }
}
