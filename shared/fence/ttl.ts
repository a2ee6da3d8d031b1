/**
 * TTL validation (docs/design.md §7.1–§7.2): a fence must outlive every copy of its job. A copy can
 * wait in a sender's outbox (until its row's deadline), then in the source queue (its retention),
 * then in the backstop queue (its retention, counted from the first send on a standard queue and
 * from the move on a FIFO one), until the drain records it; and its deliveries can be spread over
 * the whole retry window. If the fence expired before the last of those copies was delivered or
 * replayed, that copy would apply the work again. So the TTL must exceed the longest such wait +
 * the retry window + a margin of one day. Pure: the harness, the local stack and the CDK constructs
 * all call it, and a refused configuration fails start-up and `cdk synth`.
 *
 * A copy found at run time older than this allows (a misconfiguration, a clock, an operator's
 * redrive) is not trusted: the database records it `outlived` (migration 0021) and a replay
 * refuses it without a reasoned override.
 */
import { functionTimeoutProblem } from "../retry/delivery-timings.ts";
import { maxDeliveryWindowSeconds, type RetryPolicy } from "../retry/policy.ts";

const DAY = 86_400;

/** The margin required beyond every wait and the retry window. */
export const TTL_MARGIN_SECONDS = DAY;

/**
 * The longest an outbox row may wait for a relay: its `send_by` deadline, the column default of
 * migration 0021 (a day after the row was written). Past it the scheduled relay never sends the row;
 * it moves it to the dead letters instead.
 */
export const OUTBOX_MAX_WAIT_SECONDS = DAY;

/** The backstop queue keeps messages 14 days, SQS's maximum (docs/design.md §5.6). */
export const BACKSTOP_RETENTION_SECONDS = 14 * DAY;

/** The backstop drain's function timeout: a message it received is recorded within it. */
export const DRAIN_TIMEOUT_SECONDS = 60;

/**
 * Defaults: 4 days' queue retention and a 21-day fence TTL. 21 days, not the 7 of earlier versions:
 * the backstop keeps a message 14 days (on FIFO queues after the source's 4), and an outbox row may
 * wait a day, so a 7-day fence could be cleaned while a copy of its job still waited. Keeping the
 * backstop at 14 days (rather than shortening it to fit a 7-day TTL) keeps every message of a
 * database outage of up to two weeks; the fences cost three times the rows instead
 * (docs/performance.md, fence storage).
 */
export const TTL_DEFAULTS = Object.freeze({
  queueRetentionSeconds: 4 * DAY,
  fenceTtlSeconds: 21 * DAY,
});

/** SQS bounds of MessageRetentionPeriod. */
const SQS_RETENTION = Object.freeze({ min: 60, max: 14 * DAY });

/** What the validation needs to know. */
export interface FenceTtlInputs {
  /** The source queue's MessageRetentionPeriod. */
  readonly queueRetentionSeconds: number;
  readonly retryPolicy: RetryPolicy;
  /** The consumer function's timeout: each attempt may run this long before its retry is scheduled. */
  readonly functionTimeoutSeconds: number;
  /** Whether the function runs on Lambda Managed Instances (timeouts up to 90 minutes). @default false */
  readonly managedInstances?: boolean;
  readonly fenceTtlSeconds: number;
  /**
   * Whether the source queue is FIFO: SQS resets a FIFO message's retention when it moves it to the
   * backstop, so there the two retentions add up; a standard message keeps its first enqueue time.
   */
  readonly fifo: boolean;
  /** The backstop queue's MessageRetentionPeriod. @default BACKSTOP_RETENTION_SECONDS (14 days) */
  readonly backstopRetentionSeconds?: number;
  /** How long after receiving a message the drain may still record it. @default DRAIN_TIMEOUT_SECONDS */
  readonly drainTimeoutSeconds?: number;
  /** The outbox deadline: how long a follow-up may wait to be sent. @default OUTBOX_MAX_WAIT_SECONDS */
  readonly outboxMaxWaitSeconds?: number;
}

