/** What became of one SQS record: the value the spine decides and the batch loop reports. */
import type { ErrorKind } from "../errors/error-kind.ts";

/** What became of a record. Acked outcomes leave the queue; every other one stays for SQS to redeliver. */
export type RecordOutcome =
  /** Work and fence committed. Acked. */
  | { readonly status: "applied" }
  /** The fence already existed with this job's fingerprint: nothing applied. Acked. */
  | { readonly status: "duplicate" }
  /**
   * A transient failure with attempts left: attempt `attempt` failed and is recorded, and the
   * message is hidden for `delaySeconds` (when the call succeeded). With `recorded` false the
   * failure could not be counted (the database was unreachable): the queue's own visibility
   * timeout applies and `delaySeconds` is null. Not acked.
   */
  | {
      readonly status: "retry";
      readonly attempt: number;
      readonly recorded: boolean;
      readonly delaySeconds: number | null;
      readonly visibilityChanged: boolean;
      readonly error: unknown;
    }
  /**
   * The fence insert waited lock_timeout behind another delivery of the job, which decides: back
   * to the queue for `delaySeconds`, no attempt spent, nothing recorded. Not acked.
   */
  | { readonly status: "held"; readonly delaySeconds: number; readonly visibilityChanged: boolean }
  /**
   * The invocation's time ran out: the record was running (`wasRunning`: its transaction was rolled
   * back and the interruption recorded) or never started. Returned to the queue. Not acked.
   */
  | { readonly status: "interrupted"; readonly wasRunning: boolean }
  /** Recorded as a dead letter (and alerted, unless `alertError`). Acked. */
  | {
      readonly status: "dead-lettered";
      readonly kind: ErrorKind;
      /** The dead letter's `attempts`. */
      readonly attempts: number;
      readonly deadLetterId: string;
      readonly created: boolean;
      readonly alertError?: unknown;
      readonly error: unknown;
    }
  /** The dead letter could not be written: left in the queue so nothing is lost. Not acked. */
  | {
      readonly status: "dead-letter-failed";
      readonly kind: ErrorKind;
      readonly error: unknown;
      readonly writeError: unknown;
    }
  /** An error no step could classify (a bug): left in the queue. Not acked. */
  | { readonly status: "failed"; readonly error: unknown };

/** Whether the record may be deleted from the queue (absent from batchItemFailures). */
export function isAcked(outcome: RecordOutcome): boolean {
  return outcome.status === "applied" || outcome.status === "duplicate" || outcome.status === "dead-lettered";
}
