import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import {
  DEFAULT_RETRY_POLICY,
  isLastAttempt,
  JITTER,
  maxRetryWindowSeconds,
  type RetryOverride,
  type RetryPolicy,
  resolveRetryPolicy,
  retryDelaySeconds,
  SQS_MAX_VISIBILITY_SECONDS,
  validateRetryPolicy,
} from "../../shared/retry/policy.ts";

/** The error `fn` throws; fails the test when it returns. */
function thrownBy(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error("expected a throw");
}

/** The ConfigurationError `fn` throws; fails the test when it throws anything else or nothing. */
function configurationErrorOf(fn: () => unknown): ConfigurationError {
  const error = thrownBy(fn);
  expect(error).toBeInstanceOf(ConfigurationError);
  return error as ConfigurationError;
}

const noJitter = () => 0.5;
const lowest = () => 0;
const almostOne = () => 0.999_999_9;

/** Policies that pass validation: cap within SQS's limit, base at most the cap, up to 100 attempts. */
const validPolicy: fc.Arbitrary<RetryPolicy> = fc.oneof(
  fc.constant(DEFAULT_RETRY_POLICY),
  fc.integer({ min: 1, max: SQS_MAX_VISIBILITY_SECONDS }).chain((capSeconds) =>
    fc.record({
      maxAttempts: fc.integer({ min: 1, max: 100 }),
      baseSeconds: fc.integer({ min: 1, max: capSeconds }),
      capSeconds: fc.constant(capSeconds),
    }),
  ),
);

const unitInterval = fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true });

describe("DEFAULT_RETRY_POLICY", () => {
  it("is 5 attempts, base 30 s, cap 1 h", () => {
    expect(DEFAULT_RETRY_POLICY).toEqual({ maxAttempts: 5, baseSeconds: 30, capSeconds: 3600 });
    expect(Object.isFrozen(DEFAULT_RETRY_POLICY)).toBe(true);
  });

  it("jitters by ±20 % and clamps to SQS's 12 h visibility limit", () => {
    expect(JITTER).toEqual({ min: 0.8, max: 1.2 });
    expect(SQS_MAX_VISIBILITY_SECONDS).toBe(43_200);
  });

  it("is itself a valid policy", () => {
    expect(validateRetryPolicy(DEFAULT_RETRY_POLICY)).toEqual([]);
  });
});

