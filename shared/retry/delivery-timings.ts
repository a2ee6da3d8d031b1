/**
 * Delivery timings, validated together: the retry policy, the interruption limit, the source
 * queue's redrive count, visibility timeout and retention, the function timeout, the event source's
 * batching window and the harness's time budget. Each is harmless alone; what breaks is a
 * combination, so one function checks them as a set.
 *
 * Why they interact: an *attempt* is a run of the work that failed, counted in the database
 * ledger, but SQS's redrive counts *receives* (ApproximateReceiveCount), and many receives run
 * nothing: a FIFO follower skipped behind its failed head, a record the time budget left unstarted,
 * a batch-mate of a record that crashed or timed out the invocation, Lambda throttling, a fence lock
 * wait. So the redrive count must leave room for those, or a message that can still be retried
 * reaches the backstop while the database is reachable. And the same count bounds how long a
 * message circles when the database is *unreachable*: the harness then records nothing and does
 * not change the message's visibility, so each receive hides it for the full visibility timeout,
 * and the backstop must get it well before the queue's retention deletes it.
 *
 * Pure: no clock, no I/O. `cdk synth` (the JobConsumer construct) and the consumer's start-up call
 * it, so a refused combination fails before anything runs. The wording of each problem follows
 * `validateFenceTtl` (shared/fence/ttl.ts): the numbers, the arithmetic, what breaks and what to
 * change.
 */
import {
  maxDeliveryWindowSeconds,
  type RetryPolicy,
  SQS_MAX_VISIBILITY_SECONDS,
  validateRetryPolicy,
} from "./policy.ts";

/** Everything the validation needs to know about one consumer's deliveries. */
export interface DeliveryTimings {
  /** The effective retry policy (the definition's override applied to the default). */
  readonly retryPolicy: RetryPolicy;
  /** Confirmed interruptions (crashes, timeouts) after which a message is dead-lettered `interrupted`; 1–10. */
  readonly maxInterruptions: number;
  /** The source queue's redrive to the backstop, in receives; SQS allows 1–1000. */
  readonly maxReceiveCount: number;
  /** The source queue's visibility timeout. */
  readonly visibilityTimeoutSeconds: number;
  /** The consumer function's timeout; Lambda allows 1–900 s, 1–5400 s on Managed Instances. */
  readonly functionTimeoutSeconds: number;
  /**
   * Whether the function runs on Lambda Managed Instances (a capacity provider), where timeouts
   * reach 90 minutes. @default false
   */
  readonly managedInstances?: boolean;
  /** The event source's MaximumBatchingWindowInSeconds; 0–300, and 0 on a FIFO queue. */
  readonly batchingWindowSeconds: number;
  /** The source queue's MessageRetentionPeriod; SQS allows 60–1209600 s. */
  readonly queueRetentionSeconds: number;
  /** Whether the source queue is FIFO. */
  readonly fifo: boolean;
  /** No record starts when less than this remains of the invocation. */
  readonly recordBudgetMs: number;
  /** The harness stops waiting for a running record this long before the timeout. */
  readonly returnReserveMs: number;
  /** How long a fence insert waits for another delivery's lock (the consumer's lockTimeoutMs). */
  readonly lockTimeoutMs: number;
}

/**
 * AWS's guidance for SQS event sources: the visibility timeout is at least six times
 * the function timeout (plus the batching window), so a message still being processed, or retried
 * by Lambda after throttling, does not become visible and go to a second invocation.
 */
export const VISIBILITY_TO_TIMEOUT_RATIO = 6;

export const DELIVERY_TIMING_DEFAULTS = Object.freeze({
  /** Confirmed interruptions before a message is dead-lettered `interrupted`. */
  MAX_INTERRUPTIONS: 2,
  /**
   * Receives a message may spend on deliveries that run nothing (a skipped FIFO follower, a record
   * left unstarted by the time budget, a batch-mate of a crash, throttling, a fence lock wait)
   * without being pushed to the backstop early.
   */
  SPARE_RECEIVES: 10,
  /**
   * Messages ahead of a FIFO follower in its group whose every receive the follower's count must
   * absorb: a full FIFO batch (10 records) is the follower and nine ahead of it, and each time a
   * head is received and fails, the followers behind it are received and skipped too.
   */
  FIFO_PREDECESSORS: 9,
  /**
   * With the database unreachable, the backstop must get a message within this fraction of the
   * queue's retention: the rest is slack for an outage that starts after the message has already
   * waited in the queue, and for receives that take longer than the visibility timeout alone.
   */
  BACKSTOP_BEFORE_RETENTION_FRACTION: 0.5,
  VISIBILITY_TO_TIMEOUT_RATIO,
});

