/**
 * One CloudWatch dashboard per deployment, built from the other constructs' public properties so
 * every metric is the one the code emits: the alarms by state; per consumer its outcomes (applied,
 * duplicate, conflict, retried), its dead letters by kind, fence latency, the harness's and the
 * drain's failure metrics, and the depth and age of its source and backstop queues, and for one that
 * sends follow-ups its outbox (sent, retried, undelivered, failed runs; rows waiting); every metric of
 * TTL cleanup (rows deleted, backlog); the dead-letter API's requests, 4xx, 5xx and latency.
 */
import { Duration, Stack } from "aws-cdk-lib";
import * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import { Construct } from "constructs";
import { CLEANUP_METRIC } from "../../functions/fence-cleanup/cleanup.ts";
import { outboxRelayService } from "../../functions/outbox-relay/relay.ts";
import { backstopDrainService } from "../../shared/backstop/drain.ts";
import { ERROR_KIND, ERROR_KINDS } from "../../shared/errors/error-kind.ts";
import { deadLetteredMetric, METRIC, METRICS_NAMESPACE } from "../../shared/metrics/names.ts";
import { OUTBOX_RELAY_DEFAULTS, SCHEDULE_DEFAULTS } from "../defaults.ts";
import type { DeadLetterApi } from "./dead-letter-api.ts";
import type { FenceCleanup } from "./fence-cleanup.ts";
import type { JobConsumer } from "./job-consumer.ts";

/** Props of {@link JobfenceDashboard}. */
export interface JobfenceDashboardProps {
  readonly consumers: readonly JobConsumer[];
  readonly api: DeadLetterApi;
  readonly cleanup: FenceCleanup;
  /** Shown first, by state. @default none */
  readonly alarms?: readonly cloudwatch.IAlarm[];
  /** @default the stack's name */
  readonly dashboardName?: string;
}

/** The dashboard's layout and periods. */
export const DASHBOARD_DEFAULTS = Object.freeze({
  /** Period of the graphs of counts and latencies. */
  period: Duration.minutes(5),
  /** SQS reports queue depth and age every minute. */
  queuePeriod: Duration.minutes(1),
  /** Three graphs a row (the grid is 24 wide). */
  graphWidth: 8,
  graphHeight: 6,
  /** What the dashboard opens on. */
  defaultInterval: Duration.hours(3),
});

/** The deployment's dashboard. */
export class JobfenceDashboard extends Construct {
  readonly dashboard: cloudwatch.Dashboard;

  constructor(scope: Construct, id: string, props: JobfenceDashboardProps) {
    super(scope, id);
    const rows: cloudwatch.IWidget[][] = [];
    if (props.alarms && props.alarms.length > 0) {
      rows.push([
        new cloudwatch.AlarmStatusWidget({
          title: "Alarms",
          alarms: [...props.alarms],
          width: 24,
          height: Math.min(12, 2 + Math.ceil(props.alarms.length / 4)),
          sortBy: cloudwatch.AlarmStatusWidgetSortBy.STATE_UPDATED_TIMESTAMP,
        }),
      ]);
    }
    for (const consumer of props.consumers) rows.push(...consumerRows(consumer));
    rows.push(cleanupRow(props.cleanup), apiRow(props.api));
    this.dashboard = new cloudwatch.Dashboard(this, "Dashboard", {
      dashboardName: props.dashboardName ?? Stack.of(this).stackName,
      defaultInterval: DASHBOARD_DEFAULTS.defaultInterval,
      widgets: rows,
    });
  }
}

function graph(
  title: string,
  left: cloudwatch.IMetric[],
  options: Partial<cloudwatch.GraphWidgetProps> = {},
): cloudwatch.GraphWidget {
  return new cloudwatch.GraphWidget({
    title,
    left,
    width: DASHBOARD_DEFAULTS.graphWidth,
    height: DASHBOARD_DEFAULTS.graphHeight,
    ...options,
  });
}

