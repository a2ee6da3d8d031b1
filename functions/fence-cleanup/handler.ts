/** Lambda entry point of the TTL cleanup (EventBridge schedule, every 15 minutes). */
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import middy from "@middy/core";
import type { Context } from "aws-lambda";
import { z } from "zod";
import { createPool } from "../../shared/db/pool.ts";
import { ConfigurationError } from "../../shared/errors.ts";
import { METRICS_NAMESPACE } from "../../shared/metrics/names.ts";
import { cleanupInvocation } from "./cleanup.ts";

const parsed = z
  .object({
    DATABASE_URL: z.string().regex(/^postgres(ql)?:\/\//, "must be a postgres:// connection string"),
    JOBFENCE_DB_ROLE: z
      .string()
      .regex(/^[a-z_][a-z0-9_]{0,62}$/)
      .optional(),
    JOBFENCE_CLEANUP_BATCH_SIZE: z.coerce.number().int().min(1).max(100_000).optional(),
  })
  .safeParse(Object.fromEntries(Object.entries(process.env).filter(([, v]) => v !== "")));
if (!parsed.success) {
  throw new ConfigurationError(
    "fence cleanup environment",
    parsed.error.issues.map((i) => `${String(i.path[0])}: ${i.message}`),
  );
}
const env = parsed.data;

const logger = new Logger({ serviceName: "fence-cleanup" });
const metrics = new Metrics({ namespace: METRICS_NAMESPACE, serviceName: "fence-cleanup" });
const pool = createPool({
  connectionString: env.DATABASE_URL,
  max: 1,
  applicationName: "jobfence:fence-cleanup",
  ...(env.JOBFENCE_DB_ROLE ? { role: env.JOBFENCE_DB_ROLE } : {}),
});

export const handler = middy(async (_event: unknown, context: Context) =>
  cleanupInvocation(
    {
      db: pool,
      metrics,
      logger,
      ...(env.JOBFENCE_CLEANUP_BATCH_SIZE ? { batchSize: env.JOBFENCE_CLEANUP_BATCH_SIZE } : {}),
    },
    context,
  ),
).use(logMetrics(metrics));