describe("retryDelaySeconds", () => {
  it.each([
    [1, 30],
    [2, 60],
    [3, 120],
    [4, 240],
    [5, 480],
    [6, 960],
    [7, 1920],
  ])("with the defaults and no jitter, attempt %i waits %i s", (attempt, expected) => {
    expect(retryDelaySeconds(attempt, DEFAULT_RETRY_POLICY, noJitter)).toBe(expected);
  });

  it.each([
    [1, 24],
    [2, 48],
    [3, 96],
    [4, 192],
  ])("random = 0 gives 80 %%: attempt %i waits %i s", (attempt, expected) => {
    expect(retryDelaySeconds(attempt, DEFAULT_RETRY_POLICY, lowest)).toBe(expected);
  });

  it.each([
    [1, 36],
    [2, 72],
    [3, 144],
    [4, 288],
  ])("random just below 1 gives about 120 %%: attempt %i waits %i s", (attempt, expected) => {
    expect(retryDelaySeconds(attempt, DEFAULT_RETRY_POLICY, almostOne)).toBe(expected);
  });

  it.each([8, 9, 20, 200, 1100, 100_000])("attempt %i is capped at 1 h before jitter", (attempt) => {
    expect(retryDelaySeconds(attempt, DEFAULT_RETRY_POLICY, noJitter)).toBe(3600);
    expect(retryDelaySeconds(attempt, DEFAULT_RETRY_POLICY, lowest)).toBe(2880);
    expect(retryDelaySeconds(attempt, DEFAULT_RETRY_POLICY, almostOne)).toBe(4320);
  });

  it("clamps a jittered delay above 12 h to 43 200 s", () => {
    const policy: RetryPolicy = { maxAttempts: 5, baseSeconds: 40_000, capSeconds: 43_200 };
    expect(retryDelaySeconds(1, policy, almostOne)).toBe(43_200);
    expect(retryDelaySeconds(1, policy, noJitter)).toBe(40_000);
    expect(retryDelaySeconds(3, policy, noJitter)).toBe(43_200);
  });

  it("is at least 1 s", () => {
    const tiny: RetryPolicy = { maxAttempts: 5, baseSeconds: 1, capSeconds: 1 };
    expect(retryDelaySeconds(1, tiny, lowest)).toBe(1);
    const fractional: RetryPolicy = { maxAttempts: 5, baseSeconds: 0.5, capSeconds: 1 };
    expect(retryDelaySeconds(1, fractional, lowest)).toBe(1);
  });

  it("rounds to whole seconds", () => {
    // 30 · (0.8 + 0.4 · 0.3) = 27.6
    expect(retryDelaySeconds(1, DEFAULT_RETRY_POLICY, () => 0.3)).toBe(28);
    // 60 · (0.8 + 0.4 · 0.1) = 50.4
    expect(retryDelaySeconds(2, DEFAULT_RETRY_POLICY, () => 0.1)).toBe(50);
  });

  it("keeps a random source outside [0, 1) within the jitter bounds", () => {
    expect(retryDelaySeconds(1, DEFAULT_RETRY_POLICY, () => -3)).toBe(24);
    expect(retryDelaySeconds(1, DEFAULT_RETRY_POLICY, () => 7)).toBe(36);
  });

  it("calls the random source once per delay", () => {
    let calls = 0;
    retryDelaySeconds(3, DEFAULT_RETRY_POLICY, () => {
      calls++;
      return 0.5;
    });
    expect(calls).toBe(1);
  });

  it("uses Math.random when no source is given, staying within the jitter band", () => {
    for (let i = 0; i < 50; i++) {
      const delay = retryDelaySeconds(1, DEFAULT_RETRY_POLICY);
      expect(delay).toBeGreaterThanOrEqual(24);
      expect(delay).toBeLessThanOrEqual(36);
    }
  });

  it.each([0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY])(
    "refuses attempt %s with a RangeError",
    (attempt) => {
      expect(() => retryDelaySeconds(attempt, DEFAULT_RETRY_POLICY, noJitter)).toThrow(RangeError);
    },
  );

  it("property: an integer from 1 to 43 200 within ±20 % of min(cap, base · 2^(n−1)), up to rounding", () => {
    fc.assert(
      fc.property(validPolicy, fc.integer({ min: 1, max: 200 }), unitInterval, (policy, attempt, u) => {
        expect(validateRetryPolicy(policy)).toEqual([]);
        const delay = retryDelaySeconds(attempt, policy, () => u);
        expect(Number.isInteger(delay)).toBe(true);
        expect(delay).toBeGreaterThanOrEqual(1);
        expect(delay).toBeLessThanOrEqual(SQS_MAX_VISIBILITY_SECONDS);
        const exponential = Math.min(policy.capSeconds, policy.baseSeconds * 2 ** (attempt - 1));
        const epsilon = 1e-6;
        expect(delay).toBeGreaterThanOrEqual(
          Math.min(SQS_MAX_VISIBILITY_SECONDS, JITTER.min * exponential - 0.5 - epsilon),
        );
        expect(delay).toBeLessThanOrEqual(JITTER.max * exponential + 0.5 + epsilon);
      }),
      { numRuns: 1000 },
    );
  });

  it("property: for a fixed random value, the delay never decreases as attempts grow", () => {
    fc.assert(
      fc.property(
        validPolicy,
        fc.integer({ min: 1, max: 200 }),
        fc.integer({ min: 1, max: 200 }),
        unitInterval,
        (policy, a, b, u) => {
          const [earlier, later] = a <= b ? [a, b] : [b, a];
          expect(retryDelaySeconds(earlier, policy, () => u)).toBeLessThanOrEqual(
            retryDelaySeconds(later, policy, () => u),
          );
        },
      ),
      { numRuns: 1000 },
    );
  });

  it("property: every attempt from 1 to 200 in order gives a non-decreasing sequence", () => {
    fc.assert(
      fc.property(validPolicy, unitInterval, (policy, u) => {
        let previous = 0;
        for (let attempt = 1; attempt <= 200; attempt++) {
          const delay = retryDelaySeconds(attempt, policy, () => u);
          expect(delay).toBeGreaterThanOrEqual(previous);
          previous = delay;
        }
      }),
      { numRuns: 200 },
    );
  });
});

