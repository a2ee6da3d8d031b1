/**
 * The retry policy (docs/design.md §4.2): how many attempts a job gets and how long SQS hides it between them.
 * Pure: no clock, no I/O; the random source is injected so the jitter is testable.
 */
import { ConfigurationError } from "../errors/configuration.ts";

/** How transient failures are retried. */
export interface RetryPolicy {
  /** Attempts in all, the first included; on attempt `maxAttempts` a failure is dead-lettered. */
  readonly maxAttempts: number;
  /** Delay after the first failed attempt, before jitter, in seconds. */
  readonly baseSeconds: number;
  /** Upper bound of the delay before jitter, in seconds. */
  readonly capSeconds: number;
}

/**
 * A per-queue change to the default policy. jobfence requires a written rationale for any
 * override, so the type makes `rationale` mandatory and start-up refuses a blank one.
 */
export type RetryOverride = Partial<RetryPolicy> & {
  /** Why this queue deviates from the default (kept with the code and shown at synth). */
  readonly rationale: string;
};

/**
 * The default policy: 5 attempts, base 30 s, cap 1 h.
 * Delays before jitter: 30 s, 60 s, 120 s, 240 s (then the 5th attempt dead-letters).
 */
export const DEFAULT_RETRY_POLICY: RetryPolicy = Object.freeze({
  maxAttempts: 5,
  baseSeconds: 30,
  capSeconds: 3600,
});

/** Jitter spreads each delay uniformly over ±20 % so a burst of failures does not retry in lockstep. */
export const JITTER = Object.freeze({ min: 0.8, max: 1.2 });

/** SQS refuses a visibility timeout above 12 hours. */
export const SQS_MAX_VISIBILITY_SECONDS = 43_200;

/** Attempts above this are a configuration mistake (SQS redrive allows up to 1000 receives). */
const MAX_ATTEMPTS_LIMIT = 100;

/**
 * Seconds to hide a message after its attempt `attempt` (1-based) failed:
 * `min(cap, base · 2^(attempt−1)) · U(0.8, 1.2)`, rounded to whole seconds (SQS takes integers),
 * at least 1 and at most 12 h.
 *
 * Worked values with the defaults and no jitter (random = 0.5): 30, 60, 120, 240; with base 30
 * and cap 3600, attempt 8 would be 3600 (capped), and random = 0 gives 80 % of each.
 */
export function retryDelaySeconds(
  attempt: number,
  policy: RetryPolicy,
  random: () => number = Math.random,
): number {
  if (!Number.isInteger(attempt) || attempt < 1)
    throw new RangeError(`attempt must be a positive integer, got ${attempt}`);
  // 2^(attempt-1) overflows to Infinity for absurd attempts; min() with the cap keeps it finite.
  const exponential = Math.min(policy.capSeconds, policy.baseSeconds * 2 ** (attempt - 1));
  const u = random();
  const factor = JITTER.min + (JITTER.max - JITTER.min) * Math.min(Math.max(u, 0), 1);
  return Math.min(SQS_MAX_VISIBILITY_SECONDS, Math.max(1, Math.round(exponential * factor)));
}

/** Whether a transient failure on `attempt` is the last one allowed. */
export function isLastAttempt(attempt: number, policy: RetryPolicy): boolean {
  return attempt >= policy.maxAttempts;
}

/**
 * Applies an override to the default policy and validates the result; every problem is reported
 * together in one {@link ConfigurationError}.
 */
export function resolveRetryPolicy(
  override?: RetryOverride,
  base: RetryPolicy = DEFAULT_RETRY_POLICY,
): RetryPolicy {
  const problems: string[] = [];
  if (override && !/\S/.test(override.rationale ?? "")) {
    problems.push(
      "a retry override needs a non-blank rationale explaining why this queue deviates from the default",
    );
  }
  const policy: RetryPolicy = {
    maxAttempts: override?.maxAttempts ?? base.maxAttempts,
    baseSeconds: override?.baseSeconds ?? base.baseSeconds,
    capSeconds: override?.capSeconds ?? base.capSeconds,
  };
  problems.push(...validateRetryPolicy(policy));
  if (problems.length > 0) throw new ConfigurationError("retry policy", problems);
  return Object.freeze(policy);
}

/** The problems with a policy, one line each; empty when it is valid. */
export function validateRetryPolicy(policy: RetryPolicy): string[] {
  const problems: string[] = [];
  if (
    !Number.isInteger(policy.maxAttempts) ||
    policy.maxAttempts < 1 ||
    policy.maxAttempts > MAX_ATTEMPTS_LIMIT
  ) {
    problems.push(
      `maxAttempts must be an integer from 1 to ${MAX_ATTEMPTS_LIMIT}, got ${policy.maxAttempts}`,
    );
  }
  if (!Number.isInteger(policy.baseSeconds) || policy.baseSeconds < 1) {
    problems.push(`baseSeconds must be a positive integer, got ${policy.baseSeconds}`);
  }
  if (
    !Number.isInteger(policy.capSeconds) ||
    policy.capSeconds < 1 ||
    policy.capSeconds > SQS_MAX_VISIBILITY_SECONDS
  ) {
    problems.push(
      `capSeconds must be an integer from 1 to ${SQS_MAX_VISIBILITY_SECONDS} (SQS's 12 h limit), got ${policy.capSeconds}`,
    );
  } else if (Number.isInteger(policy.baseSeconds) && policy.capSeconds < policy.baseSeconds) {
    problems.push(`capSeconds (${policy.capSeconds}) must not be below baseSeconds (${policy.baseSeconds})`);
  }
  return problems;
}

/**
 * The longest time a job can spend between its first receive and its last attempt under `policy`,
 * taking the jitter's upper bound: the sum of every delay. TTL validation (shared/fence/ttl.ts) adds it to the
 * queue's retention.
 */
export function maxRetryWindowSeconds(policy: RetryPolicy): number {
  let total = 0;
  for (let attempt = 1; attempt < policy.maxAttempts; attempt++) {
    total += retryDelaySeconds(attempt, policy, () => 1);
  }
  return total;
}

/**
 * The longest a job's deliveries can be spread over once it is first received: every backoff
 * delay at its jitter maximum, plus every attempt running to the function timeout.
 */
export function maxDeliveryWindowSeconds(inputs: {
  readonly retryPolicy: RetryPolicy;
  readonly functionTimeoutSeconds: number;
}): number {
  return (
    maxRetryWindowSeconds(inputs.retryPolicy) + inputs.retryPolicy.maxAttempts * inputs.functionTimeoutSeconds
  );
}
