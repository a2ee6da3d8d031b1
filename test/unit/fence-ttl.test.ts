/** The fence TTL must exceed queue retention + maximum retry window + 1 day (docs/design.md §7.1). */
import { describe, expect, it } from "vitest";
import {
  maxDeliveryWindowSeconds,
  minimumFenceTtlSeconds,
  TTL_DEFAULTS,
  TTL_MARGIN_SECONDS,
  validateFenceTtl,
} from "../../shared/fence/ttl.ts";
import { DEFAULT_RETRY_POLICY } from "../../shared/retry/policy.ts";

const DAY = 86_400;
const defaults = {
  queueRetentionSeconds: TTL_DEFAULTS.queueRetentionSeconds,
  retryPolicy: DEFAULT_RETRY_POLICY,
  functionTimeoutSeconds: 30,
  fenceTtlSeconds: TTL_DEFAULTS.fenceTtlSeconds,
};

describe("fence TTL validation", () => {
  it("the defaults: 4 days' retention and a 7-day TTL, with room to spare", () => {
    expect(TTL_DEFAULTS).toEqual({ queueRetentionSeconds: 4 * DAY, fenceTtlSeconds: 7 * DAY });
    expect(TTL_MARGIN_SECONDS).toBe(DAY);
    // Delays at +20 %: 36 + 72 + 144 + 288 = 540 s; five attempts of 30 s: 150 s.
    expect(maxDeliveryWindowSeconds(defaults)).toBe(690);
    expect(validateFenceTtl(defaults)).toEqual([]);
    expect(minimumFenceTtlSeconds(defaults)).toBe(4 * DAY + 690 + DAY + 1);
  });

  it.each([
    ["exactly at the boundary (must exceed, not equal)", { fenceTtlSeconds: 5 * DAY + 690 }, /must exceed/],
    [
      "a TTL shorter than the retention",
      { fenceTtlSeconds: 3 * DAY },
      /must exceed queue retention 345600 s/,
    ],
    ["a TTL without the day's margin", { fenceTtlSeconds: 4 * DAY + 700 }, /1-day margin 86400 s/],
    [
      "14 days' retention with the default TTL",
      { queueRetentionSeconds: 14 * DAY },
      /queue retention 1209600 s/,
    ],
    [
      "a longer retry policy with the default TTL",
      {
        queueRetentionSeconds: 6 * DAY,
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
      "a function timeout above Lambda's 900 s",
      { functionTimeoutSeconds: 901 },
      /function timeout must be 1–900 s/,
    ],
    ["a zero TTL", { fenceTtlSeconds: 0 }, /positive whole number/],
    ["a fractional TTL", { fenceTtlSeconds: 7.5 * DAY + 0.5 }, /positive whole number/],
  ])("refuses %s, naming the numbers", (_, change, message) => {
    const problems = validateFenceTtl({ ...defaults, ...change });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(message);
  });

  it("accepts one second past the minimum and refuses the minimum minus one", () => {
    const minimum = minimumFenceTtlSeconds(defaults);
    expect(validateFenceTtl({ ...defaults, fenceTtlSeconds: minimum })).toEqual([]);
    expect(validateFenceTtl({ ...defaults, fenceTtlSeconds: minimum - 1 })).toHaveLength(1);
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

  it("the message names retention, window, margin and the total", () => {
    const [problem] = validateFenceTtl({ ...defaults, fenceTtlSeconds: DAY });
    expect(problem).toContain("fence TTL 86400 s (1.00 days)");
    expect(problem).toContain(
      "queue retention 345600 s + maximum retry window 690 s + 1-day margin 86400 s = 432690 s",
    );
  });
});
