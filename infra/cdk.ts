/**
 * `jobfence/cdk`: the constructs, for any CDK app. Each takes the user's own function entry and
 * consumer definition where it needs one, and finds jobfence's own functions beside itself, so it
 * works from this repository's sources and from the built package alike; nothing reachable from
 * here knows this repository's consumer registry or layout (test/unit/layering.test.ts checks it).
 * The reference stack (./reference-stack.ts) builds its deployment from these exports only.
 *
 * The app provides `aws-cdk-lib`, `constructs` and `esbuild` (NodejsFunction bundles with it);
 * `cdk-nag` is optional (the constructs acknowledge the findings they carry by design).
 */

export type { ConsumerDeploymentSettings } from "../functions/consumer-deployment.ts";
export {
  type ConsumerConnections,
  consumerConnections,
  validateConnectionBudget,
} from "./connection-budget.ts";
export { alarmNameOf, alarmNamePrefix } from "./constructs/alarms.ts";
export { BulkOperationsWorker, type BulkOperationsWorkerProps } from "./constructs/bulk-operations.ts";
export type { ConsumerSettingsProps } from "./constructs/consumer-settings.ts";
export { JobfenceDashboard, type JobfenceDashboardProps } from "./constructs/dashboard.ts";
export {
  allSecrets,
  DATABASE_LOGINS,
  DatabaseAccess,
  type DatabaseAccessProps,
  type DatabaseLogin,
  type DatabaseSecrets,
} from "./constructs/database.ts";
export { DeadLetterApi, type DeadLetterApiProps } from "./constructs/dead-letter-api.ts";
export { Doctor, type DoctorProps } from "./constructs/doctor.ts";
export { FenceCleanup, type FenceCleanupProps } from "./constructs/fence-cleanup.ts";
export { JobConsumer, type JobConsumerProps } from "./constructs/job-consumer.ts";
export { JobfenceFunction, type JobfenceFunctionProps } from "./constructs/jobfence-function.ts";
export {
  DatabaseMigrations,
  type DatabaseMigrationsProps,
  type MigratedConsumer,
} from "./constructs/migrations.ts";
export {
  type BetterStackDestination,
  type BetterStackProps,
  OpsAlerting,
  type OpsAlertingProps,
} from "./constructs/ops-alerting.ts";
export { ReferenceDatabase, type ReferenceDatabaseProps } from "./constructs/reference-database.ts";
export {
  BULK_WORKER_DEFAULTS,
  CONSUMER_DEFAULTS,
  CONSUMER_DEPLOYMENT_DEFAULTS,
  DOCTOR_DEFAULTS,
  FUNCTION_DEFAULTS,
  SUPPORTED_RUNTIMES,
} from "./defaults.ts";
