/**
 * A dead letter's status (docs/design.md §5.5). Its one transition, out of pending_review into a final status,
 * is enforced by the database (trigger dead_letters_guard_update), and the replay and discard
 * paths act only on a row still pending_review; the names here validate requests and document
 * the lifecycle.
 */

export const DEAD_LETTER_STATUS = {
  /** Entered when a failure is recorded. Left only by replay, supersede or discard. */
  pendingReview: "pending_review",
  /** Final: the stored envelope was sent again to its queue (same job_id). */
  replayed: "replayed",
  /** Final: an operator discarded it, with a reason. */
  discarded: "discarded",
  /** Final: a replay found the job's fence (it succeeded by another path) and sent nothing. */
  superseded: "superseded",
} as const;

/** One of {@link DEAD_LETTER_STATUS}. */
export type DeadLetterStatus = (typeof DEAD_LETTER_STATUS)[keyof typeof DEAD_LETTER_STATUS];

/** Every status, in lifecycle order. */
export const DEAD_LETTER_STATUSES = Object.values(DEAD_LETTER_STATUS) as [
  DeadLetterStatus,
  ...DeadLetterStatus[],
];
