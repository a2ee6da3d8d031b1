/** Lambda entry point of the daily escalation of stale pending dead letters. */

import { Logger } from "@aws-lambda-powertools/logger";
import { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import { z } from "zod";
import { createPool } from "../../shared/db/pool.ts";
import { ESCALATION_DEFAULTS, escalateStaleDeadLetters } from "../../shared/dead-letters/escalation.ts";
import { ConfigurationError } from "../../shared/errors.ts";

const parsed = z
  .object({
    DATABASE_URL: z.string().regex(/^postgres(ql)?:\/\//, "must be a postgres:// connection string"),
    JOBFENCE_DB_ROLE: z
      .string()
      .regex(/^[a-z_][a-z0-9_]{0,62}$/)
      .optional(),
    JOBFENCE_OPS_BUS_NAME: z.string().regex(/^[A-Za-z0-9._\-/]{1,256}$/, "must be an EventBridge bus name"),
    JOBFENCE_ESCALATION_DAYS: z.coerce
      .number()
      .positive()
      .max(365)
      .default(ESCALATION_DEFAULTS.thresholdDays),
  })
  .safeParse(Object.fromEntries(Object.entries(process.env).filter(([, v]) => v !== "")));
if (!parsed.success) {
  throw new ConfigurationError(
    "escalation environment",
    parsed.error.issues.map((i) => `${String(i.path[0])}: ${i.message}`),
  );
}
const env = parsed.data;

const logger = new Logger({ serviceName: "dead-letter-escalation" });
const pool = createPool({
  connectionString: env.DATABASE_URL,
  max: 1,
  applicationName: "jobfence:escalation",
  ...(env.JOBFENCE_DB_ROLE ? { role: env.JOBFENCE_DB_ROLE } : {}),
});
const eventBridge = new EventBridgeClient({});

export async function handler(): Promise<{ escalated: boolean; total: number }> {
  const summary = await escalateStaleDeadLetters({
    db: pool,
    eventBridge,
    opsBusName: env.JOBFENCE_OPS_BUS_NAME,
    thresholdDays: env.JOBFENCE_ESCALATION_DAYS,
  });
  if (summary) logger.warn("stale dead letters escalated", { ...summary });
  return { escalated: summary !== undefined, total: summary?.total ?? 0 };
}
