/**
 * The scheduled doctor (daily): the database as the ops login sees it and the consumers' queues,
 * against what the migrations and the deployed configuration intend. Each finding is logged, and
 * their count is the `DoctorFindings` metric an alarm watches.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import type { SQSClient } from "@aws-sdk/client-sqs";
import type pg from "pg";
import type { MigrationSet } from "../../shared/db/migrations.ts";
import type { ExpectedConsumerQueues } from "../../shared/doctor/check-queues.ts";
import { runDoctor } from "../../shared/doctor/doctor.ts";
import type { DoctorReport } from "../../shared/doctor/findings.ts";

/** The doctor function's Powertools `service`: its metric's dimension, its logs' service. */
export const DOCTOR_SERVICE = "doctor";

/** Named defaults of the doctor function. */
export const DOCTOR_FUNCTION_DEFAULTS = Object.freeze({
  /** Each catalog query's bound: they read catalogs only, so anything slower is a stuck session. */
  statementTimeoutMs: 30_000,
});

/** Metric names of a doctor run. */
export const DOCTOR_METRIC = {
  /** Findings of the run; 0 when the database and the queues are as intended. */
  findings: "DoctorFindings",
} as const;

export interface DoctorFunctionDeps {
  /** Opens a session as the function's login; closed after the run. */
  readonly connect: () => Promise<pg.Client>;
  readonly sqs: SQSClient;
  /** The consumers' queues as the stack deploys them (JOBFENCE_DOCTOR_QUEUES). */
  readonly expectedQueues: readonly ExpectedConsumerQueues[];
  readonly sets: readonly MigrationSet[];
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