/** SQS's and Lambda's bounds, and the harness's own. */
const LIMITS = Object.freeze({
  maxInterruptions: { min: 1, max: 10 },
  /** SQS RedrivePolicy maxReceiveCount. */
  maxReceiveCount: { min: 1, max: 1000 },
  /** The SQS event source's MaximumBatchingWindowInSeconds. */
  batchingWindowSeconds: { min: 0, max: 300 },
  /** SQS MessageRetentionPeriod. */
  queueRetentionSeconds: { min: 60, max: 14 * 86_400 },
  /**
   * Time the harness needs, after it stops waiting for a running record, to report the batch's
   * failures and change visibilities before Lambda kills the invocation.
   */
  minReturnReserveMs: 500,
});

/**
 * Lambda's bounds of a function timeout: 15 minutes on its default compute, 90 minutes on Lambda
 * Managed Instances.
 */
export const FUNCTION_TIMEOUT_LIMITS = Object.freeze({
  default: { min: 1, max: 900 },
  managedInstances: { min: 1, max: 5400 },
});

/**
 * The function timeout against Lambda's bounds for its compute, or undefined when within them.
 * validateFenceTtl words it the same, so a construct reporting both can drop the duplicate line.
 */
export function functionTimeoutProblem(timeoutSeconds: number, managedInstances = false): string | undefined {
  const bounds = managedInstances
    ? FUNCTION_TIMEOUT_LIMITS.managedInstances
    : FUNCTION_TIMEOUT_LIMITS.default;
  if (isIntegerIn(timeoutSeconds, bounds)) return undefined;
  const compute = managedInstances ? "Lambda Managed Instances' bounds" : "Lambda's bounds";
  return `function timeout must be ${range(bounds)} s (${compute}), got ${timeoutSeconds}`;
}

/** Caps of the default time budget: a third (a tenth) of the timeout, at most 10 s (2 s). */
const RECORD_BUDGET_CAP_MS = 10_000;
const RETURN_RESERVE_CAP_MS = 2_000;

/**
 * The most receives one message can use on its own account: each of its `maxAttempts` failed
 * runs, plus the interruption path's `maxInterruptions + 2` (the first crash cannot be attributed
 * to a record, since the whole batch is redelivered, and one more delivery writes the `interrupted`
 * dead letter). Summing both paths bounds a message that fails some runs and crashes others.
 * Defaults: 5 + 2 + 2 = 9.
 */
export function receivesPerMessage(t: Pick<DeliveryTimings, "retryPolicy" | "maxInterruptions">): number {
  return t.retryPolicy.maxAttempts + t.maxInterruptions + 2;
}

/**
 * The smallest redrive count that cannot push a retriable message to the backstop while the
 * database is reachable: its own receives plus the spare ones. On a FIFO queue a follower is also
 * received (and skipped) every time a message ahead of it in its group is, so its count absorbs
 * the receives of up to FIFO_PREDECESSORS messages besides its own.
 * Defaults: standard 9 + 10 = 19; FIFO 9 × (1 + 9) + 10 = 100.
 */
export function minimumMaxReceiveCount(
  t: Pick<DeliveryTimings, "retryPolicy" | "maxInterruptions" | "fifo">,
): number {
  const own = receivesPerMessage(t);
  const { FIFO_PREDECESSORS, SPARE_RECEIVES } = DELIVERY_TIMING_DEFAULTS;
  return (t.fifo ? own * (1 + FIFO_PREDECESSORS) : own) + SPARE_RECEIVES;
}

/**
 * The default redrive count is the minimum, not more: while the database is reachable the ledger,
 * not the count, decides when a message is dead-lettered, so a higher count buys nothing there.
 * It only matters when the database is unreachable, and then every extra receive is another
 * visibility timeout the message circles unrecorded before the backstop (and its alarm) gets it,
 * spent out of the queue's retention.
 */
export function defaultMaxReceiveCount(
  t: Pick<DeliveryTimings, "retryPolicy" | "maxInterruptions" | "fifo">,
): number {
  return minimumMaxReceiveCount(t);
}

/**
 * No record starts with less than this left of the invocation: a third of the timeout, at most
 * 10 s, and never less than a fence lock wait plus the return reserve plus a second (a record
 * that starts must be able to wait out another delivery's lock before the deadline, or that lock
 * wait would end as an interruption). 30 s timeout, 5 s lock timeout: 10,000 ms; 15 s: 7,500 ms.
 */