/** Each place a copy can wait, in seconds, and their sum: the longest a copy can wait before its last delivery. */
export interface CopyWait {
  readonly outbox: number;
  /** The source and backstop queues together: the larger of the two (standard), or their sum (FIFO). */
  readonly queues: number;
  readonly drain: number;
  readonly total: number;
}

/** The longest a copy of a job can wait, place by place (see the module comment). */
export function copyWaitSeconds(
  inputs: Pick<
    FenceTtlInputs,
    | "queueRetentionSeconds"
    | "fifo"
    | "backstopRetentionSeconds"
    | "drainTimeoutSeconds"
    | "outboxMaxWaitSeconds"
  >,
): CopyWait {
  const source = inputs.queueRetentionSeconds;
  const backstop = inputs.backstopRetentionSeconds ?? BACKSTOP_RETENTION_SECONDS;
  const queues = inputs.fifo ? source + backstop : Math.max(source, backstop);
  const outbox = inputs.outboxMaxWaitSeconds ?? OUTBOX_MAX_WAIT_SECONDS;
  const drain = inputs.drainTimeoutSeconds ?? DRAIN_TIMEOUT_SECONDS;
  return { outbox, queues, drain, total: outbox + queues + drain };
}

/** The smallest TTL that passes: the longest copy wait + delivery window + margin + 1 s. */
export function minimumFenceTtlSeconds(inputs: Omit<FenceTtlInputs, "fenceTtlSeconds">): number {
  return copyWaitSeconds(inputs).total + maxDeliveryWindowSeconds(inputs) + TTL_MARGIN_SECONDS + 1;
}

/** Every problem with the inputs, each naming the numbers; empty when the TTL is safe. */
export function validateFenceTtl(inputs: FenceTtlInputs): string[] {
  const problems: string[] = [];
  const { queueRetentionSeconds: retention, functionTimeoutSeconds: timeout, fenceTtlSeconds: ttl } = inputs;
  const backstop = inputs.backstopRetentionSeconds ?? BACKSTOP_RETENTION_SECONDS;
  for (const [name, value] of [
    ["queue retention", retention],
    ["backstop retention", backstop],
  ] as const) {
    if (!Number.isInteger(value) || value < SQS_RETENTION.min || value > SQS_RETENTION.max) {
      problems.push(
        `${name} must be ${SQS_RETENTION.min}–${SQS_RETENTION.max} s (SQS's bounds), got ${value}`,
      );
    }
  }
  const timeoutProblem = functionTimeoutProblem(timeout, inputs.managedInstances);
  if (timeoutProblem) problems.push(timeoutProblem);
  for (const [name, value] of [
    ["drain timeout", inputs.drainTimeoutSeconds ?? DRAIN_TIMEOUT_SECONDS],
    ["outbox deadline", inputs.outboxMaxWaitSeconds ?? OUTBOX_MAX_WAIT_SECONDS],
  ] as const) {
    if (!Number.isInteger(value) || value < 0)
      problems.push(`${name} must be a whole number of seconds, got ${value}`);
  }
  if (!Number.isInteger(ttl) || ttl < 1)
    problems.push(`fence TTL must be a positive whole number of seconds, got ${ttl}`);
  if (problems.length > 0) return problems;

  const wait = copyWaitSeconds(inputs);
  const window = maxDeliveryWindowSeconds(inputs);
  const needed = wait.total + window + TTL_MARGIN_SECONDS;
  if (ttl <= needed) {
    const queues = inputs.fifo
      ? `queue retention ${retention} s + backstop retention ${backstop} s (FIFO: the backstop's counts from the move)`
      : `max(queue retention ${retention} s, backstop retention ${backstop} s) (standard: both count from the first send)`;
    problems.push(
      `fence TTL ${ttl} s (${days(ttl)}) must exceed the longest a copy of a job can wait and be delivered: ` +
        `outbox deadline ${wait.outbox} s + ${queues} + drain ${wait.drain} s + maximum retry window ${window} s ` +
        `+ 1-day margin ${TTL_MARGIN_SECONDS} s = ${needed} s (${days(needed)}); ` +
        "otherwise a late copy could find its fence expired and apply the work again",
    );
  }
  return problems;
}

function days(seconds: number): string {
  return `${(seconds / 86_400).toFixed(2)} days`;
}
