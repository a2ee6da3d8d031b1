/**
 * A JobConsumer on Lambda Managed Instances: the function runs on the capacity provider with the
 * concurrency and environment cap given, deploys no pool size (each worker sizes its own from the
 * concurrency Lambda gives it), its timeout may reach 90 minutes, and the connection budget counts
 * execution environments × their concurrency, refusing the mode without a declared budget.
 */
import { Template } from "aws-cdk-lib/assertions";
import * as lambda from "aws-cdk-lib/aws-lambda";
import { beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { CONSUMERS, type ConsumerDeployment } from "../../functions/consumers.ts";
import { validateConnectionBudget } from "../../infra/connection-budget.ts";
import { JobConsumer } from "../../infra/constructs/job-consumer.ts";
import { jobConsumerProps } from "../../infra/reference-stack.ts";
import { CONSUMER_ENV } from "../../shared/config/consumer-config.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { logicalId, type TestEnvironment, testEnvironment } from "./support.ts";

const DAY = 86_400;
const awardPoints = CONSUMERS.find((c) => c.definition.name === "award-points") as ConsumerDeployment;
/** 90 minutes, with the retention and interruption limit the outage rule needs at that timeout. */
const ninetyMinutes: ConsumerDeployment = {
  ...awardPoints,
  definition: { ...awardPointsConsumer, sends: {} },
  functionTimeoutSeconds: 5400,
  maxInterruptions: 1,
  queueRetentionSeconds: 14 * DAY,
};
const PROVIDER_ARN = "arn:aws:lambda:eu-west-1:123456789012:capacity-provider:jobfence-trusted";

let env: TestEnvironment;
let consumer: JobConsumer;

function managed(
  overrides: { perExecutionEnvironmentMaxConcurrency?: number; maxExecutionEnvironments?: number } = {},
) {
  return {
    capacityProvider: lambda.CapacityProvider.fromCapacityProviderArn(
      env.stack,
      `Provider${Math.random().toString(36).slice(2)}`,
      PROVIDER_ARN,
    ),
    perExecutionEnvironmentMaxConcurrency: 64,
    maxExecutionEnvironments: 3,
    ...overrides,
  };
}

beforeAll(() => {
  env = testEnvironment();
  consumer = new JobConsumer(env.stack, "Managed", {
    ...jobConsumerProps(ninetyMinutes),
    database: env.database,
    opsBus: env.opsBus,
    managedInstances: managed(),
  });
});

describe("JobConsumer on Lambda Managed Instances", () => {
  it("runs the function on the capacity provider, with its concurrency, environment cap and 90-minute timeout", () => {
    const template = Template.fromStack(env.stack);
    const fn = template.toJSON().Resources[logicalId(env.stack, consumer.consumerFunction.function)];
    expect(fn.Properties).toMatchObject({
      Timeout: 5400,
      CapacityProviderConfig: {
        LambdaManagedInstancesCapacityProviderConfig: {
          CapacityProviderArn: PROVIDER_ARN,
          PerExecutionEnvironmentMaxConcurrency: 64,
        },
      },
      FunctionScalingConfig: { MaxExecutionEnvironments: 3 },
      PublishToLatestPublished: true,
    });
    // Each worker sizes its pool from AWS_LAMBDA_MAX_CONCURRENCY: no fixed size is deployed.
    expect(fn.Properties.Environment.Variables).not.toHaveProperty(CONSUMER_ENV.poolMax);
  });

  it("counts execution environments × their concurrency in the connection budget, and needs a budget", () => {
    expect(consumer.connections).toMatchObject({ concurrency: 3, poolMax: 64, managedInstances: true });
    expect(consumer.connections.total).toBe(3 * 64 + 2 * 2);
    expect(validateConnectionBudget([consumer.connections], undefined)).toEqual([
      expect.stringMatching(
        /^consumer "award-points" runs on Lambda Managed Instances, up to 3 execution environments each holding up to 64 database connections .*declare connectionBudget/,
      ),
    ]);
    expect(validateConnectionBudget([consumer.connections], 196)).toEqual([]);
    expect(validateConnectionBudget([consumer.connections], 195)).toEqual([
      expect.stringMatching(
        /3 × 64 \(award-points: execution environments × their concurrency\) \+ 2 × 2 \(its backstop drain\) = 196 .*over connectionBudget 195.*lower maxExecutionEnvironments or perExecutionEnvironmentMaxConcurrency$/,
      ),
    ]);
  });

  it("refuses a 90-minute timeout on Lambda's default compute, and unusable managed-instance settings", () => {
    const problems = (thunk: () => unknown): readonly string[] => {
      try {
        thunk();
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigurationError);
        return (error as ConfigurationError).problems;
      }
      return [];
    };
    const local = testEnvironment();
    expect(
      problems(
        () =>
          new JobConsumer(local.stack, "Default", {
            ...jobConsumerProps(ninetyMinutes),
            database: local.database,
            opsBus: local.opsBus,
          }),
      ),
    ).toEqual(["function timeout must be 1–900 s (Lambda's bounds), got 5400"]);
    expect(
      problems(
        () =>
          new JobConsumer(local.stack, "Bad", {
            ...jobConsumerProps(ninetyMinutes),
            database: local.database,
            opsBus: local.opsBus,
            managedInstances: {
              ...managed(),
              perExecutionEnvironmentMaxConcurrency: 0,
              maxExecutionEnvironments: 20_000,
            },
          }),
      ),
    ).toEqual([
      "managedInstances.perExecutionEnvironmentMaxConcurrency must be a whole number, at least 1, got 0",
      expect.stringMatching(
        /^managedInstances.maxExecutionEnvironments must be a whole number 1–15000 \(Lambda's bounds\), got 20000/,
      ),
    ]);
  });
});
