/** Lambda entry point of the doctor (EventBridge schedule, daily), as the ops login. */
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import { logMetrics } from "@aws-lambda-powertools/metrics/middleware";
import middy from "@middy/core";
import { createSqsClient } from "../../shared/aws/clients.ts";
import { databaseConnection } from "../../shared/config/fields.ts";
import { connectClient, type DatabaseConnection, SecretCredentials } from "../../shared/db/credentials.ts";
import { METRICS_NAMESPACE } from "../../shared/metrics/names.ts";
import { deploymentMigrationSets } from "../migrate/sets.ts";
import { doctorConfigFromEnv } from "./config.ts";
import {
  DOCTOR_FUNCTION_DEFAULTS,
  DOCTOR_SERVICE,
  deploymentConsumerSchemas,
  deploymentDeclarations,
  doctorInvocation,
} from "./doctor.ts";

const config = doctorConfigFromEnv(process.env);
const given = databaseConnection(config);
// By secret, the credentials are read at init (as every function's pool does), so the run does
// not wait for Secrets Manager; a failure here is left to the run, which reads again.
const credentials = given.secret ? new SecretCredentials(given.secret.secretArn) : undefined;
credentials?.get().catch(() => {});
const connection: DatabaseConnection = given.secret && credentials ? { ...given, credentials } : given;

const logger = new Logger({ serviceName: DOCTOR_SERVICE });
const metrics = new Metrics({ namespace: METRICS_NAMESPACE, serviceName: DOCTOR_SERVICE });
const sqs = createSqsClient();

export const handler = middy(async () =>
  doctorInvocation({
    connect: () =>
      connectClient(connection, {
        application_name: "jobfence:doctor",
        statement_timeout: DOCTOR_FUNCTION_DEFAULTS.statementTimeoutMs,
      }),
    sqs,
    expectedQueues: config.expectedQueues,
    sets: deploymentMigrationSets(),
    consumerSchemas: deploymentConsumerSchemas(),
    declarations: config.declarations ?? deploymentDeclarations(),
    metrics,
    logger,
  }),
).use(logMetrics(metrics));
