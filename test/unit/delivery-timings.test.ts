/**
 * Delivery timings validated together: the redrive count leaves room for the receives that run
 * nothing, yet gets a message to the backstop well within retention when the database is down;
 * visibility, time budget and retry window fit the function timeout and the retention.
 */
import { describe, expect, it } from "vitest";
import { CONSUMERS, type ConsumerDeployment, resolveDeliveryTimings } from "../../functions/consumers.ts";
import {
  DELIVERY_TIMING_DEFAULTS,
  type DeliveryTimings,
  defaultMaxReceiveCount,
  defaultRecordBudgetMs,
  defaultReturnReserveMs,
  describeDeliveryTimings,
  minimumMaxReceiveCount,
  receivesPerMessage,
  VISIBILITY_TO_TIMEOUT_RATIO,
  validateDeliveryTimings,
} from "../../shared/retry/delivery-timings.ts";
import { DEFAULT_RETRY_POLICY, maxDeliveryWindowSeconds } from "../../shared/retry/policy.ts";

const DAY = 86_400;
const awardPoints = CONSUMERS.find((c) => c.definition.name === "award-points") as ConsumerDeployment;
/** The reference consumer as functions/consumers.ts deploys it. */
const standard = resolveDeliveryTimings(awardPoints, DEFAULT_RETRY_POLICY);
/** The same on a FIFO queue. */
const fifo = resolveDeliveryTimings({ ...awardPoints, fifo: true }, DEFAULT_RETRY_POLICY);

function check(change: Partial<DeliveryTimings>, base: DeliveryTimings = standard): string[] {
  return validateDeliveryTimings({ ...base, ...change });
}