export function defaultRecordBudgetMs(functionTimeoutSeconds: number, lockTimeoutMs: number): number {
  const share = Math.min(RECORD_BUDGET_CAP_MS, Math.floor((functionTimeoutSeconds * 1000) / 3));
  return Math.max(share, lockTimeoutMs + defaultReturnReserveMs(functionTimeoutSeconds) + 1000);
}

/**
 * The harness stops waiting for a running record this long before the timeout, to report the
 * batch in time: a tenth of the timeout, at most 2 s. 30 s timeout: 2,000 ms. Below a 5 s
 * timeout this is under the 500 ms the validation requires, so such a consumer sets it explicitly.
 */
export function defaultReturnReserveMs(functionTimeoutSeconds: number): number {
  return Math.min(RETURN_RESERVE_CAP_MS, Math.floor((functionTimeoutSeconds * 1000) / 10));
}

/**
 * Seconds one receive can hide a message while the database is unreachable: the visibility
 * timeout, plus the batching window the poller may hold it before the invocation (a conservative
 * bound: SQS starts the visibility timeout at the receive).
 */
function secondsPerUnrecordedReceive(t: DeliveryTimings): number {
  return t.visibilityTimeoutSeconds + t.batchingWindowSeconds;
}

/**
 * The invocation's time budget alone: what the consumer checks at start-up when it does not know
 * the queue's redrive (the local stack, tests), and rule 5 of {@link validateDeliveryTimings}.
 */
export function validateTimeBudget(
  t: Pick<DeliveryTimings, "functionTimeoutSeconds" | "recordBudgetMs" | "returnReserveMs" | "lockTimeoutMs">,
): string[] {
  const problems: string[] = [];
  const {
    functionTimeoutSeconds: timeout,
    recordBudgetMs: budget,
    returnReserveMs: reserve,
    lockTimeoutMs: lock,
  } = t;
  if (!Number.isInteger(reserve) || reserve < LIMITS.minReturnReserveMs) {
    problems.push(
      `returnReserveMs ${reserve} must be a whole number at least ${LIMITS.minReturnReserveMs} ms: the harness ` +
        "needs that long after it stops waiting for a running record to report the batch before Lambda ends " +
        "the invocation (the default, a tenth of the function timeout, reaches it from a 5 s timeout); raise returnReserveMs",
    );
  }
  const timeoutMs = timeout * 1000;
  if (!Number.isInteger(budget) || budget <= reserve) {
    problems.push(
      `recordBudgetMs ${budget} must be a whole number above returnReserveMs ${reserve}: a record started with ` +
        "less time left than the reserve would be abandoned at once; raise recordBudgetMs or lower returnReserveMs",
    );
  } else if (budget >= timeoutMs) {
    problems.push(
      `recordBudgetMs ${budget} must be below the function timeout ${timeout} s = ${timeoutMs} ms: no record ` +
        "could ever start; lower recordBudgetMs or raise the function timeout",
    );
  }

  if (Number.isInteger(budget) && budget > reserve && budget <= lock + reserve) {
    problems.push(
      `recordBudgetMs ${budget} must exceed the fence lock timeout ${lock} ms + returnReserveMs ${reserve} ms: a ` +
        "record that starts must be able to wait out another delivery's lock before the deadline, or that wait " +
        "would end as an interruption; raise recordBudgetMs or the function timeout, or lower lockTimeoutMs",
    );
  }
  return problems;
}