describe("isLastAttempt", () => {
  it.each([
    [1, false],
    [4, false],
    [5, true],
    [6, true],
  ])("with the defaults (5 attempts), attempt %i is last: %s", (attempt, expected) => {
    expect(isLastAttempt(attempt, DEFAULT_RETRY_POLICY)).toBe(expected);
  });

  it("with a single attempt, the first failure is the last", () => {
    expect(isLastAttempt(1, { maxAttempts: 1, baseSeconds: 30, capSeconds: 3600 })).toBe(true);
  });

  it("property: is last exactly when attempt ≥ maxAttempts", () => {
    fc.assert(
      fc.property(validPolicy, fc.integer({ min: 1, max: 1000 }), (policy, attempt) => {
        expect(isLastAttempt(attempt, policy)).toBe(attempt >= policy.maxAttempts);
      }),
      { numRuns: 500 },
    );
  });
});

describe("resolveRetryPolicy", () => {
  it("without an override, is the default policy", () => {
    const policy = resolveRetryPolicy();
    expect(policy).toEqual(DEFAULT_RETRY_POLICY);
    expect(Object.isFrozen(policy)).toBe(true);
  });

  it("applies an override with a rationale over the defaults", () => {
    const policy = resolveRetryPolicy({
      maxAttempts: 8,
      capSeconds: 7200,
      rationale: "the partner API rate-limits for up to two hours",
    });
    expect(policy).toEqual({ maxAttempts: 8, baseSeconds: 30, capSeconds: 7200 });
    expect(Object.isFrozen(policy)).toBe(true);
  });

  it("an override of no fields but with a rationale is the base policy", () => {
    expect(resolveRetryPolicy({ rationale: "documented: same as default" })).toEqual(DEFAULT_RETRY_POLICY);
  });

  it("applies an override over a given base policy", () => {
    const base: RetryPolicy = { maxAttempts: 3, baseSeconds: 10, capSeconds: 100 };
    expect(resolveRetryPolicy({ baseSeconds: 20, rationale: "slower upstream" }, base)).toEqual({
      maxAttempts: 3,
      baseSeconds: 20,
      capSeconds: 100,
    });
    expect(resolveRetryPolicy(undefined, base)).toEqual(base);
  });

  it.each(["", " ", "   \t\n  "])("refuses a blank rationale %j with a ConfigurationError", (rationale) => {
    const error = configurationErrorOf(() => resolveRetryPolicy({ maxAttempts: 3, rationale }));
    expect(error.problems).toHaveLength(1);
    expect(error.problems[0]).toMatch(/rationale/);
  });

  it("refuses an override whose rationale is missing at run time (untyped caller)", () => {
    const untyped = { maxAttempts: 3 } as unknown as RetryOverride;
    const error = configurationErrorOf(() => resolveRetryPolicy(untyped));
    expect(error.problems).toHaveLength(1);
    expect(error.problems[0]).toMatch(/rationale/);
  });

  it("reports every invalid field together in one error", () => {
    const error = configurationErrorOf(() =>
      resolveRetryPolicy({ maxAttempts: 0, baseSeconds: -1, capSeconds: 50_000, rationale: "  " }),
    );
    expect(error.problems).toHaveLength(4);
    expect(error.problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/rationale/),
        expect.stringMatching(/^maxAttempts/),
        expect.stringMatching(/^baseSeconds/),
        expect.stringMatching(/^capSeconds/),
      ]),
    );
    for (const problem of error.problems) expect(error.message).toContain(problem);
  });

  it("refuses an override that makes the cap lower than the base", () => {
    const error = configurationErrorOf(() => resolveRetryPolicy({ capSeconds: 10, rationale: "quick" }));
    expect(error.problems).toHaveLength(1);
    expect(error.problems[0]).toMatch(/capSeconds/);
  });

  it("property: any valid override with a rationale resolves to exactly the overridden fields", () => {
    fc.assert(
      fc.property(validPolicy, (policy) => {
        const resolved = resolveRetryPolicy({ ...policy, rationale: "because" });
        expect(resolved).toEqual(policy);
      }),
      { numRuns: 300 },
    );
  });
});

