/**
 * Named points in the harness, a job's steps, the replay and the cleanup where a test may stop the process (the
 * reliability suite's crash matrix kills a real child process at each one with SIGKILL) or inject
 * a delay. Production code never installs a hook: a point is then one check of an unset variable,
 * no call and no await.
 */

/** Where a hook can act, in the order a job meets them. */
export const FAULT_POINTS = [
  /** A step about to call its provider (shared/steps/): nothing of it has happened yet. */
  "step:before-call",
  /** The provider answered the step's call; its checkpoint not yet written. */
  "step:after-call",
  /** The step's checkpoint committed; the fence transaction not begun. */
  "step:after-checkpoint",
  /** A record parsed, its fence transaction not begun. */
  "fence:before",
  /** BEGIN and the fence insert answered; the work has not run. */
  "fence:after-insert",
  /** The work ran; COMMIT not sent. */
  "fence:after-work",
  /** COMMIT answered; the record not yet reported to Lambda (not acked). */
  "fence:after-commit",
  /** The follow-ups of a committed transaction sent to SQS; their outbox rows not yet deleted. */
  "outbox:after-send",
  /** The scheduled relay sent what it claimed; its DELETE and COMMIT not yet sent. */
  "outbox:sweep-after-send",
  /** The dead-letter INSERT sent, its answer not yet read. */
  "dead-letter:in-flight",
  /** The dead letter committed; the alert not sent, the record not acked. */
  "dead-letter:after",
  /** A replay's message sent to SQS; the dead letter's status change not committed. */
  "replay:after-send",
  /** A cleanup batch's DELETE sent, its answer not yet read. */
  "cleanup:in-flight",
] as const;
export type FaultPoint = (typeof FAULT_POINTS)[number];

/** What a hook learns about where it is. */
export interface FaultContext {
  /** The jobs concerned (a batch transaction's, a replay's). */
  readonly jobIds?: readonly string[];
}

export type FaultHook = (point: FaultPoint, context: FaultContext) => void | Promise<void>;

/** The installed hook; read at each point. Set only through {@link installFaultHook}. */
export let faultHook: FaultHook | undefined;

/** Installs (or, with undefined, removes) the hook. For tests only. */
export function installFaultHook(hook: FaultHook | undefined): void {
  faultHook = hook;
}