/** Every problem with the timings, one line each, naming the numbers and what to change; empty when fine. */
export function validateDeliveryTimings(t: DeliveryTimings): string[] {
  const problems: string[] = [];
  const {
    retryPolicy,
    maxInterruptions,
    maxReceiveCount: count,
    visibilityTimeoutSeconds: visibility,
    functionTimeoutSeconds: timeout,
    batchingWindowSeconds: window,
    queueRetentionSeconds: retention,
  } = t;

  // 1. Each input within its own bounds; the rules below are arithmetic on them, meaningless otherwise.
  problems.push(...validateRetryPolicy(retryPolicy).map((p) => `retry policy: ${p}`));
  if (!isIntegerIn(maxInterruptions, LIMITS.maxInterruptions)) {
    problems.push(
      `maxInterruptions must be a whole number ${range(LIMITS.maxInterruptions)}, got ${maxInterruptions}`,
    );
  }
  if (!isIntegerIn(count, LIMITS.maxReceiveCount)) {
    problems.push(
      `maxReceiveCount must be a whole number ${range(LIMITS.maxReceiveCount)} (SQS's redrive bounds), got ${count}`,
    );
  }
  const timeoutProblem = functionTimeoutProblem(timeout, t.managedInstances);
  if (timeoutProblem) problems.push(timeoutProblem);
  if (!isIntegerIn(retention, LIMITS.queueRetentionSeconds)) {
    problems.push(
      `queue retention must be ${range(LIMITS.queueRetentionSeconds)} s (SQS's bounds), got ${retention}`,
    );
  }
  if (!isIntegerIn(window, LIMITS.batchingWindowSeconds)) {
    problems.push(
      `batching window must be a whole number ${range(LIMITS.batchingWindowSeconds)} s (the SQS event source's bounds), got ${window}`,
    );
  } else if (t.fifo && window > 0) {
    problems.push(
      `batching window must be 0 on a FIFO queue (Lambda does not support one there), got ${window} s; remove it`,
    );
  }
  if (problems.length > 0) return problems;

  // 2. AWS's guidance for SQS event sources: otherwise a message still being processed (or held in
  //    the batching window) becomes visible again and a second invocation receives it.
  const ratio = VISIBILITY_TO_TIMEOUT_RATIO;
  const minimumVisibility = ratio * timeout + window;
  if (!Number.isInteger(visibility) || visibility < minimumVisibility) {
    const windowPart =
      window > 0 ? ` plus the batching window ${window} s, ${minimumVisibility} s in all` : "";
    problems.push(
      `visibility timeout ${visibility} s must be a whole number at least ${ratio} × the function timeout ` +
        `${timeout} s = ${ratio * timeout} s${windowPart} (AWS's guidance for SQS event sources: otherwise a ` +
        "message still being processed becomes visible and is delivered again); raise the visibility timeout " +
        "or lower the function timeout",
    );
  } else if (visibility > SQS_MAX_VISIBILITY_SECONDS) {
    problems.push(
      `visibility timeout ${visibility} s exceeds SQS's 12 h limit (${SQS_MAX_VISIBILITY_SECONDS} s); ` +
        "lower the visibility timeout",
    );
  }

  // 3. Deliveries that run nothing still raise the receive count: the count must absorb them.
  const own = receivesPerMessage(t);
  const minimumCount = minimumMaxReceiveCount(t);
  if (count < minimumCount) {
    const { FIFO_PREDECESSORS, SPARE_RECEIVES } = DELIVERY_TIMING_DEFAULTS;
    const ownPart = `maxAttempts ${retryPolicy.maxAttempts} + maxInterruptions ${maxInterruptions} + 2 = ${own} receives per message`;
    const arithmetic = t.fifo
      ? `(${ownPart}) × (1 + ${FIFO_PREDECESSORS} FIFO predecessors) + ${SPARE_RECEIVES} spare receives = ${minimumCount}`
      : `${ownPart} + ${SPARE_RECEIVES} spare receives = ${minimumCount}`;
    problems.push(
      `maxReceiveCount ${count} must be at least ${arithmetic}; otherwise a message that can still be retried ` +
        "reaches the backstop while the database is reachable (deliveries that run nothing, such as a skipped " +
        "FIFO follower, a record the time budget left unstarted or a batch-mate of a crash, raise the receive " +
        `count too); raise maxReceiveCount to ${minimumCount} or leave it unset`,
    );
  }

  // 4. With the database unreachable nothing is recorded and no visibility is changed: each
  //    receive hides the message for a full visibility timeout until the redrive moves it.
  const perReceive = secondsPerUnrecordedReceive(t);
  const outage = count * perReceive;
  const fraction = DELIVERY_TIMING_DEFAULTS.BACKSTOP_BEFORE_RETENTION_FRACTION;
  const deadline = retention * fraction;
  if (outage > deadline) {
    const neededRetention = Math.ceil(outage / fraction);
    const fixes = [
      ...(count > minimumCount ? [`lower maxReceiveCount toward its minimum ${minimumCount}`] : []),
      "lower the visibility timeout (and with it the function timeout)",
      ...(neededRetention <= LIMITS.queueRetentionSeconds.max
        ? [`raise the queue retention to at least ${neededRetention} s (${humanDuration(neededRetention)})`]
        : []),
    ];
    problems.push(
      `maxReceiveCount ${count} × (visibility timeout ${visibility} s + batching window ${window} s) = ` +
        `${outage} s (${hours(outage)}) must not exceed ${fraction} × the queue retention ${retention} s = ` +
        `${deadline} s (${hours(deadline)}); otherwise, with the database unreachable, retention could delete ` +
        `a message before the backstop got it; ${fixes.join(", or ")}`,
    );
  }

  // 5. The invocation's time budget.
  problems.push(...validateTimeBudget(t));

  // 6. The whole retry schedule must fit the retention, or the retention, not the policy, would
  //    end every retried message's attempts.
  const retryWindow = maxDeliveryWindowSeconds(t);
  if (retryWindow >= retention) {
    const delays = retryWindow - retryPolicy.maxAttempts * timeout;
    problems.push(
      `retry window: backoff delays at their jitter maximum ${delays} s + maxAttempts ${retryPolicy.maxAttempts} ` +
        `× function timeout ${timeout} s = ${retryWindow} s must be below the queue retention ${retention} s; ` +
        "otherwise retention-aware retries would cut the policy short on every retried message (its last " +
        "attempts would fall after retention deletes it); raise the queue retention above " +
        `${retryWindow} s or shorten the policy (fewer attempts, a lower cap)`,
    );
  }
  return problems;
}

