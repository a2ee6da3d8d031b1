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
  /**
   * A copy the harness never ran (drained from the backstop, or an outbox row past its deadline)
   * whose job has no fence, found older than the fence's lifetime (first sent at least TTL - 1 day
   * ago): the job may have been applied and its fence cleaned. Recorded by the database in place of
   * `unrecorded` or `undelivered` (migration 0021); a replay refuses it unless forced with a reason.
   */
  outlived: "outlived",
} as const;

/** One of {@link ERROR_KIND}. */
export type ErrorKind = (typeof ERROR_KIND)[keyof typeof ERROR_KIND];

/** Every error kind. */
export const ERROR_KINDS = Object.values(ERROR_KIND) as [ErrorKind, ...ErrorKind[]];
