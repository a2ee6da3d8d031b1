/**
 * The scheduled doctor (daily): the database as the ops login sees it (each consumer's schemas
 * included) and the consumers' queues, against what the migrations and the deployed configuration
 * intend. Each finding is logged, and
 * their count is the `DoctorFindings` metric an alarm watches.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import type { SQSClient } from "@aws-sdk/client-sqs";
import type pg from "pg";
import type { MigrationSet } from "../../shared/db/migrations.ts";
import type { ExpectedConsumerQueues } from "../../shared/doctor/check-queues.ts";
import type { DeclaredConsumerData } from "../../shared/doctor/declared-data.ts";
import { type ConsumerSchemaFile, runDoctor } from "../../shared/doctor/doctor.ts";
import type { DoctorReport } from "../../shared/doctor/findings.ts";
import { DOCTOR_METRIC } from "./config.ts";

/** Its service and metric names, defined with its environment (the CDK construct reads them there). */
export { DOCTOR_METRIC, DOCTOR_SERVICE } from "./config.ts";

/** Named defaults of the doctor function. */
export const DOCTOR_FUNCTION_DEFAULTS = Object.freeze({
  /** Each catalog query's bound: they read catalogs only, so anything slower is a stuck session. */
  statementTimeoutMs: 30_000,
});

export interface DoctorFunctionDeps {
  /** Opens a session as the function's login; closed after the run. */
  readonly connect: () => Promise<pg.Client>;
  readonly sqs: SQSClient;
  /** The consumers' queues as the stack deploys them (JOBFENCE_DOCTOR_QUEUES). */
  readonly expectedQueues: readonly ExpectedConsumerQueues[];
  readonly sets: readonly MigrationSet[];
  /**
   * The consumers whose schemas are compared with their committed descriptions: none for a service
   * whose tables are its own migration tool's (the reference deployment's: ./reference.ts).
   */
  readonly consumerSchemas: readonly ConsumerSchemaFile[];
  /**
   * What each consumer declares it works on outside core (JOBFENCE_DOCTOR_DECLARATIONS).
   * @default none
   */
  readonly declarations?: readonly DeclaredConsumerData[];
  readonly metrics: Metrics;
  readonly logger: Logger;
}

/** One scheduled run. */
export async function doctorInvocation(deps: DoctorFunctionDeps): Promise<DoctorReport> {
  const client = await deps.connect();
  let report: DoctorReport;
  try {
    report = await runDoctor({
      db: client,
      sets: deps.sets,
      consumerSchemas: deps.consumerSchemas,
      ...(deps.declarations ? { declarations: deps.declarations } : {}),
      queues: { sqs: deps.sqs, expected: deps.expectedQueues },
    });
  } finally {
    await client.end().catch(() => {});
  }
  for (const finding of report.findings) deps.logger.warn("doctor finding", { ...finding });
  for (const skipped of report.skipped) deps.logger.info("doctor check not run", { ...skipped });
  deps.metrics.addMetric(DOCTOR_METRIC.findings, MetricUnit.Count, report.findings.length);
  deps.logger.info("doctor finished", { findings: report.findings.length, readAs: report.readAs });
  return report;
}
