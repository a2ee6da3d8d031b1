/** Lambda entry point of the daily escalation of stale pending dead letters. */

import { Logger } from "@aws-lambda-powertools/logger";
import { z } from "zod";
import { createEventBridgeClient } from "../../shared/aws/clients.ts";
import {
  DATABASE_ENV,
  databaseConnection,
  databaseFields,
  dbRoleField,
  opsBusNameField,
  withDatabaseCheck,
} from "../../shared/config/fields.ts";
import { configFromEnv } from "../../shared/config/parse.ts";
import { createPool } from "../../shared/db/pool.ts";
import {
  ESCALATION_DEFAULTS,
  escalateStaleDeadLetters,
  resolveHealedDeadLetters,
} from "../../shared/dead-letters/escalation.ts";

const config = configFromEnv(
  withDatabaseCheck(
    z.object({
      ...databaseFields,
      dbRole: dbRoleField.optional(),
      opsBusName: opsBusNameField,
      thresholdDays: z.coerce.number().positive().max(365).default(ESCALATION_DEFAULTS.thresholdDays),
    }),
  ),
  {
    ...DATABASE_ENV,
    dbRole: "JOBFENCE_DB_ROLE",
    opsBusName: "JOBFENCE_OPS_BUS_NAME",
    thresholdDays: "JOBFENCE_ESCALATION_DAYS",
  },
  process.env,
  "escalation environment",
);

const logger = new Logger({ serviceName: "dead-letter-escalation" });
const pool = createPool({
  ...databaseConnection(config),
  max: 1,
  applicationName: "jobfence:escalation",
  ...(config.dbRole ? { role: config.dbRole } : {}),
});
const eventBridge = createEventBridgeClient();

export async function handler(): Promise<{ healed: number; escalated: boolean; total: number }> {
  const healed = await resolveHealedDeadLetters(pool);
  if (healed > 0) logger.info("pending dead letters of applied jobs resolved as superseded", { healed });
  const summary = await escalateStaleDeadLetters({
    db: pool,
    eventBridge,
    opsBusName: config.opsBusName,
    thresholdDays: config.thresholdDays,
  });
  if (summary) logger.warn("stale dead letters escalated", { ...summary });
  return { healed, escalated: summary !== undefined, total: summary?.total ?? 0 };
}
