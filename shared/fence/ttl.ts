/**
 * TTL validation (docs/design.md §7.1): a fence must outlive every delivery of its job. A message can wait in
 * its queue up to the retention period and then spend the whole retry window being retried; if
 * the fence expired before the last of those deliveries, that delivery would apply the work again.
 * So the TTL must exceed retention + maximum retry window + a margin of one day. Pure: the
 * harness, the local stack and the CDK constructs all call it, and a refused configuration fails
 * start-up and `cdk synth`.
 */
import { maxRetryWindowSeconds, type RetryPolicy } from "../retry/policy.ts";

/** The margin required beyond retention and retry window. */
export const TTL_MARGIN_SECONDS = 86_400;

/** Defaults: 4 days' queue retention, a 7-day fence TTL. */
export const TTL_DEFAULTS = Object.freeze({
  queueRetentionSeconds: 4 * 86_400,
  fenceTtlSeconds: 7 * 86_400,
});

/** SQS bounds of MessageRetentionPeriod. */
const SQS_RETENTION = Object.freeze({ min: 60, max: 14 * 86_400 });

/** What the validation needs to know. */
export interface FenceTtlInputs {
  /** The source queue's MessageRetentionPeriod. */
  readonly queueRetentionSeconds: number;
  readonly retryPolicy: RetryPolicy;
  /** The consumer function's timeout: each attempt may run this long before its retry is scheduled. */
  readonly functionTimeoutSeconds: number;
  readonly fenceTtlSeconds: number;
}

/**
 * The longest a job's deliveries can be spread over once it is first received: every backoff
 * delay at its jitter maximum, plus every attempt running to the function timeout.
 */
export function maxDeliveryWindowSeconds(
  inputs: Pick<FenceTtlInputs, "retryPolicy" | "functionTimeoutSeconds">,
): number {
  return (
    maxRetryWindowSeconds(inputs.retryPolicy) + inputs.retryPolicy.maxAttempts * inputs.functionTimeoutSeconds
  );
}

/** The smallest TTL that passes: retention + delivery window + margin + 1 s. */
export function minimumFenceTtlSeconds(inputs: Omit<FenceTtlInputs, "fenceTtlSeconds">): number {
  return inputs.queueRetentionSeconds + maxDeliveryWindowSeconds(inputs) + TTL_MARGIN_SECONDS + 1;
}

/** Every problem with the inputs, each naming the numbers; empty when the TTL is safe. */
export function validateFenceTtl(inputs: FenceTtlInputs): string[] {
  const problems: string[] = [];
  const { queueRetentionSeconds: retention, functionTimeoutSeconds: timeout, fenceTtlSeconds: ttl } = inputs;
  if (!Number.isInteger(retention) || retention < SQS_RETENTION.min || retention > SQS_RETENTION.max) {
    problems.push(
      `queue retention must be ${SQS_RETENTION.min}–${SQS_RETENTION.max} s (SQS's bounds), got ${retention}`,
    );
  }
  if (!Number.isInteger(timeout) || timeout < 1 || timeout > 900) {
    problems.push(`function timeout must be 1–900 s (Lambda's bounds), got ${timeout}`);
  }
  if (!Number.isInteger(ttl) || ttl < 1)
    problems.push(`fence TTL must be a positive whole number of seconds, got ${ttl}`);
  if (problems.length > 0) return problems;

  const window = maxDeliveryWindowSeconds(inputs);
  const needed = retention + window + TTL_MARGIN_SECONDS;
  if (ttl <= needed) {
    problems.push(
      `fence TTL ${ttl} s (${days(ttl)}) must exceed queue retention ${retention} s + maximum retry window ${window} s ` +
        `+ 1-day margin ${TTL_MARGIN_SECONDS} s = ${needed} s (${days(needed)}); ` +
        "otherwise a late delivery could find its fence expired and apply the work again",
    );
  }
  return problems;
}

function days(seconds: number): string {
  return `${(seconds / 86_400).toFixed(2)} days`;
}
