/**
 * Retry timing from the environment, for local use (the default retry policy is for production, where
 * a 30-second base is right; on a laptop a demo should retry in seconds). Validated like every
 * other configuration: a bad value is refused at start-up, naming the variable.
 */
import { ConfigurationError } from "../errors/configuration.ts";
import { type RetryPolicy, validateRetryPolicy } from "../retry/policy.ts";

/** The variables, by policy field. */
export const RETRY_ENV = Object.freeze({
  baseSeconds: "JOBFENCE_RETRY_BASE_SECONDS",
  capSeconds: "JOBFENCE_RETRY_CAP_SECONDS",
  maxAttempts: "JOBFENCE_MAX_ATTEMPTS",
} satisfies Record<keyof RetryPolicy, string>);

/** `base` with whatever the environment sets applied; throws ConfigurationError listing every problem. */
export function retryPolicyFromEnv(base: RetryPolicy, env: NodeJS.ProcessEnv = process.env): RetryPolicy {
  const problems: string[] = [];
  const policy: Record<keyof RetryPolicy, number> = { ...base };
  for (const [field, variable] of Object.entries(RETRY_ENV) as Array<[keyof RetryPolicy, string]>) {
    const text = env[variable];
    if (text === undefined || text === "") continue;
    const value = Number(text);
    if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(value)) {
      problems.push(`${variable}: must be a whole number, got "${text}"`);
    } else {
      policy[field] = value;
    }
  }
  if (problems.length === 0)
    problems.push(...validateRetryPolicy(policy).map((p) => `${describe(env)}: ${p}`));
  if (problems.length > 0) throw new ConfigurationError("retry environment", problems);
  return Object.freeze(policy);
}

function describe(env: NodeJS.ProcessEnv): string {
  const set = Object.values(RETRY_ENV).filter((v) => env[v] !== undefined && env[v] !== "");
  return set.length > 0 ? set.join(", ") : "retry policy";
}
