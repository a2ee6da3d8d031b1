/**
 * Middleware: metrics and logs (SPEC §8). Runs last on both paths and turns each record's outcome
 * into one EMF metric and, for anything but success, one structured log line carrying job_id,
 * consumer and correlation_id. Successes are metrics only. An error no other middleware handled
 * becomes a `failed` outcome here, so one record's bug never throws out of the batch.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import type { MiddlewareObj } from "@middy/core";
import { describeError } from "../dead-letters/last-error.ts";
import { deadLetteredMetric, METRIC } from "../metrics/names.ts";
import type { RecordContext, RecordOutcome } from "./record-context.ts";

/** Options of {@link observeOutcome}. */
export interface ObserveOutcomeOptions {
  readonly metrics: Metrics;
  readonly logger: Logger;
  /** Also told every outcome (the local stack prints progress from it). A throw here is ignored. */
  readonly onOutcome?: OutcomeObserver;
}

/** Receives each record's outcome after its metric and log line. */
export type OutcomeObserver = (outcome: RecordOutcome, rc: RecordContext) => void;

type Req = { event: RecordContext; error: unknown; response: RecordOutcome | null | undefined };

/** The keys every log line about a record carries. */
export function recordLogKeys(rc: RecordContext): Record<string, unknown> {
  return {
    job_id: rc.identity?.jobId ?? rc.record.messageId,
    correlation_id: rc.identity?.correlationId ?? rc.record.messageId,
    message_id: rc.record.messageId,
    attempt: rc.attempt,
  };
}

export function observeOutcome(options: ObserveOutcomeOptions): MiddlewareObj<RecordContext, RecordOutcome> {
  const { metrics, logger } = options;

  const observe = (request: Req): void => {
    if (!request.response) {
      request.response = { status: "failed", error: request.error };
    }
    const outcome = request.response;
    const rc = request.event;
    const keys = recordLogKeys(rc);
    try {
      options.onOutcome?.(outcome, rc);
    } catch {
      // An observer is for watching; it must never change what happens to the record.
    }
    switch (outcome.status) {
      case "applied":
        metrics.addMetric(METRIC.succeeded, MetricUnit.Count, 1);
        if (rc.fenceMs !== undefined)
          metrics.addMetric(METRIC.fenceLatency, MetricUnit.Milliseconds, rc.fenceMs);
        logger.debug("job applied", keys);
        break;
      case "duplicate":
        metrics.addMetric(METRIC.duplicate, MetricUnit.Count, 1);
        logger.debug("duplicate delivery skipped", keys);
        break;
      case "retry":
        metrics.addMetric(METRIC.retried, MetricUnit.Count, 1);
        if (!outcome.visibilityChanged) metrics.addMetric(METRIC.retryScheduleFailed, MetricUnit.Count, 1);
        logger.warn("job failed, retry scheduled", {
          ...keys,
          delay_seconds: outcome.delaySeconds,
          visibility_changed: outcome.visibilityChanged,
          error: describeError(outcome.error),
        });
        break;
      case "dead-lettered":
        metrics.addMetric(deadLetteredMetric(outcome.kind), MetricUnit.Count, 1);
        logger.error("dead letter recorded", {
          ...keys,
          dead_letter_id: outcome.deadLetterId,
          error_kind: outcome.kind,
          first_recorded: outcome.created,
          error: describeError(outcome.error, { unwrapCause: outcome.kind === "exhausted" }),
        });
        if (outcome.alertError !== undefined) {
          metrics.addMetric(METRIC.alertFailed, MetricUnit.Count, 1);
          logger.error("DeadLetterRecorded alert failed; the dead letter is recorded", {
            ...keys,
            dead_letter_id: outcome.deadLetterId,
            error: describeError(outcome.alertError),
          });
        }
        break;
      case "dead-letter-failed":
        metrics.addMetric(METRIC.deadLetterWriteFailed, MetricUnit.Count, 1);
        logger.error("dead letter could not be written; the message stays in the queue", {
          ...keys,
          error_kind: outcome.kind,
          error: describeError(outcome.error),
          write_error: describeError(outcome.writeError),
        });
        break;
      case "failed":
        metrics.addMetric(METRIC.recordFailed, MetricUnit.Count, 1);
        logger.error("record failed with an unclassified error; the message stays in the queue", {
          ...keys,
          error: describeError(outcome.error),
        });
        break;
    }
  };

  return { name: "jobfence-observe-outcome", after: observe, onError: observe };
}
