/** Lambda entry point of the TTL cleanup (EventBridge schedule, every 15 minutes). */
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import middy from "@middy/core";
import type { Context } from "aws-lambda";
import { z } from "zod";
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
import { CLEANUP_SERVICE, cleanupInvocation } from "./cleanup.ts";

const config = configFromEnv(
  withDatabaseCheck(
    z.object({
      ...databaseFields,
      dbRole: dbRoleField.optional(),
      batchSize: z.coerce.number().int().min(1).max(100_000).optional(),
      pauseMs: z.coerce.number().int().min(0).max(10_000).optional(),
    }),
  ),
  {
    ...DATABASE_ENV,
    dbRole: "JOBFENCE_DB_ROLE",
    batchSize: "JOBFENCE_CLEANUP_BATCH_SIZE",
    pauseMs: "JOBFENCE_CLEANUP_PAUSE_MS",
  },
  process.env,
  "fence cleanup environment",
);

const logger = new Logger({ serviceName: CLEANUP_SERVICE });
const metrics = new Metrics({ namespace: METRICS_NAMESPACE, serviceName: CLEANUP_SERVICE });
const pool = createPool({
  ...databaseConnection(config),
  max: 1,
  applicationName: "jobfence:fence-cleanup",
  ...(config.dbRole ? { role: config.dbRole } : {}),
});

export const handler = middy(async (_event: unknown, context: Context) =>
  cleanupInvocation(
    {
      db: pool,
      metrics,
      logger,
      ...(config.batchSize ? { batchSize: config.batchSize } : {}),
      ...(config.pauseMs !== undefined ? { pauseMs: config.pauseMs } : {}),
    },
    context,
  ),
).use(logMetrics(metrics));
