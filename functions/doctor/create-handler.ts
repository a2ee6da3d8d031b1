/**
 * The doctor function's handler (EventBridge schedule, daily), as the ops login, configured from
 * its environment at init. What it checks beyond `core` is the deployment's to say: sets jobfence
 * runs for its consumers, their committed schema descriptions, declarations to fall back on.
 */
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import middy from "@middy/core";
import { createSqsClient } from "../../shared/aws/clients.ts";
import { databaseConnection } from "../../shared/config/fields.ts";
import { connectClient, type DatabaseConnection, SecretCredentials } from "../../shared/db/credentials.ts";
import { coreMigrationSet, type MigrationSet } from "../../shared/db/migrations.ts";
import type { DeclaredConsumerData } from "../../shared/doctor/declared-data.ts";
import type { ConsumerSchemaFile } from "../../shared/doctor/doctor.ts";
import { METRICS_NAMESPACE } from "../../shared/metrics/names.ts";
import { DOCTOR_SERVICE, doctorConfigFromEnv } from "./config.ts";
import { DOCTOR_FUNCTION_DEFAULTS, doctorInvocation } from "./doctor.ts";

/** What a deployment adds to the doctor's checks of `core`. */
export interface DoctorDeployment {
  /** Migration sets jobfence runs after `core` for the deployment's consumers. @default none */
  readonly sets?: readonly MigrationSet[];
  /** Consumer schemas compared with their committed descriptions. @default none */
  readonly consumerSchemas?: readonly ConsumerSchemaFile[];
  /**
   * The declarations when JOBFENCE_DOCTOR_DECLARATIONS is unset.
   * @default none: the doctor checks no consumer's declared data
   */
  readonly declarations?: () => readonly DeclaredConsumerData[];
}

/** Reads the environment (and starts reading the login's secret) now, at init. */
export function createDoctorHandler(deployment: DoctorDeployment = {}) {
  const config = doctorConfigFromEnv(process.env);
  const given = databaseConnection(config);
  // By secret, the credentials are read at init (as every function's pool does), so the run does
  // not wait for Secrets Manager; a failure here is left to the run, which reads again.
  const credentials = given.secret ? new SecretCredentials(given.secret.secretArn) : undefined;
  credentials?.get().catch(() => {});
  const connection: DatabaseConnection = given.secret && credentials ? { ...given, credentials } : given;
  const declarations = config.declarations ?? deployment.declarations?.();

  const logger = new Logger({ serviceName: DOCTOR_SERVICE });
  const metrics = new Metrics({ namespace: METRICS_NAMESPACE, serviceName: DOCTOR_SERVICE });
  const sqs = createSqsClient();

  return middy(async () =>
    doctorInvocation({
      connect: () =>
        connectClient(connection, {
          application_name: "jobfence:doctor",
          statement_timeout: DOCTOR_FUNCTION_DEFAULTS.statementTimeoutMs,
        }),
      sqs,
      expectedQueues: config.expectedQueues,
      sets: [coreMigrationSet(), ...(deployment.sets ?? [])],
      consumerSchemas: deployment.consumerSchemas ?? [],
      ...(declarations ? { declarations } : {}),
      metrics,
      logger,
    }),
  ).use(logMetrics(metrics));
}
