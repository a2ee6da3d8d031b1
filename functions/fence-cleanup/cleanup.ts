/**
 * The scheduled TTL cleanup (every 15 minutes): runs for a fraction of the remaining Lambda time,
 * then reports rows deleted and the expired backlog left as metrics.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import type { Context } from "aws-lambda";
import type { Queryable } from "../../shared/db/queryable.ts";
import { type FenceCleanupReport, runFenceCleanup } from "../../shared/fence/cleanup.ts";

/** Named defaults of the cleanup function. */
export const CLEANUP_FUNCTION_DEFAULTS = Object.freeze({
  /** Share of the remaining invocation time the deletes may use; the rest covers the backlog count and a margin. */
  budgetFraction: 0.8,
});

/** The cleanup function's Powertools `service`: its metrics' dimension, its logs' service. */
export const CLEANUP_SERVICE = "fence-cleanup";

/** Metric names of the cleanup run. */
export const CLEANUP_METRIC = {
  deleted: "FenceCleanupDeleted",
  backlog: "FenceCleanupBacklog",
  /** Expired fences kept for the pending dead letters that name their jobs. */
  held: "FenceCleanupHeld",
  /** Attempt-ledger rows of messages SQS can no longer deliver. */
  staleAttempts: "AttemptLedgerCleanupDeleted",
  /** Step checkpoints no copy of their job can need any more. */
  steps: "StepCleanupDeleted",
  /** The ops API's idempotency keys past their 24 hours. */
  idempotencyKeys: "IdempotencyKeyCleanupDeleted",
} as const;

export interface CleanupFunctionDeps {
  readonly db: Queryable;
  readonly metrics: Metrics;
  readonly logger: Logger;
  readonly batchSize?: number;
  readonly pauseMs?: number;
  readonly budgetFraction?: number;
}

/** One scheduled run. */
export async function cleanupInvocation(
  deps: CleanupFunctionDeps,
  context: Context,
): Promise<FenceCleanupReport> {
  const fraction = deps.budgetFraction ?? CLEANUP_FUNCTION_DEFAULTS.budgetFraction;
  const report = await runFenceCleanup({
    db: deps.db,
    budgetMs: context.getRemainingTimeInMillis() * fraction,
    ...(deps.batchSize ? { batchSize: deps.batchSize } : {}),
    ...(deps.pauseMs !== undefined ? { pauseMs: deps.pauseMs } : {}),
  });
  deps.metrics.addMetric(CLEANUP_METRIC.deleted, MetricUnit.Count, report.deleted);
  deps.metrics.addMetric(CLEANUP_METRIC.backlog, MetricUnit.Count, report.backlog);
  deps.metrics.addMetric(CLEANUP_METRIC.held, MetricUnit.Count, report.held);
  deps.metrics.addMetric(CLEANUP_METRIC.staleAttempts, MetricUnit.Count, report.staleAttemptsDeleted);
  deps.metrics.addMetric(CLEANUP_METRIC.steps, MetricUnit.Count, report.stepsDeleted);
  deps.metrics.addMetric(CLEANUP_METRIC.idempotencyKeys, MetricUnit.Count, report.idempotencyKeysDeleted);
  const log = report.stoppedBy === "budget" && report.backlog > 0 ? deps.logger.warn : deps.logger.info;
  log.call(deps.logger, "fence cleanup finished", { ...report });
  return report;
}
