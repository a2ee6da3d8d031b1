/** FenceCleanup: the 15-minute cleanup and the daily escalation, each with its own login. */
import { Template } from "aws-cdk-lib/assertions";
import type { IConstruct } from "constructs";
import { beforeAll, describe, expect, it } from "vitest";
import { FenceCleanup } from "../../infra/constructs/fence-cleanup.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { databaseVariables, logicalId, type TestEnvironment, testEnvironment } from "./support.ts";

let env: TestEnvironment;
let cleanup: FenceCleanup;
let template: Template;

beforeAll(() => {
  env = testEnvironment();
  cleanup = new FenceCleanup(env.stack, "Cleanup", { database: env.database, opsBus: env.opsBus });
  template = Template.fromStack(env.stack);
});

describe("FenceCleanup", () => {
  it("runs the cleanup every 15 minutes", () => {
    template.hasResourceProperties("AWS::Events::Rule", {
      ScheduleExpression: "rate(15 minutes)",
      Targets: [
        {
          Arn: { "Fn::GetAtt": [logicalId(env.stack, cleanup.cleanupFunction.function), "Arn"] },
          Id: "Target0",
          RetryPolicy: { MaximumRetryAttempts: 0 },
        },
      ],
    });
  });

  it("runs the escalation daily", () => {
    template.hasResourceProperties("AWS::Events::Rule", {
      ScheduleExpression: "cron(0 8 * * ? *)",
      Targets: [
        {
          Arn: { "Fn::GetAtt": [logicalId(env.stack, cleanup.escalationFunction.function), "Arn"] },
          Id: "Target0",
          RetryPolicy: { MaximumRetryAttempts: 2 },
        },
      ],
    });
  });

  it("runs both on Node 24 arm64; cleanup as the cleanup login, escalation as the ops login with the threshold", () => {
    template.hasResourceProperties("AWS::Lambda::Function", {
      Runtime: "nodejs24.x",
      Architectures: ["arm64"],
      Description: "jobfence TTL cleanup of expired fences",
      Environment: {
        Variables: {
          ...databaseVariables(env.stack, env.secrets.cleanup),
          NODE_OPTIONS: "--enable-source-maps",
        },
      },
    });
    template.hasResourceProperties("AWS::Lambda::Function", {
      Runtime: "nodejs24.x",
      Architectures: ["arm64"],
      Description: "jobfence daily escalation of stale pending dead letters",
      Environment: {
        Variables: {
          ...databaseVariables(env.stack, env.secrets.ops),
          JOBFENCE_OPS_BUS_NAME: { Ref: logicalId(env.stack, env.opsBus) },
          JOBFENCE_ESCALATION_DAYS: "3",
          NODE_OPTIONS: "--enable-source-maps",
        },
      },
    });
  });

  it("lets only the escalation put events, on the ops bus", () => {
    const policyOf = (fn: { role?: IConstruct }) =>
      Object.values(
        template.findResources("AWS::IAM::Policy", {
          Properties: { Roles: [{ Ref: logicalId(env.stack, fn.role as IConstruct) }] },
        }),
      ).flatMap((p) => p.Properties.PolicyDocument.Statement);
    const escalation = policyOf(cleanup.escalationFunction.function);
    expect(escalation).toContainEqual(
      expect.objectContaining({
        Action: "events:PutEvents",
        Resource: { "Fn::GetAtt": [logicalId(env.stack, env.opsBus), "Arn"] },
      }),
    );
    const cleanupActions = policyOf(cleanup.cleanupFunction.function).flatMap((s) => [s.Action].flat());
    expect(cleanupActions).not.toContain("events:PutEvents");
    expect(cleanupActions).toContain("secretsmanager:GetSecretValue");
  });

  it("refuses a bad threshold, hour and batch size together", () => {
    const local = testEnvironment();
    expect(
      () =>
        new FenceCleanup(local.stack, "Bad", {
          database: local.database,
          opsBus: local.opsBus,
          escalationThresholdDays: 0,
          escalationHourUtc: 24,
          cleanupBatchSize: 0,
        }),
    ).toThrow(ConfigurationError);
  });
});
