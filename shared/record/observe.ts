/**
 * Observing a record's outcome: one metric per outcome, a log line for anything but success or a
 * duplicate, and the host's observer (the local stack's progress). Never changes what happens to
 * the record.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import { fingerprintHex } from "../envelope/fingerprint.ts";
import { ERROR_KIND } from "../errors/error-kind.ts";
import { JobConflictError } from "../errors/job.ts";
import { describeError } from "../errors/last-error.ts";
import { deadLetteredMetric, METRIC } from "../metrics/names.ts";
import type { RecordOutcome } from "./outcome.ts";
import { currentAttempt, type RecordContext, whoFailed } from "./record-context.ts";

/** Receives each record's outcome after its metric and log line (the local stack's progress). */
export type OutcomeObserver = (outcome: RecordOutcome, rc: RecordContext) => void;

/** Where outcomes are told. */
export interface Observers {
  readonly metrics: Metrics;
  readonly logger: Logger;
  /** @default none */
  readonly onOutcome?: OutcomeObserver;
}

/** The keys every log line about a record carries. */
export function recordLogKeys(rc: RecordContext): {
  job_id: string;
  correlation_id: string;
  message_id: string;
  attempt: number;
  receive_count: number;
} {
  const { identity } = whoFailed(rc);
  return {
    job_id: identity.jobId,
    correlation_id: identity.correlationId,
    message_id: rc.record.messageId,
    attempt: currentAttempt(rc),
    receive_count: rc.receiveCount,
  };
}

/** Step 6 for any record path (the backstop drain's too). Never throws. */
export function observeRecord(o: Observers, rc: RecordContext, outcome: RecordOutcome): void {
  const { metrics, logger } = o;
  // After the invocation's return nothing is done for the record, not even a log line: it would
  // land in another invocation's logs and metrics.
  if (rc.signal?.aborted) return;
  const keys = recordLogKeys(rc);
  try {
    o.onOutcome?.(outcome, rc);
  } catch {
    // An observer is for watching; it must never change what happens to the record.
  }
  switch (outcome.status) {
    case "applied":
      metrics.addMetric(METRIC.succeeded, MetricUnit.Count, 1);
      if (rc.state.step === "applied" && rc.state.fenceMs !== undefined)
        metrics.addMetric(METRIC.fenceLatency, MetricUnit.Milliseconds, rc.state.fenceMs);
      logger.debug("job applied", keys);
      break;
    case "duplicate":
      metrics.addMetric(METRIC.duplicate, MetricUnit.Count, 1);
      logger.debug("duplicate delivery skipped", keys);
      break;
    case "retry":
      metrics.addMetric(METRIC.retried, MetricUnit.Count, 1);
      if (!outcome.recorded) {
        metrics.addMetric(METRIC.failureUnrecorded, MetricUnit.Count, 1);
        logger.error(
          "job failed and the failure could not be recorded; the queue's visibility timeout applies",
          {
            ...keys,
            error: describeError(outcome.error),
          },
        );
        break;
      }
      if (!outcome.visibilityChanged) metrics.addMetric(METRIC.retryScheduleFailed, MetricUnit.Count, 1);
      logger.warn("job failed, retry scheduled", {
        ...keys,
        attempt: outcome.attempt,
        delay_seconds: outcome.delaySeconds,
        visibility_changed: outcome.visibilityChanged,
        error: describeError(outcome.error),
      });
      break;
    case "held":
      metrics.addMetric(METRIC.fenceHeld, MetricUnit.Count, 1);
      if (!outcome.visibilityChanged) metrics.addMetric(METRIC.retryScheduleFailed, MetricUnit.Count, 1);
      logger.info(
        "another delivery holds the job's fence; returned to the queue without spending an attempt",
        {
          ...keys,
          delay_seconds: outcome.delaySeconds,
        },
      );
      break;
    case "interrupted":
      // Observed by the batch processor, which knows when the invocation's time ran out.
      break;
    case "dead-lettered":
      if (outcome.kind === ERROR_KIND.conflict) metrics.addMetric(METRIC.conflict, MetricUnit.Count, 1);
      metrics.addMetric(deadLetteredMetric(outcome.kind), MetricUnit.Count, 1);
      logger.error("dead letter recorded", {
        ...keys,
        dead_letter_id: outcome.deadLetterId,
        error_kind: outcome.kind,
        attempts: outcome.attempts,
        first_recorded: outcome.created,
        ...(outcome.error instanceof JobConflictError
          ? {
              job_fingerprint: fingerprintHex(outcome.error.jobFingerprint),
              fence_fingerprint: fingerprintHex(outcome.error.fenceFingerprint),
            }
          : {}),
        error: describeError(outcome.error, { unwrapCause: outcome.kind === ERROR_KIND.exhausted }),
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
}
