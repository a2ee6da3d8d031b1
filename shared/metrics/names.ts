/** CloudWatch metric names (namespace {@link METRICS_NAMESPACE}, dimension `service` = consumer). */
import type { ErrorKind } from "../errors/error-kind.ts";

/** The namespace of every jobfence metric. */
export const METRICS_NAMESPACE = "jobfence";

export const METRIC = {
  /** Work and fence committed. */
  succeeded: "JobSucceeded",
  /** A delivery whose fence already existed: skipped, acked. Normal operation, not an error. */
  duplicate: "JobDuplicate",
  /** A delivery whose job id has a fence with another fingerprint: dead-lettered as `conflict`. */
  conflict: "JobConflict",
  /** A transient failure hidden for its backoff delay. */
  retried: "JobRetried",
  /** ChangeMessageVisibility failed; the queue's own visibility timeout applies instead. */
  retryScheduleFailed: "RetryScheduleFailed",
  /** A dead letter could not be written; the message stays in the queue. */
  deadLetterWriteFailed: "DeadLetterWriteFailed",
  /** DeadLetterRecorded could not be published; the row exists. */
  alertFailed: "AlertFailed",
  /** A failure that could not be counted in the attempt ledger (database unreachable). */
  failureUnrecorded: "FailureUnrecorded",
  /** A delivery that waited lock_timeout on another delivery's fence: returned, no attempt spent. */
  fenceHeld: "FenceHeld",
  /** A record still running when the invocation's time ran out: rolled back, interruption recorded. */
  recordInterrupted: "RecordInterrupted",
  /** A record the time budget left unstarted: returned at once, no attempt spent. */
  recordUnstarted: "RecordUnstarted",
  /** A FIFO record left unprocessed behind a failure in its message group. */
  fifoSkipped: "FifoRecordSkipped",
  /** An error the harness could not classify; the message stays in the queue. */
  recordFailed: "RecordFailed",
  /** BEGIN to COMMIT of a committed fence transaction, milliseconds. */
  fenceLatency: "FenceLatency",
  /** Batch-commit mode: a batch transaction rolled back and ran again without a failed record. */
  batchRedone: "BatchRedone",
  /**
   * Backstop drain (dimension `service` = `<consumer>-backstop`): records it reported back unrecorded,
   * left in the backstop queue. A reported record is no Lambda error, so only this metric shows them.
   */
  backstopRecordFailed: "BackstopRecordFailed",
  /** Follow-ups sent right after their transaction's COMMIT. */
  followUpsSent: "FollowUpsSent",
  /**
   * Follow-ups the relay after COMMIT could not send (or whose rows it could not delete): left to
   * the scheduled relay. Their effect committed; nothing is lost.
   */
  followUpRelayFailed: "FollowUpRelayFailed",
  /** Outbox relay (dimension `service` = `<consumer>-outbox`): rows it sent. */
  outboxSent: "OutboxSent",
  /** Outbox relay: sends that failed and were rescheduled. */
  outboxRetried: "OutboxRetried",
  /** Outbox relay: rows moved to the dead letters as `undelivered` (each also alerts). */
  outboxUndelivered: "OutboxUndelivered",
  /** Outbox relay: rows waiting, after its run. */
  outboxRows: "OutboxRows",
  /** Outbox relay: age of the oldest waiting row, seconds, after its run. */
  outboxOldestAge: "OutboxOldestAgeSeconds",
  /** Outbox relay: a run that failed (database or SQS unreachable); the rows wait for the next. */
  outboxRelayFailed: "OutboxRelayFailed",
  /**
   * At start-up: 1 when the runtime's JSON.parse misreads escaped object keys (Node 24 and 26), 0
   * when it reads them correctly. Bodies are read correctly either way (shared/envelope/parse-json.ts).
   */
  runtimeJsonKeyMisread: "RuntimeJsonKeyMisread",
} as const;

/** `DeadLetteredPoison`, `DeadLetteredHard`, …: one metric per kind, each alarmable on its own. */
export function deadLetteredMetric(kind: ErrorKind): string {
  return `DeadLettered${kind.charAt(0).toUpperCase()}${kind.slice(1)}`;
}