/** The worked numbers of a set of timings, for docs and the start-up log. */
export interface DeliveryTimingsDescription {
  /** {@link receivesPerMessage}. */
  readonly receivesPerMessage: number;
  /** {@link minimumMaxReceiveCount}. */
  readonly minimumMaxReceiveCount: number;
  readonly maxReceiveCount: number;
  /** With the database unreachable: maxReceiveCount × (visibility timeout + batching window). */
  readonly outageSecondsToBackstop: number;
  readonly outageHoursToBackstop: number;
  /** BACKSTOP_BEFORE_RETENTION_FRACTION × the queue retention: the bound the outage time must fit. */
  readonly backstopDeadlineSeconds: number;
  /** Backoff delays at their jitter maximum + maxAttempts × the function timeout. */
  readonly retryWindowSeconds: number;
  /** One line with all of the above. */
  readonly summary: string;
}

/** The worked numbers of `t` (whether or not it passes validation). */
export function describeDeliveryTimings(t: DeliveryTimings): DeliveryTimingsDescription {
  const own = receivesPerMessage(t);
  const minimum = minimumMaxReceiveCount(t);
  const perReceive = secondsPerUnrecordedReceive(t);
  const outage = t.maxReceiveCount * perReceive;
  const deadline = t.queueRetentionSeconds * DELIVERY_TIMING_DEFAULTS.BACKSTOP_BEFORE_RETENTION_FRACTION;
  const retryWindow = maxDeliveryWindowSeconds(t);
  return Object.freeze({
    receivesPerMessage: own,
    minimumMaxReceiveCount: minimum,
    maxReceiveCount: t.maxReceiveCount,
    outageSecondsToBackstop: outage,
    outageHoursToBackstop: outage / 3600,
    backstopDeadlineSeconds: deadline,
    retryWindowSeconds: retryWindow,
    summary:
      `${t.fifo ? "FIFO" : "standard"} queue: up to ${own} receives per message ` +
      `(${t.retryPolicy.maxAttempts} attempts + ${t.maxInterruptions} interruptions + 2); ` +
      `maxReceiveCount ${t.maxReceiveCount} (minimum ${minimum}); ` +
      `with the database unreachable the backstop gets a message after ${t.maxReceiveCount} × ${perReceive} s = ` +
      `${outage} s (${hours(outage)}), against a bound of ` +
      `${DELIVERY_TIMING_DEFAULTS.BACKSTOP_BEFORE_RETENTION_FRACTION} × the retention = ${deadline} s (${hours(deadline)}); ` +
      `retry window ${retryWindow} s of ${t.queueRetentionSeconds} s retention`,
  });
}

function isIntegerIn(value: number, bounds: { readonly min: number; readonly max: number }): boolean {
  return Number.isInteger(value) && value >= bounds.min && value <= bounds.max;
}

function range(bounds: { readonly min: number; readonly max: number }): string {
  return `${bounds.min}–${bounds.max}`;
}

function hours(seconds: number): string {
  return `${(seconds / 3600).toFixed(2)} h`;
}

function humanDuration(seconds: number): string {
  return seconds >= 86_400 ? `${(seconds / 86_400).toFixed(2)} days` : hours(seconds);
}
