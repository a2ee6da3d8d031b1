/**
 * The scheduled outbox relay of one consumer: its configuration and one run (shared/outbox/sweep.ts
 * does the work). A run that cannot reach the database or SQS is counted and logged, and its rows
 * wait for the next run: the outbox's age metric, and its alarm, show a relay that keeps failing.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import type { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import type { SQSClient } from "@aws-sdk/client-sqs";
import type pg from "pg";
import { z } from "zod";
import { CONSUMER_ENV } from "../../shared/config/consumer-config.ts";
import {
  CONSUMER_NAME,
  DATABASE_ENV,
  databaseFields,
  dbRoleField,
  opsBusNameField,
  targetQueuesField,
  withDatabaseCheck,
} from "../../shared/config/fields.ts";
import { configFromEnv } from "../../shared/config/parse.ts";
import { describeError } from "../../shared/errors/last-error.ts";
import { METRIC } from "../../shared/metrics/names.ts";
import { type SweepReport, sweepOutbox } from "../../shared/outbox/sweep.ts";

const schema = withDatabaseCheck(
  z.object({
    ...databaseFields,
    dbRole: dbRoleField.optional(),
    /** The consumer whose outbox this relay drains. */
    consumer: z.string().regex(CONSUMER_NAME, "must be a consumer name"),
    opsBusName: opsBusNameField,
    /** The queue URL of each target of the consumer, by name (JSON). */
    outboxQueues: targetQueuesField,
    batchSize: z.coerce.number().int().min(1).max(1000).optional(),
  }),
);

export type OutboxRelayConfig = z.output<typeof schema>;

/** The environment the relay function reads. */
export const OUTBOX_RELAY_ENV = Object.freeze({
  ...DATABASE_ENV,
  // The consumer function's own names: the relay is configured as its consumer is.
  dbRole: CONSUMER_ENV.dbRole,
  opsBusName: CONSUMER_ENV.opsBusName,
  outboxQueues: CONSUMER_ENV.outboxQueues,
  consumer: "JOBFENCE_CONSUMER",
  batchSize: "JOBFENCE_OUTBOX_BATCH_SIZE",
});

export function outboxRelayConfigFromEnv(env: NodeJS.ProcessEnv): OutboxRelayConfig {
  return configFromEnv(schema, OUTBOX_RELAY_ENV, env, "outbox relay environment");
}

/** The relay's Powertools `service`: its metrics' dimension and its logs' service. */
export function outboxRelayService(consumer: string): string {
  return `${consumer}-outbox`;
}

export interface OutboxRelayDeps {
  readonly config: Pick<OutboxRelayConfig, "consumer" | "opsBusName" | "outboxQueues" | "batchSize">;
  readonly pool: pg.Pool;
  readonly sqs: SQSClient;
  readonly eventBridge: EventBridgeClient;
  readonly metrics: Metrics;
  readonly logger: Logger;
}

/** One scheduled run; never throws (a failed run is a metric and a log line). */
export async function outboxRelayInvocation(deps: OutboxRelayDeps): Promise<SweepReport | undefined> {
  const { config } = deps;
  try {
    const report = await sweepOutbox({
      pool: deps.pool,
      sqs: deps.sqs,
      eventBridge: deps.eventBridge,
      opsBusName: config.opsBusName,
      consumer: config.consumer,
      queues: config.outboxQueues,
      metrics: deps.metrics,
      logger: deps.logger,
      ...(config.batchSize ? { batchSize: config.batchSize } : {}),
    });
    deps.logger.info("outbox relay finished", { ...report, undelivered: report.undelivered.length });
    return report;
  } catch (error) {
    deps.metrics.addMetric(METRIC.outboxRelayFailed, MetricUnit.Count, 1);
    deps.logger.error("outbox relay failed; its rows wait for the next run", { error: describeError(error) });
    return undefined;
  }
}
