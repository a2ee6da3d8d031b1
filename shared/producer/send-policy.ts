/**
 * When sendJobs tries again, and how long it waits first. Pure. Which errors are worth another
 * try is SQS's rule, in shared/sqs/send-errors.ts.
 */

/** How many times, and how patiently, a send is retried. */
export interface SendRetryPolicy {
  /** Calls per batch, the first included. */
  readonly maxAttempts: number;
  /** The first wait's ceiling; each further wait's doubles, up to {@link maxDelayMs}. */
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
}

export const DEFAULT_SEND_RETRY: SendRetryPolicy = Object.freeze({
  maxAttempts: 4,
  baseDelayMs: 100,
  maxDelayMs: 2000,
});

/**
 * The wait before attempt `attempt + 1` (attempt ≥ 1): "full jitter", uniform in
 * [0, min(max, base × 2^(attempt−1))), so producers throttled together do not retry together.
 */
export function backoffMs(attempt: number, policy: SendRetryPolicy, random: () => number): number {
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (attempt - 1));
  return Math.floor(random() * ceiling);
}

/** An error's message, bounded. */
export function errorMessage(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.length > 500 ? `${text.slice(0, 499)}…` : text;
}
