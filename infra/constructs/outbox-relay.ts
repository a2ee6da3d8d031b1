/**
 * The scheduled outbox relay of a consumer that sends follow-ups: it sends what the relay after
 * COMMIT left behind, every minute, to the target queues the consumer may send to and only those,
 * and has its own alarms (its outbox's oldest row, undelivered rows, failed runs).
 */
import type * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import * as events from "aws-cdk-lib/aws-events";
import * as eventsTargets from "aws-cdk-lib/aws-events-targets";
import type * as lambda from "aws-cdk-lib/aws-lambda";
import type * as sqs from "aws-cdk-lib/aws-sqs";
import type { Construct } from "constructs";
import { OUTBOX_RELAY_ENV, outboxRelayService } from "../../functions/outbox-relay/relay.ts";
import { METRIC } from "../../shared/metrics/names.ts";
import { CONSUMER_DEFAULTS, OUTBOX_RELAY_DEFAULTS } from "../defaults.ts";
import type { AlarmFactory } from "./alarms.ts";
import type { DatabaseAccess } from "./database.ts";
import { jobfenceEntry } from "./entries.ts";
import { JobfenceFunction } from "./jobfence-function.ts";
import { jobfenceMetric } from "./metrics.ts";
import { grantReplaySend } from "./replay-send.ts";

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

/** What a consumer's outbox relay is made from. */
export interface OutboxRelayProps {
  /** The consumer's runtime (Node 22 or 24): every function of a consumer runs on it. */
  readonly runtime: lambda.Runtime;
  /** The sending consumer: the relay logs in as it, and sees only its outbox rows. */
  readonly consumerName: string;
  readonly database: DatabaseAccess;
  /** The ops bus, for the alerts of undelivered rows. */
  readonly opsBus: events.IEventBus;
  /** The queue of each target, by name. */
  readonly targets: Readonly<Record<string, sqs.IQueue>>;
  /** The targets' queue URLs by name, as JSON: the relay's `JOBFENCE_OUTBOX_QUEUES`, as the consumer's. */
  readonly outboxQueues: string;
  /** The consumer's alarm factory: the relay's alarms are the consumer's. */
  readonly alarm: AlarmFactory;
}

/**
 * The outbox relay of a sending consumer, made in the consumer's own scope (`scope`), where its
 * function, schedule and alarms have always stood: their construct paths, and so their logical ids
 * and alarm names, are those deployed. The same login, VPC and security group as the consumer
 * function (it reads and deletes the consumer's outbox rows), and the same target queues.
 */
export function createOutboxRelay(scope: Construct, props: OutboxRelayProps): ConsumerOutbox {
  const { targets, outboxQueues } = props;
  const name = props.consumerName;
  const relayFunction = new JobfenceFunction(scope, "OutboxRelay", {
    entry: jobfenceEntry("outbox-relay"),
    runtime: props.runtime,
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
  const schedule = new events.Rule(scope, "OutboxRelaySchedule", {
    description: `jobfence outbox relay of ${name}, every minute`,
    schedule: events.Schedule.rate(rate),
    targets: [
      new eventsTargets.LambdaFunction(relayFunction.function, { retryAttempts: 0, maxEventAge: rate }),
    ],
  });

  const period = CONSUMER_DEFAULTS.failureAlarmPeriod;
  const metric = (metricName: string, options: cloudwatch.MetricOptions) =>
    jobfenceMetric(outboxRelayService(name), metricName, options);
  const failures = (metricName: string) => metric(metricName, { period, statistic: "Sum" });
  const oldest = OUTBOX_RELAY_DEFAULTS.oldestRowAlarmSeconds;
  return {
    targets,
    relayFunction,
    schedule,
    alarms: {
      oldestRowAge: props.alarm(
        "OutboxOldestRowAlarm",
        metric(METRIC.outboxOldestAge, { period, statistic: "Maximum" }),
        oldest,
        `${name}: a follow-up has waited more than ${oldest} s in the outbox (its sends keep failing; the relay retries, then dead-letters it undelivered)`,
      ),
      undelivered: props.alarm(
        "OutboxUndeliveredAlarm",
        failures(METRIC.outboxUndelivered),
        0,
        `${name}: the outbox relay gave up on follow-ups and recorded them as undelivered dead letters of their target (the parent's effect stands; replay them)`,
      ),
      relayFailed: props.alarm(
        "OutboxRelayFailedAlarm",
        failures(METRIC.outboxRelayFailed),
        0,
        `${name}: an outbox relay run could not reach the database or SQS (the follow-ups wait for the next run)`,
      ),
      relayErrors: props.alarm(
        "OutboxRelayErrorsAlarm",
        relayFunction.function.metricErrors({ period, statistic: "Sum" }),
        0,
        `${name}: the outbox relay failed an invocation (its configuration, or a timeout): such a run reports no outbox metric`,
      ),
      alertFailed: props.alarm(
        "OutboxAlertFailedAlarm",
        failures(METRIC.alertFailed),
        0,
        `${name}: the outbox relay could not publish a DeadLetterRecorded alert (the undelivered dead letter is recorded)`,
      ),
    },
  };
}
