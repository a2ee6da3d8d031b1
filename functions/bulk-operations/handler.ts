/**
 * Lambda entry point of the bulk-operations worker (EventBridge schedule, every minute); the run
 * itself is ./worker.ts. Two invocations overlapping share the operations (SKIP LOCKED), never
 * doubling one.
 */
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import middy from "@middy/core";
import type { Context } from "aws-lambda";
import { z } from "zod";
import { createSqsClient } from "../../shared/aws/clients.ts";
import {
  DATABASE_ENV,
  databaseConnection,
  databaseFields,
  dbRoleField,
  withDatabaseCheck,
} from "../../shared/config/fields.ts";
import { configFromEnv } from "../../shared/config/parse.ts";
import { createPool } from "../../shared/db/pool.ts";
import { METRICS_NAMESPACE } from "../../shared/metrics/names.ts";
import { BULK_WORKER_SERVICE, bulkWorkerInvocation } from "./worker.ts";

const config = configFromEnv(
  withDatabaseCheck(
    z.object({
      ...databaseFields,
      dbRole: dbRoleField.optional(),
      lockTimeoutMs: z.coerce.number().int().positive().default(5000),
    }),
  ),
  { ...DATABASE_ENV, dbRole: "JOBFENCE_DB_ROLE", lockTimeoutMs: "JOBFENCE_LOCK_TIMEOUT_MS" },
  process.env,
  "bulk-operations worker environment",
);

const logger = new Logger({ serviceName: BULK_WORKER_SERVICE });
const metrics = new Metrics({ namespace: METRICS_NAMESPACE, serviceName: BULK_WORKER_SERVICE });
const deps = {
  pool: createPool({
    ...databaseConnection(config),
    max: 1,
    lockTimeoutMs: config.lockTimeoutMs,
    applicationName: "jobfence:bulk-operations",
    ...(config.dbRole ? { role: config.dbRole } : {}),
  }),
  sqs: createSqsClient(),
  logger,
  metrics,
};

export const handler = middy((_event: unknown, context: Context) => bulkWorkerInvocation(deps, context)).use(
  logMetrics(metrics),
);
