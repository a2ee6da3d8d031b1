/**
 * A consumer function on Lambda Managed Instances: it runs on a capacity provider's instances,
 * many invocations at once per execution environment, with timeouts up to 90 minutes. What that
 * changes elsewhere is decided where it applies: the delivery timings accept the longer timeout
 * (shared/retry/delivery-timings.ts), the connection budget counts execution environments × their
 * concurrency (../connection-budget.ts), and the consumer sizes its pools from the concurrency
 * Lambda gives it at run time (shared/invocation/concurrency.ts), so no pool size is deployed.
 */
import type * as lambda from "aws-cdk-lib/aws-lambda";
import type { ManagedInstancesConnections } from "../connection-budget.ts";

/** How a JobConsumer runs on Lambda Managed Instances. */
export interface ManagedInstancesProps extends ManagedInstancesConnections {
  /** The capacity provider (its VPC, instance types and scaling), made here or imported. */
  readonly capacityProvider: lambda.ICapacityProvider;
}

/** Lambda's bound on a function's execution environments (FunctionScalingConfig). */
const MAX_EXECUTION_ENVIRONMENTS = 15_000;

/** Every problem with `props`, one line each; empty when fine (or when not on Managed Instances). */
export function managedInstancesProblems(props: ManagedInstancesProps | undefined): string[] {
  if (props === undefined) return [];
  const problems: string[] = [];
  const { perExecutionEnvironmentMaxConcurrency: perEnvironment, maxExecutionEnvironments: environments } =
    props;
  if (!Number.isInteger(perEnvironment) || perEnvironment < 1) {
    problems.push(
      `managedInstances.perExecutionEnvironmentMaxConcurrency must be a whole number, at least 1, got ${perEnvironment}`,
    );
  }
  if (!Number.isInteger(environments) || environments < 1 || environments > MAX_EXECUTION_ENVIRONMENTS) {
    problems.push(
      `managedInstances.maxExecutionEnvironments must be a whole number 1–${MAX_EXECUTION_ENVIRONMENTS} ` +
        `(Lambda's bounds), got ${environments}: it bounds the connections the consumer can hold`,
    );
  }
  return problems;
}

/**
 * Puts `fn` on the capacity provider with the concurrency and the environment cap the connection
 * budget counted. Written on the function's resource, as `CapacityProvider.addFunction` does, so an
 * imported provider works too.
 */
export function runOnManagedInstances(fn: lambda.Function, props: ManagedInstancesProps): void {
  const resource = fn.node.defaultChild as lambda.CfnFunction;
  resource.capacityProviderConfig = {
    lambdaManagedInstancesCapacityProviderConfig: {
      capacityProviderArn: props.capacityProvider.capacityProviderArn,
      perExecutionEnvironmentMaxConcurrency: props.perExecutionEnvironmentMaxConcurrency,
    },
  };
  resource.functionScalingConfig = { maxExecutionEnvironments: props.maxExecutionEnvironments };
  resource.publishToLatestPublished = true;
}
