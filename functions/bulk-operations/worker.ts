/**
 * One scheduled run of the bulk-operations worker: the due chunks of running bulk replays and
 * discards for most of the invocation, then what it did as metrics. Kept apart from the entry
 * point (which reads its environment at import) so the CDK construct can name the same metric,
 * service and reserve.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import type { SQSClient } from "@aws-sdk/client-sqs";
import type { Context } from "aws-lambda";
import type pg from "pg";
import { runBulkOperations, type WorkerReport } from "../../shared/dead-letters/bulk-worker.ts";

/** Time kept back from the invocation's end: a chunk in flight finishes, the metrics flush. */
export const BULK_WORKER_RESERVE_MS = 10_000;

/** Its Powertools service name, the `service` dimension of its metrics. */
export const BULK_WORKER_SERVICE = "bulk-operations";

/** Metric names of one run. */
export const BULK_WORKER_METRIC = {
  chunks: "BulkOperationChunks",
  rows: "BulkOperationRows",
  failedChunks: "BulkOperationChunkFailures",
} as const;

export interface BulkWorkerFunctionDeps {
  readonly pool: pg.Pool;
  readonly sqs: SQSClient;
  readonly logger: Logger;
  readonly metrics: Metrics;
}

export async function bulkWorkerInvocation(
  deps: BulkWorkerFunctionDeps,
  context: Context,
): Promise<WorkerReport> {
  const report = await runBulkOperations(
    { pool: deps.pool, sqs: deps.sqs, logger: deps.logger },
    { budgetMs: Math.max(0, context.getRemainingTimeInMillis() - BULK_WORKER_RESERVE_MS) },
  );
  deps.metrics.addMetric(BULK_WORKER_METRIC.chunks, MetricUnit.Count, report.chunks);
  deps.metrics.addMetric(BULK_WORKER_METRIC.rows, MetricUnit.Count, report.rows);
  deps.metrics.addMetric(BULK_WORKER_METRIC.failedChunks, MetricUnit.Count, report.failedChunks);
  return report;
}