describe("validateRetryPolicy", () => {
  const valid = DEFAULT_RETRY_POLICY;

  it.each<[string, Partial<RetryPolicy>, RegExp]>([
    ["maxAttempts 0", { maxAttempts: 0 }, /^maxAttempts/],
    ["maxAttempts -1", { maxAttempts: -1 }, /^maxAttempts/],
    ["maxAttempts 101", { maxAttempts: 101 }, /^maxAttempts/],
    ["maxAttempts 2.5", { maxAttempts: 2.5 }, /^maxAttempts/],
    ["maxAttempts NaN", { maxAttempts: Number.NaN }, /^maxAttempts/],
    ["baseSeconds 0", { baseSeconds: 0 }, /^baseSeconds/],
    ["baseSeconds -30", { baseSeconds: -30 }, /^baseSeconds/],
    ["baseSeconds 1.5", { baseSeconds: 1.5 }, /^baseSeconds/],
    ["baseSeconds Infinity", { baseSeconds: Number.POSITIVE_INFINITY }, /^baseSeconds/],
    ["capSeconds 0", { capSeconds: 0 }, /^capSeconds/],
    ["capSeconds 43 201", { capSeconds: 43_201 }, /^capSeconds/],
    ["capSeconds 100.5", { capSeconds: 100.5 }, /^capSeconds/],
    ["capSeconds NaN", { capSeconds: Number.NaN }, /^capSeconds/],
    ["capSeconds below baseSeconds", { baseSeconds: 60, capSeconds: 59 }, /^capSeconds/],
  ])("reports %s as one problem", (_label, change, pattern) => {
    const problems = validateRetryPolicy({ ...valid, ...change });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(pattern);
  });

  it.each<[string, RetryPolicy]>([
    ["the defaults", DEFAULT_RETRY_POLICY],
    ["one attempt", { maxAttempts: 1, baseSeconds: 1, capSeconds: 1 }],
    ["100 attempts", { maxAttempts: 100, baseSeconds: 30, capSeconds: 3600 }],
    ["cap at SQS's limit", { maxAttempts: 5, baseSeconds: 30, capSeconds: 43_200 }],
    ["base equal to the cap", { maxAttempts: 5, baseSeconds: 600, capSeconds: 600 }],
  ])("accepts %s", (_label, policy) => {
    expect(validateRetryPolicy(policy)).toEqual([]);
  });

  it("reports every broken field at once", () => {
    const problems = validateRetryPolicy({ maxAttempts: 1000, baseSeconds: 0, capSeconds: 0 });
    expect(problems).toHaveLength(3);
  });
});

describe("maxRetryWindowSeconds", () => {
  it("for the defaults is the sum of the four delays at +20 %: 36 + 72 + 144 + 288 = 540", () => {
    expect(maxRetryWindowSeconds(DEFAULT_RETRY_POLICY)).toBe(540);
  });

  it("is 0 when there is a single attempt (no retries)", () => {
    expect(maxRetryWindowSeconds({ maxAttempts: 1, baseSeconds: 30, capSeconds: 3600 })).toBe(0);
  });

  it("applies the cap to each delay", () => {
    // 10·1.2 = 12, then min(15, 20)·1.2 = 18.
    expect(maxRetryWindowSeconds({ maxAttempts: 3, baseSeconds: 10, capSeconds: 15 })).toBe(30);
  });

  it("property: bounds every sequence of jittered delays of a policy", () => {
    fc.assert(
      fc.property(validPolicy, unitInterval, (policy, u) => {
        let total = 0;
        for (let attempt = 1; attempt < policy.maxAttempts; attempt++) {
          total += retryDelaySeconds(attempt, policy, () => u);
        }
        expect(total).toBeLessThanOrEqual(maxRetryWindowSeconds(policy));
      }),
      { numRuns: 300 },
    );
  });
});
