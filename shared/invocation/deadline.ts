/**
 * The deadline of one Lambda invocation (docs/design.md §4.3): no record starts when less than the
 * record budget remains, and at the return reserve before the function timeout the invocation's
 * signal aborts, whatever is still running. Everything after that does nothing more for its record.
 */
import type { Context } from "aws-lambda";

/** How an invocation spends its time. */
export interface InvocationBudget {
  /** No record starts when less than this remains of the invocation. */
  readonly recordBudgetMs: number;
  /** The invocation returns this long before the function timeout, whatever is still running. */
  readonly returnReserveMs: number;
}

/** The deadline of one invocation, from its context. */
export interface InvocationClock {
  /** Aborted at the return reserve before the function timeout. */
  readonly signal: AbortSignal;
  /** Whether enough time is left to start a record. */
  canStart(): boolean;
  /** Milliseconds left before the function timeout. */
  remainingMs(): number;
  dispose(): void;
}

/** The clock of an invocation; without a timing (or a context that tells the time) it never runs out. */
export function invocationClock(context: Context, timing?: InvocationBudget): InvocationClock {
  const controller = new AbortController();
  const remaining = () =>
    typeof context?.getRemainingTimeInMillis === "function"
      ? context.getRemainingTimeInMillis()
      : Number.POSITIVE_INFINITY;
  const start = remaining();
  let timer: NodeJS.Timeout | undefined;
  if (timing && Number.isFinite(start)) {
    timer = setTimeout(
      () => controller.abort(new Error("the invocation's return reserve was reached")),
      Math.max(0, start - timing.returnReserveMs),
    );
    timer.unref?.();
  }
  return {
    signal: controller.signal,
    canStart: () => !timing || remaining() >= timing.recordBudgetMs,
    remainingMs: remaining,
    dispose: () => clearTimeout(timer),
  };
}

/**
 * How the return reserve is spent once the invocation's time is up: recording the running record's
 * interruption gets this share, returning the records that did not run the next, and the rest is
 * slack before Lambda's own timeout.
 */
export const INTERRUPT_SHARE_OF_RESERVE = 0.4;
/** The share of the reserve for returning the records that did not run. */
export const RETURN_SHARE_OF_RESERVE = 0.3;

/** What the race of a record against the deadline gives when the deadline wins. */
const DEADLINE = Symbol("deadline");

/** What waits on a signal's deadline: resolves a race with DEADLINE when the signal aborts. */
type DeadlineWaiter = (deadline: typeof DEADLINE) => void;

/**
 * The races waiting on each signal. A signal gets one abort listener, added the first time a race
 * waits on it, however many records race against it: an invocation's records all race against
 * its clock's signal, and a listener added and removed per record costs more than the record's
 * own bookkeeping. A race leaves the set when its work settles, so nothing accumulates on a signal
 * that never aborts; the set goes with its signal.
 */
const waitersBySignal = new WeakMap<AbortSignal, Set<DeadlineWaiter>>();

function waitersOf(signal: AbortSignal): Set<DeadlineWaiter> {
  let waiters = waitersBySignal.get(signal);
  if (waiters === undefined) {
    const set = new Set<DeadlineWaiter>();
    waiters = set;
    waitersBySignal.set(signal, set);
    signal.addEventListener(
      "abort",
      () => {
        for (const waiter of set) waiter(DEADLINE);
        set.clear();
      },
      { once: true },
    );
  }
  return waiters;
}

/** `work`'s result, or DEADLINE once `signal` aborts first. */
export function untilDeadline<T>(work: Promise<T>, signal: AbortSignal): Promise<T | typeof DEADLINE> {
  if (signal.aborted) return Promise.resolve(DEADLINE);
  const waiters = waitersOf(signal);
  return new Promise<T | typeof DEADLINE>((resolve, reject) => {
    waiters.add(resolve);
    // Promise.resolve, as Promise.race would: a work that is a value or a thenable is taken as one.
    Promise.resolve(work).then(
      (value) => {
        waiters.delete(resolve);
        resolve(value);
      },
      (error: unknown) => {
        waiters.delete(resolve);
        reject(error);
      },
    );
  });
}

export { DEADLINE };