describe("the defaults", () => {
  it("are the named constants", () => {
    expect(DELIVERY_TIMING_DEFAULTS).toEqual({
      MAX_INTERRUPTIONS: 2,
      SPARE_RECEIVES: 10,
      FIFO_PREDECESSORS: 9,
      BACKSTOP_BEFORE_RETENTION_FRACTION: 0.5,
      VISIBILITY_TO_TIMEOUT_RATIO: 6,
    });
    expect(VISIBILITY_TO_TIMEOUT_RATIO).toBe(6);
  });

  it("of functions/consumers.ts resolve to these timings, and pass", () => {
    expect(standard).toEqual({
      retryPolicy: DEFAULT_RETRY_POLICY,
      maxInterruptions: 2,
      maxReceiveCount: 19,
      visibilityTimeoutSeconds: 180,
      functionTimeoutSeconds: 30,
      batchingWindowSeconds: 0,
      queueRetentionSeconds: 4 * DAY,
      fifo: false,
      recordBudgetMs: 10_000,
      returnReserveMs: 2_000,
      lockTimeoutMs: 5_000,
    });
    expect(validateDeliveryTimings(standard)).toEqual([]);
    expect(fifo).toEqual({ ...standard, fifo: true, maxReceiveCount: 100 });
    expect(validateDeliveryTimings(fifo)).toEqual([]);
  });

  it("worked numbers, standard: 5 + 2 + 2 = 9 receives, 9 + 10 = 19, 19 × 180 s = 3420 s to the backstop", () => {
    expect(receivesPerMessage(standard)).toBe(5 + 2 + 2);
    expect(minimumMaxReceiveCount(standard)).toBe(5 + 2 + 2 + 10);
    expect(defaultMaxReceiveCount(standard)).toBe(19);
    const described = describeDeliveryTimings(standard);
    expect(described).toEqual({
      receivesPerMessage: 9,
      minimumMaxReceiveCount: 19,
      maxReceiveCount: 19,
      outageSecondsToBackstop: 19 * 180,
      outageHoursToBackstop: 0.95,
      backstopDeadlineSeconds: 2 * DAY,
      // Delays at +20 %: 36 + 72 + 144 + 288 = 540 s; five attempts of 30 s: 150 s.
      retryWindowSeconds: 690,
      summary:
        "standard queue: up to 9 receives per message (5 attempts + 2 interruptions + 2); " +
        "maxReceiveCount 19 (minimum 19); with the database unreachable the backstop gets a message after " +
        "19 × 180 s = 3420 s (0.95 h), against a bound of 0.5 × the retention = 172800 s (48.00 h); " +
        "retry window 690 s of 345600 s retention",
    });
  });

  it("worked numbers, FIFO: 9 × (1 + 9) + 10 = 100, 100 × 180 s = 5 h to the backstop", () => {
    expect(receivesPerMessage(fifo)).toBe(9);
    expect(minimumMaxReceiveCount(fifo)).toBe(9 * 10 + 10);
    expect(describeDeliveryTimings(fifo)).toMatchObject({
      minimumMaxReceiveCount: 100,
      maxReceiveCount: 100,
      outageSecondsToBackstop: 18_000,
      outageHoursToBackstop: 5,
      backstopDeadlineSeconds: 172_800,
      retryWindowSeconds: 690,
    });
  });

  it("the time budget: a third (a tenth) of the timeout, at most 10 s (2 s), and the budget outlasts a lock wait", () => {
    const budgets = (lockTimeoutMs: number) =>
      [30, 900, 15, 3].map((t) => defaultRecordBudgetMs(t, lockTimeoutMs));
    // The lock wait + the reserve + 1 s sets the floor: 5000 + 1500 + 1000 for 15 s.
    expect(budgets(5000)).toEqual([10_000, 10_000, 7_500, 6_300]);
    expect(budgets(500)).toEqual([10_000, 10_000, 5_000, 1_800]);
    expect([30, 900, 15, 3].map(defaultReturnReserveMs)).toEqual([2_000, 2_000, 1_500, 300]);
  });

  it("a timeout under 5 s needs an explicit return reserve: its default is under 500 ms", () => {
    const short = (seconds: number) =>
      resolveDeliveryTimings(
        { ...awardPoints, functionTimeoutSeconds: seconds, lockTimeoutMs: 1000 },
        DEFAULT_RETRY_POLICY,
      );
    expect(validateDeliveryTimings(short(5))).toEqual([]);
    expect(validateDeliveryTimings(short(4))).toEqual([
      expect.stringMatching(/^returnReserveMs 400 must be/),
    ]);
    expect(validateDeliveryTimings({ ...short(4), returnReserveMs: 500 })).toEqual([]);
  });

  it("a deployment's own values override the defaults, and the visibility default includes the batching window", () => {
    const own = resolveDeliveryTimings(
      { ...awardPoints, maxReceiveCount: 25, batchingWindowSeconds: 20, maxInterruptions: 3 },
      DEFAULT_RETRY_POLICY,
    );
    expect(own).toMatchObject({
      maxReceiveCount: 25,
      batchingWindowSeconds: 20,
      maxInterruptions: 3,
      visibilityTimeoutSeconds: 200,
    });
    expect(validateDeliveryTimings(own)).toEqual([]);
    expect(
      resolveDeliveryTimings({ ...awardPoints, maxInterruptions: 3 }, DEFAULT_RETRY_POLICY).maxReceiveCount,
    ).toBe(5 + 3 + 2 + 10);
    expect(resolveDeliveryTimings(awardPoints, DEFAULT_RETRY_POLICY, 240).visibilityTimeoutSeconds).toBe(240);
  });
});

/** [what, refused just past the bound, accepted at it, the refusal's message]. */
type Case = readonly [string, Partial<DeliveryTimings>, Partial<DeliveryTimings>, RegExp];

const fourteenDays = { queueRetentionSeconds: 14 * DAY };