/** A consumer's heading and two rows of graphs. */
function consumerRows(consumer: JobConsumer): cloudwatch.IWidget[][] {
  const name = consumer.consumerName;
  const period = DASHBOARD_DEFAULTS.period;
  const count = (metricName: string, label: string) =>
    consumer.metric(metricName, { period, statistic: "Sum", label });
  const drainCount = (metricName: string, label: string) =>
    consumer.drainMetric(metricName, { period, statistic: "Sum", label });
  const queue = { period: DASHBOARD_DEFAULTS.queuePeriod, statistic: "Maximum" };
  const depthAndAge = (title: string, q: JobConsumer["queue"]) =>
    graph(
      title,
      [
        q.metricApproximateNumberOfMessagesVisible({ ...queue, label: "visible" }),
        q.metricApproximateNumberOfMessagesNotVisible({ ...queue, label: "in flight" }),
      ],
      {
        right: [q.metricApproximateAgeOfOldestMessage({ ...queue, label: "oldest (s)" })],
        leftYAxis: { min: 0, label: "messages", showUnits: false },
        rightYAxis: { min: 0, label: "seconds", showUnits: false },
      },
    );
  // The consumer writes every kind but `unrecorded`, which only its backstop drain writes, and
  // `undelivered`, which a sender's outbox relay writes (its OutboxUndelivered, on the sender's row).
  const notTheConsumers: readonly string[] = [ERROR_KIND.unrecorded, ERROR_KIND.undelivered];
  const deadLettered = [
    ...ERROR_KINDS.filter((kind) => !notTheConsumers.includes(kind)).map((kind) =>
      count(deadLetteredMetric(kind), kind),
    ),
    drainCount(deadLetteredMetric(ERROR_KIND.unrecorded), `${ERROR_KIND.unrecorded} (backstop drain)`),
  ];
  return [
    [
      new cloudwatch.TextWidget({
        markdown:
          `## ${name}\nThe harness's metrics: namespace \`${METRICS_NAMESPACE}\`, dimension \`service\` = ` +
          `\`${name}\` (the backstop drain's: \`${backstopDrainService(name)}\`` +
          `${consumer.outbox ? `; the outbox relay's: \`${outboxRelayService(name)}\`` : ""}).`,
        width: 24,
        height: 2,
      }),
    ],
    [
      graph(`${name}: outcomes`, [
        count(METRIC.succeeded, "applied"),
        count(METRIC.duplicate, "duplicate"),
        count(METRIC.conflict, "conflict"),
        count(METRIC.retried, "retried"),
      ]),
      graph(`${name}: dead-lettered by kind`, deadLettered),
      graph(
        `${name}: fence latency (ms)`,
        ["p50", "p99", "Maximum"].map((statistic) =>
          consumer.metric(METRIC.fenceLatency, { period, statistic, label: statistic }),
        ),
        { leftYAxis: { min: 0, label: "ms", showUnits: false } },
      ),
    ],
    [
      depthAndAge(`${name}: source queue`, consumer.queue),
      depthAndAge(`${name}: backstop`, consumer.backstopQueue),
      graph(`${name}: failures`, [
        count(METRIC.deadLetterWriteFailed, "dead letter write failed"),
        count(METRIC.alertFailed, "alert failed"),
        count(METRIC.recordFailed, "record failed"),
        count(METRIC.retryScheduleFailed, "retry schedule failed"),
        count(METRIC.failureUnrecorded, "failure unrecorded"),
        count(METRIC.recordInterrupted, "record interrupted"),
        drainCount(METRIC.backstopRecordFailed, "backstop drain: record failed"),
        drainCount(METRIC.alertFailed, "backstop drain: alert failed"),
      ]),
    ],
    ...(consumer.outbox ? [outboxRow(consumer)] : []),
  ];
}

/**
 * A sending consumer's outbox: what the relay after COMMIT (the consumer's own metrics) and the
 * scheduled relay sent and could not, and what waits. A follow-up the relay after COMMIT left
 * behind is expected now and then; the scheduled relay sends it.
 */
