/**
 * Lambda Managed Instances, the pure parts: the concurrency the environment declares, the pool
 * size it gives a worker, and the function timeouts up to 90 minutes the timings accept there
 * (and only there), at start-up as at synth.
 */
import { describe, expect, it } from "vitest";
import { CONSUMERS, type ConsumerDeployment, resolveDeliveryTimings } from "../../functions/consumers.ts";
import { checkConsumer, poolSizeFor } from "../../shared/config/consumer-checks.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { validateFenceTtl } from "../../shared/fence/ttl.ts";
import { MANAGED_INSTANCE_ENV, managedConcurrency } from "../../shared/invocation/concurrency.ts";
import {
  FUNCTION_TIMEOUT_LIMITS,
  functionTimeoutProblem,
  validateDeliveryTimings,
} from "../../shared/retry/delivery-timings.ts";
import { DEFAULT_RETRY_POLICY } from "../../shared/retry/policy.ts";

const DAY = 86_400;
const env = (maxConcurrency?: string, workers?: string): NodeJS.ProcessEnv => ({
  ...(maxConcurrency === undefined ? {} : { [MANAGED_INSTANCE_ENV.maxConcurrency]: maxConcurrency }),
  ...(workers === undefined ? {} : { [MANAGED_INSTANCE_ENV.workerCount]: workers }),
});
const twoCpus = () => 2;

describe("managedConcurrency", () => {
  it("is undefined on Lambda's default compute (no AWS_LAMBDA_MAX_CONCURRENCY)", () => {
    expect(managedConcurrency(env(), twoCpus)).toBeUndefined();
    expect(managedConcurrency(env(""), twoCpus)).toBeUndefined();
  });

  it("gives each worker thread its share, rounded down, at least one", () => {
    expect(managedConcurrency(env("64", "1"), twoCpus)).toEqual({
      perEnvironment: 64,
      workers: 1,
      perWorker: 64,
    });
    // The runtime's default: a worker per vCPU, 64 invocations per vCPU.
    expect(managedConcurrency(env("128"), twoCpus)).toEqual({
      perEnvironment: 128,
      workers: 2,
      perWorker: 64,
    });
    expect(managedConcurrency(env("10", "3"), twoCpus)?.perWorker).toBe(3);
    expect(managedConcurrency(env("2", "4"), twoCpus)?.perWorker).toBe(1);
  });

  it("refuses a value that is not a positive whole number, naming the variable", () => {
    for (const bad of ["0", "-4", "2.5", "many"]) {
      expect(() => managedConcurrency(env(bad), twoCpus)).toThrow(
        new RangeError(`AWS_LAMBDA_MAX_CONCURRENCY must be a positive whole number, got "${bad}"`),
      );
    }
    expect(() => managedConcurrency(env("64", "0"), twoCpus)).toThrow(/AWS_LAMBDA_NODEJS_WORKER_COUNT/);
  });
});

describe("the consumer's pool", () => {
  const config = { databaseUrl: "postgres://u@db/app", opsBusName: "ops" };

  it("is 2 on Lambda's default compute, the worker's share on Managed Instances, the configuration's when set", () => {
    expect(poolSizeFor(undefined, undefined)).toBe(2);
    expect(poolSizeFor(undefined, managedConcurrency(env("64", "1")))).toBe(64);
    expect(poolSizeFor(8, managedConcurrency(env("64", "1")))).toBe(8);
    expect(checkConsumer({ name: "award-points", config, env: env() }).config.poolMax).toBe(2);
    const managed = checkConsumer({ name: "award-points", config, env: env("48", "2") });
    expect(managed.config.poolMax).toBe(24);
    expect(managed.managed).toEqual({ perEnvironment: 48, workers: 2, perWorker: 24 });
    expect(
      checkConsumer({ name: "award-points", config: { ...config, poolMax: 5 }, env: env("48") }).config
        .poolMax,
    ).toBe(5);
  });

  it("refuses an unusable AWS_LAMBDA_MAX_CONCURRENCY at start-up, with the other problems", () => {
    let error: unknown;
    try {
      checkConsumer({ name: "award-points", config: { ...config, poolMax: 0 }, env: env("lots") });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigurationError);
    const problems = (error as ConfigurationError).problems.join("\n");
    expect(problems).toMatch(/AWS_LAMBDA_MAX_CONCURRENCY must be a positive whole number, got "lots"/);
    expect(problems).toMatch(/poolMax/);
  });
});

