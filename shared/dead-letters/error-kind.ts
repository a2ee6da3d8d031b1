/** Why a dead letter was written. Each value says how a message gets here. */
export const ERROR_KIND = {
  /** The body, envelope or payload can never be processed as sent; dead-lettered with zero retries. */
  poison: "poison",
  /** The work threw `PermanentJobError`: a business rule that retrying cannot change. */
  hard: "hard",
  /** A transient failure on the last allowed attempt, or one whose retry its queue could not keep. */
  exhausted: "exhausted",
  /** The harness could never record the failure itself; the backstop drain found the message. */
  unrecorded: "unrecorded",
  /** The job's fence exists with another fingerprint: one job id, two different jobs. Nothing applied. */
  conflict: "conflict",
  /** Its deliveries kept ending without an outcome while its work was in flight (timeout, crash, OOM). */
  interrupted: "interrupted",
  /**
   * A follow-up message a committed job wrote to its outbox that the relay could not send: the
   * parent's effect stands, this job of the target consumer waits for review (and replay).
   */
  undelivered: "undelivered",
} as const;

/** One of {@link ERROR_KIND}. */
export type ErrorKind = (typeof ERROR_KIND)[keyof typeof ERROR_KIND];

/** Every error kind. */
export const ERROR_KINDS = Object.values(ERROR_KIND) as [ErrorKind, ...ErrorKind[]];
