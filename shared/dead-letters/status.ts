/**
 * A dead letter's status (SPEC §5) and its one transition. The database enforces the same rules
 * (trigger dead_letters_guard_update); this is the code's copy, used to validate requests and to
 * document the lifecycle.
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

/** Whether `from → to` is allowed: only out of pending_review, only into a final status. */
export function canTransition(from: DeadLetterStatus, to: DeadLetterStatus): boolean {
  return from === DEAD_LETTER_STATUS.pendingReview && to !== DEAD_LETTER_STATUS.pendingReview;
}