describe("function timeouts up to 90 minutes", () => {
  const awardPoints = CONSUMERS.find((c) => c.definition.name === "award-points") as ConsumerDeployment;
  /**
   * A 90-minute consumer that passes every other rule: 6 × 5400 s visibility, and the outage rule
   * (maxReceiveCount × visibility within half the retention) met by 14 days' retention and one
   * interruption fewer (18 × 32,400 s = 6.75 days).
   */
  const ninetyMinutes = {
    ...resolveDeliveryTimings(
      { ...awardPoints, functionTimeoutSeconds: 5400, maxInterruptions: 1, queueRetentionSeconds: 14 * DAY },
      DEFAULT_RETRY_POLICY,
    ),
  };

  it("are Lambda's bounds on each compute", () => {
    expect(FUNCTION_TIMEOUT_LIMITS).toEqual({
      default: { min: 1, max: 900 },
      managedInstances: { min: 1, max: 5400 },
    });
    expect(functionTimeoutProblem(900)).toBeUndefined();
    expect(functionTimeoutProblem(5400, true)).toBeUndefined();
    expect(functionTimeoutProblem(901)).toBe("function timeout must be 1–900 s (Lambda's bounds), got 901");
    expect(functionTimeoutProblem(5401, true)).toBe(
      "function timeout must be 1–5400 s (Lambda Managed Instances' bounds), got 5401",
    );
  });

  it("pass the delivery timings on Managed Instances only", () => {
    expect(ninetyMinutes.visibilityTimeoutSeconds).toBe(32_400);
    expect(validateDeliveryTimings({ ...ninetyMinutes, managedInstances: true })).toEqual([]);
    expect(validateDeliveryTimings(ninetyMinutes)).toEqual([
      "function timeout must be 1–900 s (Lambda's bounds), got 5400",
    ]);
    expect(
      validateDeliveryTimings({ ...ninetyMinutes, functionTimeoutSeconds: 5401, managedInstances: true }),
    ).toEqual(["function timeout must be 1–5400 s (Lambda Managed Instances' bounds), got 5401"]);
  });

  it("with the default redrive count, a 90-minute timeout is refused with the arithmetic and what to change", () => {
    const defaults = resolveDeliveryTimings(
      { ...awardPoints, functionTimeoutSeconds: 5400, queueRetentionSeconds: 14 * DAY },
      DEFAULT_RETRY_POLICY,
    );
    expect(validateDeliveryTimings({ ...defaults, managedInstances: true })).toEqual([
      expect.stringMatching(
        /^maxReceiveCount 19 × \(visibility timeout 32400 s \+ batching window 0 s\) = 615600 s/,
      ),
    ]);
  });

  it("pass the fence TTL's check on Managed Instances only", () => {
    const inputs = {
      queueRetentionSeconds: 4 * DAY,
      retryPolicy: DEFAULT_RETRY_POLICY,
      functionTimeoutSeconds: 5400,
      fenceTtlSeconds: 21 * DAY,
      fifo: false,
    };
    expect(validateFenceTtl({ ...inputs, managedInstances: true })).toEqual([]);
    expect(validateFenceTtl(inputs)).toContain(
      "function timeout must be 1–900 s (Lambda's bounds), got 5400",
    );
  });

  it("pass the consumer's start-up check when the environment is a managed instance's", () => {
    const config = {
      databaseUrl: "postgres://u@db/app",
      opsBusName: "ops",
      functionTimeoutSeconds: 5400,
      maxInterruptions: 1,
      queueRetentionSeconds: 14 * DAY,
      fifo: false,
      fenceTtlSeconds: 31 * DAY,
      maxReceiveCount: ninetyMinutes.maxReceiveCount,
      visibilityTimeoutSeconds: ninetyMinutes.visibilityTimeoutSeconds,
    };
    expect(
      checkConsumer({ name: "award-points", config, env: env("64", "1") }).config.functionTimeoutSeconds,
    ).toBe(5400);
    expect(() => checkConsumer({ name: "award-points", config, env: env() })).toThrow(
      /function timeout must be 1–900 s \(Lambda's bounds\), got 5400/,
    );
  });
});