const cases: Record<string, readonly Case[]> = {
  "1. bounds": [
    [
      "maxInterruptions below 1",
      { maxInterruptions: 0 },
      { maxInterruptions: 1 },
      /^maxInterruptions must be a whole number 1–10, got 0/,
    ],
    [
      "maxInterruptions above 10",
      { maxInterruptions: 11, maxReceiveCount: 30 },
      { maxInterruptions: 10, maxReceiveCount: 27 },
      /got 11/,
    ],
    [
      "maxReceiveCount above SQS's 1000",
      { maxReceiveCount: 1001, ...fourteenDays },
      { maxReceiveCount: 1000, ...fourteenDays },
      /^maxReceiveCount must be a whole number 1–1000 \(SQS's redrive bounds\), got 1001/,
    ],
    ["a fractional maxReceiveCount", { maxReceiveCount: 19.5 }, { maxReceiveCount: 20 }, /got 19\.5/],
    [
      "a function timeout above Lambda's 900 s",
      { functionTimeoutSeconds: 901, visibilityTimeoutSeconds: 5406 },
      { functionTimeoutSeconds: 900, visibilityTimeoutSeconds: 5400 },
      /^function timeout must be 1–900 s \(Lambda's bounds\), got 901$/,
    ],
    [
      "a function timeout of 0",
      { functionTimeoutSeconds: 0 },
      {
        functionTimeoutSeconds: 1,
        visibilityTimeoutSeconds: 180,
        recordBudgetMs: 900,
        returnReserveMs: 500,
        lockTimeoutMs: 300,
      },
      /got 0$/,
    ],
    [
      "a retention below SQS's 60 s",
      { queueRetentionSeconds: 59 },
      { queueRetentionSeconds: 6840 },
      /^queue retention must be 60–1209600 s \(SQS's bounds\), got 59$/,
    ],
    [
      "a retention above SQS's 14 days",
      { queueRetentionSeconds: 14 * DAY + 1 },
      fourteenDays,
      /got 1209601$/,
    ],
    [
      "a batching window above 300 s",
      { batchingWindowSeconds: 301, visibilityTimeoutSeconds: 481 },
      { batchingWindowSeconds: 300, visibilityTimeoutSeconds: 480 },
      /^batching window must be a whole number 0–300 s .*got 301/,
    ],
    ["a negative batching window", { batchingWindowSeconds: -1 }, { batchingWindowSeconds: 0 }, /got -1/],
    [
      "a retry policy out of bounds",
      { retryPolicy: { ...DEFAULT_RETRY_POLICY, maxAttempts: 0 } },
      { retryPolicy: { ...DEFAULT_RETRY_POLICY, maxAttempts: 1 } },
      /^retry policy: maxAttempts must be an integer from 1 to 100, got 0/,
    ],
  ],
  "2. visibility": [
    [
      "a visibility timeout under 6 × the function timeout",
      { visibilityTimeoutSeconds: 179 },
      { visibilityTimeoutSeconds: 180 },
      /^visibility timeout 179 s must be a whole number at least 6 × the function timeout 30 s = 180 s \(AWS's guidance/,
    ],
    [
      "a visibility timeout under 6 × the timeout + the batching window",
      { batchingWindowSeconds: 20, visibilityTimeoutSeconds: 199 },
      { batchingWindowSeconds: 20, visibilityTimeoutSeconds: 200 },
      /^visibility timeout 199 s must be .* = 180 s plus the batching window 20 s, 200 s in all/,
    ],
    [
      "a fractional visibility timeout",
      { visibilityTimeoutSeconds: 180.5 },
      { visibilityTimeoutSeconds: 181 },
      /^visibility timeout 180\.5 s must be a whole number/,
    ],
  ],
  "3. receives that run nothing": [
    [
      "a standard redrive under 5 + 2 + 2 + 10",
      { maxReceiveCount: 18 },
      { maxReceiveCount: 19 },
      /^maxReceiveCount 18 must be at least maxAttempts 5 \+ maxInterruptions 2 \+ 2 = 9 receives per message \+ 10 spare receives = 19; otherwise a message that can still be retried reaches the backstop while the database is reachable/,
    ],
    [
      "the old maxAttempts + 3",
      { maxReceiveCount: 8 },
      { maxReceiveCount: 19 },
      /raise maxReceiveCount to 19/,
    ],
    [
      "a FIFO redrive under 9 × (1 + 9) + 10",
      { fifo: true, maxReceiveCount: 99 },
      { fifo: true, maxReceiveCount: 100 },
      /^maxReceiveCount 99 must be at least \(maxAttempts 5 \+ maxInterruptions 2 \+ 2 = 9 receives per message\) × \(1 \+ 9 FIFO predecessors\) \+ 10 spare receives = 100/,
    ],
  ],
  "4. the outage bound": [
    [
      "a redrive count the retention cannot hold",
      { maxReceiveCount: 961 },
      { maxReceiveCount: 960 },
      /^maxReceiveCount 961 × \(visibility timeout 180 s \+ batching window 0 s\) = 172980 s \(48\.05 h\) must not exceed 0\.5 × the queue retention 345600 s = 172800 s \(48\.00 h\); otherwise, with the database unreachable, retention could delete a message before the backstop got it; lower maxReceiveCount toward its minimum 19/,
    ],
    [
      "a retention too short for the default count",
      { queueRetentionSeconds: 6839 },
      { queueRetentionSeconds: 6840 },
      /^maxReceiveCount 19 × .* = 3420 s .* raise the queue retention to at least 6840 s \(1\.90 h\)$/,
    ],
    [
      "with a batching window",
      { batchingWindowSeconds: 10, visibilityTimeoutSeconds: 190, queueRetentionSeconds: 7599 },
      { batchingWindowSeconds: 10, visibilityTimeoutSeconds: 190, queueRetentionSeconds: 7600 },
      /^maxReceiveCount 19 × \(visibility timeout 190 s \+ batching window 10 s\) = 3800 s/,
    ],
  ],
  "5. the time budget": [
    [
      "a return reserve under 500 ms",
      { returnReserveMs: 499 },
      { returnReserveMs: 500 },
      /^returnReserveMs 499 must be a whole number at least 500 ms/,
    ],
    [
      "a record budget not above the reserve",
      { recordBudgetMs: 2000, lockTimeoutMs: 0 },
      { recordBudgetMs: 2001, lockTimeoutMs: 0 },
      /^recordBudgetMs 2000 must be a whole number above returnReserveMs 2000/,
    ],
    [
      "a record budget that a fence lock wait and the reserve fill",
      { recordBudgetMs: 7000 },
      { recordBudgetMs: 7001 },
      /^recordBudgetMs 7000 must exceed the fence lock timeout 5000 ms \+ returnReserveMs 2000 ms/,
    ],
    [
      "a record budget not below the timeout",
      { recordBudgetMs: 30_000 },
      { recordBudgetMs: 29_999 },
      /^recordBudgetMs 30000 must be below the function timeout 30 s = 30000 ms: no record could ever start/,
    ],
  ],
  "6. the retry window": [
    // 10 attempts, base 60 s: delays at +20 % sum to 17496 s, plus 10 × 30 s = 17796 s.
    [
      "a retention the retry window does not fit",
      { retryPolicy: { maxAttempts: 10, baseSeconds: 60, capSeconds: 3600 }, queueRetentionSeconds: 17_796 },
      { retryPolicy: { maxAttempts: 10, baseSeconds: 60, capSeconds: 3600 }, queueRetentionSeconds: 17_797 },
      /^retry window: backoff delays at their jitter maximum 17496 s \+ maxAttempts 10 × function timeout 30 s = 17796 s must be below the queue retention 17796 s; otherwise retention-aware retries would cut the policy short/,
    ],
  ],
};

describe.each(Object.entries(cases))("rule %s", (_, ruleCases) => {
  it.each(ruleCases)(
    "refuses %s just past the bound and accepts it at the bound",
    (_, refused, accepted, message) => {
      // The minimum count follows maxAttempts and maxInterruptions unless a case sets it.
      const base = (change: Partial<DeliveryTimings>): DeliveryTimings => {
        const merged = { ...standard, ...change };
        return "maxReceiveCount" in change
          ? merged
          : { ...merged, maxReceiveCount: defaultMaxReceiveCount(merged) };
      };
      const problems = validateDeliveryTimings(base(refused));
      expect(problems).toHaveLength(1);
      expect(problems[0]).toMatch(message);
      expect(validateDeliveryTimings(base(accepted))).toEqual([]);
    },
  );
});

describe("validateDeliveryTimings", () => {
  it("the 10-attempt policy of rule 6 has the window the test assumes", () => {
    const policy = { maxAttempts: 10, baseSeconds: 60, capSeconds: 3600 };
    expect(maxDeliveryWindowSeconds({ retryPolicy: policy, functionTimeoutSeconds: 30 })).toBe(17_796);
  });

  it("accepts SQS's 12 h visibility timeout and refuses a second more", () => {
    // 12 h receives fit the outage bound only at the smallest count (1 + 1 + 2 + 10 = 14) and 14
    // days' retention: 14 × 43200 s = 604800 s, exactly half of it; a second more breaks both.
    const twelveHours = {
      retryPolicy: { ...DEFAULT_RETRY_POLICY, maxAttempts: 1 },
      maxInterruptions: 1,
      maxReceiveCount: 14,
      ...fourteenDays,
    };
    expect(check({ ...twelveHours, visibilityTimeoutSeconds: 43_200 })).toEqual([]);
    expect(check({ ...twelveHours, visibilityTimeoutSeconds: 43_201 })).toEqual([
      "visibility timeout 43201 s exceeds SQS's 12 h limit (43200 s); lower the visibility timeout",
      expect.stringMatching(
        /^maxReceiveCount 14 × \(visibility timeout 43201 s \+ batching window 0 s\) = 604814 s/,
      ),
    ]);
  });

  it("refuses any batching window on a FIFO queue", () => {
    expect(
      check({ fifo: true, maxReceiveCount: 100, batchingWindowSeconds: 1, visibilityTimeoutSeconds: 181 }),
    ).toEqual([
      "batching window must be 0 on a FIFO queue (Lambda does not support one there), got 1 s; remove it",
    ]);
  });

  it("reports every malformed input together, and the rules only once the inputs are in bounds", () => {
    const problems = check({
      maxInterruptions: 0,
      maxReceiveCount: 0,
      functionTimeoutSeconds: 0,
      queueRetentionSeconds: 0,
      batchingWindowSeconds: 400,
    });
    expect(problems).toEqual([
      expect.stringMatching(/^maxInterruptions/),
      expect.stringMatching(/^maxReceiveCount must be/),
      expect.stringMatching(/^function timeout/),
      expect.stringMatching(/^queue retention/),
      expect.stringMatching(/^batching window/),
    ]);
  });

  it("reports every broken rule together", () => {
    const problems = check({
      maxReceiveCount: 5,
      visibilityTimeoutSeconds: 100,
      queueRetentionSeconds: 600,
      recordBudgetMs: 100,
      returnReserveMs: 100,
    });
    expect(problems).toEqual([
      expect.stringMatching(/^visibility timeout 100 s/),
      expect.stringMatching(/^maxReceiveCount 5 must be at least/),
      expect.stringMatching(/^maxReceiveCount 5 × \(visibility timeout 100 s/),
      expect.stringMatching(/^returnReserveMs 100/),
      expect.stringMatching(/^recordBudgetMs 100/),
      expect.stringMatching(/^retry window: .* = 690 s must be below the queue retention 600 s/),
    ]);
  });

  it("does not advise lowering a count already at its minimum", () => {
    const [problem] = check({
      fifo: true,
      maxReceiveCount: 100,
      functionTimeoutSeconds: 900,
      visibilityTimeoutSeconds: 5400,
      recordBudgetMs: 10_000,
    });
    expect(problem).toMatch(
      /^maxReceiveCount 100 × \(visibility timeout 5400 s \+ batching window 0 s\) = 540000 s/,
    );
    expect(problem).not.toMatch(/lower maxReceiveCount/);
    expect(problem).toMatch(/raise the queue retention to at least 1080000 s \(12\.50 days\)$/);
  });
});
