/**
 * What becomes of a job that fails: permanent, poison, retries exhausted, interrupted, a
 * conflict, a message the harness never recorded, a deadline; each decides its dead letter's kind.
 */
import { JobfenceError } from "./jobfence-error.ts";

/**
 * Thrown by a consumer's work for a business rule that will never pass on retry (an unknown
 * account, a closed order): the job is dead-lettered at once with `error_kind = 'hard'`.
 */
export class PermanentJobError extends JobfenceError {
  override name = "PermanentJobError";
}

/** Why a message is poison. */
export const POISON_REASON = {
  /** The body is not JSON. */
  unparseableBody: "unparseable-body",
  /** The body is JSON but not a valid job envelope (docs/design.md §2). */
  invalidEnvelope: "invalid-envelope",
  /** The envelope is valid but its payload fails the consumer's schema. */
  invalidPayload: "invalid-payload",
} as const;

/** One of {@link POISON_REASON}. */
export type PoisonReason = (typeof POISON_REASON)[keyof typeof POISON_REASON];

/** A message that can never be processed as sent: dead-lettered with zero retries (`error_kind = 'poison'`). */
export class PoisonMessageError extends JobfenceError {
  override name = "PoisonMessageError";
  /** Which stage refused the message. */
  readonly reason: PoisonReason;
  constructor(reason: PoisonReason, detail: string) {
    super(`${reason}: ${detail}`);
    this.reason = reason;
  }
}

/** Why a transient failure was not retried. */
export const EXHAUSTED_REASON = {
  /** The failure was the last of the policy's attempts. */
  attempts: "attempts",
  /** The backoff would have outlived the message's retention: retrying would lose it. */
  retention: "retention",
  /** The message had used its queue's receives: the next one would move it to the backstop. */
  receiveLimit: "receive-limit",
} as const;

/** One of {@link EXHAUSTED_REASON}. */
export type ExhaustedReason = (typeof EXHAUSTED_REASON)[keyof typeof EXHAUSTED_REASON];

/** A transient failure on the last allowed attempt: dead-lettered with `error_kind = 'exhausted'`. */
export class RetriesExhaustedError extends JobfenceError {
  override name = "RetriesExhaustedError";
  /** The attempt on which retries ran out: failed runs of the work, this one included. */
  readonly attempts: number;
  readonly reason: ExhaustedReason;
  constructor(
    attempts: number,
    cause: unknown,
    reason: ExhaustedReason = EXHAUSTED_REASON.attempts,
    detail = "",
  ) {
    super(
      reason === EXHAUSTED_REASON.attempts
        ? `gave up after attempt ${attempts}`
        : reason === EXHAUSTED_REASON.retention
          ? `gave up after attempt ${attempts}: the retry would outlive the message's retention${detail}`
          : `gave up after attempt ${attempts}: the message used its queue's receives${detail}`,
      { cause },
    );
    this.attempts = attempts;
    this.reason = reason;
  }
}

/**
 * A message whose deliveries kept ending without an outcome while its work was in flight (the
 * invocation timed out, crashed or ran out of memory): dead-lettered as `interrupted` so that it
 * stops taking its batch-mates down with it.
 */
export class InterruptedJobError extends JobfenceError {
  override name = "InterruptedJobError";
  readonly interruptions: number;
  constructor(interruptions: number) {
    super(`${interruptions} deliveries ended without an outcome while this record was in flight`);
    this.interruptions = interruptions;
  }
}

/**
 * The invocation's time ran out while the record was running: the harness stopped waiting for it,
 * rolled its transaction back and did nothing more for it.
 */
export class InvocationDeadlineError extends JobfenceError {
  override name = "InvocationDeadlineError";
}

/**
 * A message found in a backstop queue: it exhausted its receives on the source queue without the
 * harness ever recording an outcome (typically because the database was unreachable throughout).
 * The drain records it with `error_kind = 'unrecorded'`.
 */
export class UnrecordedMessageError extends JobfenceError {
  override name = "UnrecordedMessageError";
}

/**
 * A value that RFC 8785 canonical JSON cannot represent (a function, a bigint, a non-finite number,
 * a cycle…) was asked for a fingerprint: the job cannot be fenced as sent, so it is poison.
 */
export class CanonicalJsonError extends JobfenceError {
  override name = "CanonicalJsonError";
}

/**
 * One job id, two different jobs (a conflict): the job's fence exists with another fingerprint, so
 * this message is not a repeat of the applied job. Nothing is applied; the message is
 * dead-lettered as `conflict` with both fingerprints, alerted and acked.
 */
export class JobConflictError extends JobfenceError {
  override name = "JobConflictError";
  /** The fingerprint of the job this message carries. */
  readonly jobFingerprint: Buffer;
  /** The fingerprint the fence (or an earlier record of the same batch, or a recorded step) recorded. */
  readonly fenceFingerprint: Buffer;
  constructor(
    jobId: string,
    jobFingerprint: Buffer,
    fenceFingerprint: Buffer,
    recordedBy: "fence" | "step" = "fence",
  ) {
    super(
      `job ${JSON.stringify(jobId)} ${recordedBy === "fence" ? "was applied" : "has steps claimed"} with fingerprint ${fenceFingerprint.toString("hex")}; ` +
        `this message carries a different job (fingerprint ${jobFingerprint.toString("hex")})`,
    );
    this.jobFingerprint = jobFingerprint;
    this.fenceFingerprint = fenceFingerprint;
  }
}
