/**
 * Lambda entry point of a consumer's scheduled outbox relay (EventBridge schedule, every minute):
 * sends the follow-ups the relay after COMMIT left behind, and reports the outbox's size and age.
 * It logs in as its consumer (row-level security gives it that consumer's rows only) and may send
 * to that consumer's targets only.
 */
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import middy from "@middy/core";
import { createEventBridgeClient, createSqsClient } from "../../shared/aws/clients.ts";
import { databaseConnection } from "../../shared/config/fields.ts";
import { createPool } from "../../shared/db/pool.ts";
import { reportJsonRuntime } from "../../shared/envelope/json-runtime-report.ts";
import { METRICS_NAMESPACE } from "../../shared/metrics/names.ts";
import { outboxRelayConfigFromEnv, outboxRelayInvocation, outboxRelayService } from "./relay.ts";

const config = outboxRelayConfigFromEnv(process.env);
const service = outboxRelayService(config.consumer);
const logger = new Logger({ serviceName: service });
const metrics = new Metrics({ namespace: METRICS_NAMESPACE, serviceName: service });
reportJsonRuntime({ logger, metrics });
const pool = createPool({
  ...databaseConnection(config),
  max: 1,
  applicationName: `jobfence:${service}`,
  ...(config.dbRole ? { role: config.dbRole } : {}),
});
const sqs = createSqsClient();
const eventBridge = createEventBridgeClient();

export const handler = middy(async () =>
  outboxRelayInvocation({ config, pool, sqs, eventBridge, metrics, logger }),
).use(logMetrics(metrics));
