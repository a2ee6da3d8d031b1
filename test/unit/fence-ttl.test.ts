/**
 * The fence TTL must exceed the longest a copy of a job can wait (outbox deadline, source and
 * backstop queues, the drain) + maximum retry window + 1 day (docs/design.md §7.1–§7.2).
 */
import { describe, expect, it } from "vitest";
import {
  BACKSTOP_RETENTION_SECONDS,
  copyWaitSeconds,
  DRAIN_TIMEOUT_SECONDS,
  minimumFenceTtlSeconds,
  OUTBOX_MAX_WAIT_SECONDS,
  TTL_DEFAULTS,
  TTL_MARGIN_SECONDS,
  validateFenceTtl,
} from "../../shared/fence/ttl.ts";
import { DEFAULT_RETRY_POLICY, maxDeliveryWindowSeconds } from "../../shared/retry/policy.ts";

const DAY = 86_400;
const defaults = {
  queueRetentionSeconds: TTL_DEFAULTS.queueRetentionSeconds,
  retryPolicy: DEFAULT_RETRY_POLICY,
  functionTimeoutSeconds: 30,
  fenceTtlSeconds: TTL_DEFAULTS.fenceTtlSeconds,
  fifo: false,
};
/** Delays at +20 %: 36 + 72 + 144 + 288 = 540 s; five attempts of 30 s: 150 s. */
const WINDOW = 690;

