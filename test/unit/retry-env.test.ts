import { describe, expect, it } from "vitest";
import { retryPolicyFromEnv } from "../../shared/config/retry-env.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { DEFAULT_RETRY_POLICY } from "../../shared/retry/policy.ts";

describe("retry timing from the environment", () => {
  it("keeps the base policy when nothing is set", () => {
    expect(retryPolicyFromEnv(DEFAULT_RETRY_POLICY, {})).toEqual(DEFAULT_RETRY_POLICY);
  });

  it("applies what is set", () => {
    expect(
      retryPolicyFromEnv(DEFAULT_RETRY_POLICY, {
        JOBFENCE_RETRY_BASE_SECONDS: "2",
        JOBFENCE_RETRY_CAP_SECONDS: "10",
        JOBFENCE_MAX_ATTEMPTS: "4",
      }),
    ).toEqual({ baseSeconds: 2, capSeconds: 10, maxAttempts: 4 });
  });

  it.each([
    [
      "a non-number",
      { JOBFENCE_RETRY_BASE_SECONDS: "fast" },
      /JOBFENCE_RETRY_BASE_SECONDS: must be a whole number/,
    ],
    ["a fraction", { JOBFENCE_MAX_ATTEMPTS: "2.5" }, /JOBFENCE_MAX_ATTEMPTS: must be a whole number/],
    [
      "zero attempts",
      { JOBFENCE_MAX_ATTEMPTS: "0" },
      /JOBFENCE_MAX_ATTEMPTS: maxAttempts must be an integer from 1/,
    ],
    [
      "a cap below the base",
      { JOBFENCE_RETRY_BASE_SECONDS: "60", JOBFENCE_RETRY_CAP_SECONDS: "10" },
      /capSeconds \(10\) must not be below baseSeconds \(60\)/,
    ],
    ["a cap above SQS's 12 h", { JOBFENCE_RETRY_CAP_SECONDS: "50000" }, /12 h limit/],
  ])("refuses %s, naming the variable", (_, env, message) => {
    expect(() => retryPolicyFromEnv(DEFAULT_RETRY_POLICY, env)).toThrow(ConfigurationError);
    expect(() => retryPolicyFromEnv(DEFAULT_RETRY_POLICY, env)).toThrow(message);
  });
});
