/**
 * The Lambda runtime of a jobfence function: Node 22 or Node 24 (docs/deploy.md, Runtimes), and
 * the esbuild target its bundle is built for. Any other runtime is refused at synth: the code is
 * ESM for Node ≥ 22, and the harness's start-up checks only those two.
 */
import type * as lambda from "aws-cdk-lib/aws-lambda";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { SUPPORTED_RUNTIMES } from "../defaults.ts";

/** Why `runtime` is refused, or nothing when it is Node 22 or Node 24. */
export function runtimeProblems(runtime: lambda.Runtime): string[] {
  if (Object.hasOwn(SUPPORTED_RUNTIMES, runtime.name)) return [];
  return [
    `runtime ${runtime.name} is not supported: choose Runtime.NODEJS_22_X or Runtime.NODEJS_24_X ` +
      `(${Object.keys(SUPPORTED_RUNTIMES).join(", ")})`,
  ];
}

/** The esbuild target of `runtime` (`node22`, `node24`); any other runtime is refused. */
export function esbuildTarget(runtime: lambda.Runtime): string {
  const target = SUPPORTED_RUNTIMES[runtime.name];
  if (target === undefined) throw new ConfigurationError("Lambda runtime", runtimeProblems(runtime));
  return target;
}