describe("fence TTL validation", () => {
  it("the defaults: 4 days' retention, a 14-day backstop, a 1-day outbox deadline and a 21-day TTL", () => {
    expect(TTL_DEFAULTS).toEqual({ queueRetentionSeconds: 4 * DAY, fenceTtlSeconds: 21 * DAY });
    expect(TTL_MARGIN_SECONDS).toBe(DAY);
    expect(BACKSTOP_RETENTION_SECONDS).toBe(14 * DAY);
    expect(OUTBOX_MAX_WAIT_SECONDS).toBe(DAY);
    expect(DRAIN_TIMEOUT_SECONDS).toBe(60);
    expect(maxDeliveryWindowSeconds(defaults)).toBe(WINDOW);
    expect(validateFenceTtl(defaults)).toEqual([]);
    expect(validateFenceTtl({ ...defaults, fifo: true })).toEqual([]);
    // Standard: the backstop's 14 days count from the first send, so they cover the source's 4.
    expect(minimumFenceTtlSeconds(defaults)).toBe(DAY + 14 * DAY + 60 + WINDOW + DAY + 1);
    // FIFO: the backstop's retention restarts at the move, after up to the source's 4 days.
    expect(minimumFenceTtlSeconds({ ...defaults, fifo: true })).toBe(DAY + 18 * DAY + 60 + WINDOW + DAY + 1);
    // The defaults also pass at Lambda's longest timeout, on FIFO.
    expect(validateFenceTtl({ ...defaults, fifo: true, functionTimeoutSeconds: 900 })).toEqual([]);
  });

  it("the 7-day TTL of earlier versions is refused: a copy can wait 14 days in the backstop", () => {
    const [problem] = validateFenceTtl({ ...defaults, fenceTtlSeconds: 7 * DAY });
    expect(problem).toMatch(/max\(queue retention 345600 s, backstop retention 1209600 s\)/);
  });

  it("each place a copy waits counts: standard takes the larger retention, FIFO the sum", () => {
    expect(copyWaitSeconds({ queueRetentionSeconds: 4 * DAY, fifo: false })).toEqual({
      outbox: DAY,
      queues: 14 * DAY,
      drain: 60,
      total: 15 * DAY + 60,
    });
    expect(copyWaitSeconds({ queueRetentionSeconds: 4 * DAY, fifo: true }).queues).toBe(18 * DAY);
    expect(
      copyWaitSeconds({
        queueRetentionSeconds: 4 * DAY,
        fifo: false,
        backstopRetentionSeconds: 2 * DAY,
        outboxMaxWaitSeconds: 3600,
        drainTimeoutSeconds: 10,
      }),
    ).toEqual({ outbox: 3600, queues: 4 * DAY, drain: 10, total: 4 * DAY + 3610 });
  });

  it.each([
    [
      "exactly at the boundary (must exceed, not equal)",
      { fenceTtlSeconds: 16 * DAY + 60 + WINDOW },
      /must exceed/,
    ],
    [
      "a TTL shorter than the backstop's retention",
      { fenceTtlSeconds: 10 * DAY },
      /backstop retention 1209600 s/,
    ],
    ["a TTL without the day's margin", { fenceTtlSeconds: 15 * DAY + 800 }, /1-day margin 86400 s/],
    ["a FIFO queue with the TTL a standard one needs", { fifo: true, fenceTtlSeconds: 17 * DAY }, /FIFO/],
    [
      "a FIFO queue keeping 14 days with the default TTL",
      { fifo: true, queueRetentionSeconds: 14 * DAY },
      /queue retention 1209600 s \+ backstop retention 1209600 s/,
    ],
    [
      "a TTL that forgets the outbox's day",
      { fenceTtlSeconds: 15 * DAY + 60 + WINDOW + DAY },
      /outbox deadline 86400 s/,
    ],
    [
      "a longer retry policy with the TTL a standard queue needs",
      {
        fenceTtlSeconds: 17 * DAY,
        retryPolicy: { maxAttempts: 20, baseSeconds: 30, capSeconds: 43_200 },
      },
      /maximum retry window/,
    ],
    [
      "a retention below SQS's minimum",
      { queueRetentionSeconds: 59 },
      /queue retention must be 60–1209600 s/,
    ],
    ["a retention above SQS's maximum", { queueRetentionSeconds: 15 * DAY }, /queue retention must be/],
    [
      "a backstop retention above SQS's maximum",
      { backstopRetentionSeconds: 15 * DAY },
      /backstop retention must be/,
    ],
    [
      "a function timeout above Lambda's 900 s",
      { functionTimeoutSeconds: 901 },
      /function timeout must be 1–900 s/,
    ],
    ["a negative outbox deadline", { outboxMaxWaitSeconds: -1 }, /outbox deadline must be/],
    ["a zero TTL", { fenceTtlSeconds: 0 }, /positive whole number/],
    ["a fractional TTL", { fenceTtlSeconds: 21.5 * DAY + 0.5 }, /positive whole number/],
  ])("refuses %s, naming the numbers", (_, change, message) => {
    const problems = validateFenceTtl({ ...defaults, ...change });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(message);
  });

  it("accepts one second past the minimum and refuses the minimum minus one, on both queue types", () => {
    for (const fifo of [false, true]) {
      const minimum = minimumFenceTtlSeconds({ ...defaults, fifo });
      expect(validateFenceTtl({ ...defaults, fifo, fenceTtlSeconds: minimum })).toEqual([]);
      expect(validateFenceTtl({ ...defaults, fifo, fenceTtlSeconds: minimum - 1 })).toHaveLength(1);
    }
  });

  it("a shorter backstop and outbox deadline allow a shorter TTL", () => {
    const short = { ...defaults, backstopRetentionSeconds: 4 * DAY, outboxMaxWaitSeconds: 0 };
    expect(minimumFenceTtlSeconds(short)).toBe(4 * DAY + 60 + WINDOW + DAY + 1);
    expect(validateFenceTtl({ ...short, fenceTtlSeconds: 7 * DAY })).toEqual([]);
  });

  it("reports every malformed input together", () => {
    const problems = validateFenceTtl({
      ...defaults,
      queueRetentionSeconds: 0,
      functionTimeoutSeconds: 0,
      fenceTtlSeconds: -1,
    });
    expect(problems).toHaveLength(3);
  });

  it("the message names every wait, the window, the margin and the total", () => {
    const [problem] = validateFenceTtl({ ...defaults, fenceTtlSeconds: DAY });
    expect(problem).toContain("fence TTL 86400 s (1.00 days)");
    expect(problem).toContain(
      "outbox deadline 86400 s + max(queue retention 345600 s, backstop retention 1209600 s) (standard: both count from the first send) " +
        "+ drain 60 s + maximum retry window 690 s + 1-day margin 86400 s = 1383150 s (16.01 days)",
    );
  });
});