function outboxRow(consumer: JobConsumer): cloudwatch.IWidget[] {
  const name = consumer.consumerName;
  const period = DASHBOARD_DEFAULTS.period;
  const count = (metricName: string, label: string) =>
    consumer.metric(metricName, { period, statistic: "Sum", label });
  const relayCount = (metricName: string, label: string) =>
    consumer.outboxMetric(metricName, { period, statistic: "Sum", label });
  // The relay reports what waits once a run: a period of the schedule's rate shows each run.
  const run = OUTBOX_RELAY_DEFAULTS.rate;
  return [
    graph(`${name}: follow-ups sent`, [
      count(METRIC.followUpsSent, "after COMMIT"),
      relayCount(METRIC.outboxSent, "by the outbox relay"),
    ]),
    graph(`${name}: follow-ups not sent`, [
      count(METRIC.followUpRelayFailed, "left by the relay after COMMIT"),
      relayCount(METRIC.outboxRetried, "outbox relay: retried"),
      relayCount(METRIC.outboxUndelivered, "outbox relay: undelivered"),
      relayCount(METRIC.outboxRelayFailed, "outbox relay: run failed"),
      relayCount(METRIC.alertFailed, "outbox relay: alert failed"),
    ]),
    graph(
      `${name}: outbox`,
      [
        consumer.outboxMetric(METRIC.outboxRows, {
          period: run,
          statistic: "Maximum",
          label: "rows waiting",
        }),
      ],
      {
        right: [
          consumer.outboxMetric(METRIC.outboxOldestAge, {
            period: run,
            statistic: "Maximum",
            label: "oldest (s)",
          }),
        ],
        leftYAxis: { min: 0, label: "rows", showUnits: false },
        rightYAxis: { min: 0, label: "seconds", showUnits: false },
      },
    ),
  ];
}

/** TTL cleanup: what each run deleted, and what it left. */
function cleanupRow(cleanup: FenceCleanup): cloudwatch.IWidget[] {
  // One data point a run: a period of the schedule's rate shows each run on its own.
  const period = SCHEDULE_DEFAULTS.cleanupRate;
  const metric = (metricName: string, statistic: string, label: string) =>
    cleanup.cleanupMetric(metricName, { period, statistic, label });
  return [
    graph("fence cleanup: rows deleted", [
      metric(CLEANUP_METRIC.deleted, "Sum", "expired fences"),
      metric(CLEANUP_METRIC.staleAttempts, "Sum", "attempt-ledger rows"),
      metric(CLEANUP_METRIC.steps, "Sum", "step checkpoints"),
      metric(CLEANUP_METRIC.idempotencyKeys, "Sum", "API idempotency keys"),
    ]),
    graph("fence cleanup: backlog", [
      metric(CLEANUP_METRIC.backlog, "Maximum", "expired fences left"),
      metric(CLEANUP_METRIC.held, "Maximum", "expired, held for pending dead letters"),
    ]),
  ];
}

/** The dead-letter API (HTTP API metrics, by ApiId). */
function apiRow(api: DeadLetterApi): cloudwatch.IWidget[] {
  const period = DASHBOARD_DEFAULTS.period;
  return [
    graph("dead-letter API: requests", [
      api.api.metricCount({ period, statistic: "Sum", label: "requests" }),
      api.api.metricClientError({ period, statistic: "Sum", label: "4xx" }),
      api.api.metricServerError({ period, statistic: "Sum", label: "5xx" }),
    ]),
    graph(
      "dead-letter API: latency (ms)",
      [
        api.api.metricLatency({ period, statistic: "p50", label: "latency p50" }),
        api.api.metricLatency({ period, statistic: "p99", label: "latency p99" }),
        api.api.metricIntegrationLatency({ period, statistic: "p99", label: "integration p99" }),
      ],
      { leftYAxis: { min: 0, label: "ms", showUnits: false } },
    ),
  ];
}
