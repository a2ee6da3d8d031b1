/**
 * How many invocations one copy of the consumer runs at once. On Lambda's default compute, one:
 * an execution environment runs one invocation at a time. On Lambda Managed Instances the runtime
 * sets `AWS_LAMBDA_MAX_CONCURRENCY` (the function's PerExecutionEnvironmentMaxConcurrency, by
 * default 64 per vCPU for Node.js) and runs the handler in worker threads, each initialised once
 * with its own module state, and so its own pool: `AWS_LAMBDA_NODEJS_WORKER_COUNT` when the
 * deployment sets it, one per vCPU otherwise. A worker's share of the environment's concurrency
 * is what its pool must serve (docs/scaling.md, "Lambda Managed Instances").
 *
 * Pure apart from the environment and CPU count it is given.
 */
import { availableParallelism } from "node:os";

/** The environment variables the managed runtime sets (or the deployment sets for it). */
export const MANAGED_INSTANCE_ENV = Object.freeze({
  /** Set by Lambda on Managed Instances only: concurrent invocations per execution environment. */
  maxConcurrency: "AWS_LAMBDA_MAX_CONCURRENCY",
  /** Worker threads of the Node.js runtime per execution environment. @default one per vCPU */
  workerCount: "AWS_LAMBDA_NODEJS_WORKER_COUNT",
});

/** The concurrency of a managed-instance execution environment, as this worker sees it. */
export interface ManagedConcurrency {
  /** Concurrent invocations the execution environment may run (AWS_LAMBDA_MAX_CONCURRENCY). */
  readonly perEnvironment: number;
  /** Worker threads sharing them. */
  readonly workers: number;
  /**
   * This worker's share, and so its pool's size: ⌊perEnvironment ÷ workers⌋, at least 1. Rounded
   * down so the workers' pools together never exceed the environment's concurrency (the figure the
   * synth's connection budget counts); with the defaults (64 per vCPU, a worker per vCPU) it is
   * exact: 64.
   */
  readonly perWorker: number;
}

/**
 * The managed-instance concurrency the environment declares, or undefined on Lambda's default
 * compute (no `AWS_LAMBDA_MAX_CONCURRENCY`). Throws RangeError naming the variable when one is
 * set to something other than a positive whole number.
 */
export function managedConcurrency(
  env: NodeJS.ProcessEnv = process.env,
  cpus: () => number = availableParallelism,
): ManagedConcurrency | undefined {
  const perEnvironment = positiveWhole(env, MANAGED_INSTANCE_ENV.maxConcurrency);
  if (perEnvironment === undefined) return undefined;
  const workers = positiveWhole(env, MANAGED_INSTANCE_ENV.workerCount) ?? Math.max(1, cpus());
  return Object.freeze({
    perEnvironment,
    workers,
    perWorker: Math.max(1, Math.floor(perEnvironment / workers)),
  });
}

function positiveWhole(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw.trim() === "") return undefined;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1) {
    throw new RangeError(`${name} must be a positive whole number, got "${raw}"`);
  }
  return value;
}
