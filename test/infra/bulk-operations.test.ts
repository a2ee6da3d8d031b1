import { Match, Template } from "aws-cdk-lib/assertions";
import * as cloudwatchActions from "aws-cdk-lib/aws-cloudwatch-actions";
import * as sns from "aws-cdk-lib/aws-sns";
import * as sqs from "aws-cdk-lib/aws-sqs";
import type { IConstruct } from "constructs";
import { beforeAll, describe, expect, it } from "vitest";
import { BULK_WORKER_RESERVE_MS } from "../../functions/bulk-operations/worker.ts";
import { BulkOperationsWorker } from "../../infra/constructs/bulk-operations.ts";
import { BULK_WORKER_DEFAULTS } from "../../infra/defaults.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { databaseVariables, logicalId, type TestEnvironment, testEnvironment } from "./support.ts";

let env: TestEnvironment;
let worker: BulkOperationsWorker;
let queues: sqs.Queue[];
let topic: sns.Topic;
let template: Template;

beforeAll(() => {
  env = testEnvironment();
  queues = [new sqs.Queue(env.stack, "QueueA"), new sqs.Queue(env.stack, "QueueB")];
  topic = new sns.Topic(env.stack, "Pager");
  worker = new BulkOperationsWorker(env.stack, "BulkOperations", {
    database: env.database,
    consumerQueues: queues,
    alarmActions: [new cloudwatchActions.SnsAction(topic)],
  });
  template = Template.fromStack(env.stack);
});

function policyStatements(fn: { role?: IConstruct }) {
  return Object.values(
    template.findResources("AWS::IAM::Policy", {
      Properties: { Roles: [{ Ref: logicalId(env.stack, fn.role as IConstruct) }] },
    }),
  ).flatMap((p) => p.Properties.PolicyDocument.Statement as Array<Record<string, unknown>>);
}

describe("BulkOperationsWorker", () => {
  it("runs functions/bulk-operations on Node 24 arm64 for 70 s, as the ops login, with no other settings", () => {
    const fn = template.toJSON().Resources[logicalId(env.stack, worker.workerFunction.function)];
    expect(fn.Properties).toMatchObject({
      Runtime: "nodejs24.x",
      Architectures: ["arm64"],
      Handler: "index.handler",
      Timeout: 70,
      Description: "jobfence bulk-operations worker (bulk replays and discards, in chunks)",
      TracingConfig: { Mode: "Active" },
    });
    expect(fn.Properties.Environment.Variables).toEqual({
      ...databaseVariables(env.stack, env.secrets.ops),
      NODE_OPTIONS: "--enable-source-maps",
    });
    // Unreserved: overlapping runs share the operations (SKIP LOCKED).
    expect(fn.Properties.ReservedConcurrentExecutions).toBeUndefined();
  });

  it("runs in the database's VPC, and the database's group lets it in on the port", () => {
    const fn = template.toJSON().Resources[logicalId(env.stack, worker.workerFunction.function)];
    expect(fn.Properties.VpcConfig.SubnetIds.length).toBeGreaterThan(0);
    const [group] = worker.workerFunction.function.connections.securityGroups;
    expect(fn.Properties.VpcConfig.SecurityGroupIds).toEqual([
      { "Fn::GetAtt": [logicalId(env.stack, group as IConstruct), "GroupId"] },
    ]);
    template.hasResourceProperties("AWS::EC2::SecurityGroupIngress", {
      GroupId: { "Fn::GetAtt": [logicalId(env.stack, env.databaseSecurityGroup), "GroupId"] },
      SourceSecurityGroupId: { "Fn::GetAtt": [logicalId(env.stack, group as IConstruct), "GroupId"] },
      FromPort: 5432,
      ToPort: 5432,
      IpProtocol: "tcp",
    });
  });

  it("is started every minute by EventBridge, and neither EventBridge nor Lambda retries a run", () => {
    template.hasResourceProperties("AWS::Events::Rule", {
      ScheduleExpression: "rate(1 minute)",
      State: "ENABLED",
      Targets: [
        {
          Arn: { "Fn::GetAtt": [logicalId(env.stack, worker.workerFunction.function), "Arn"] },
          Id: "Target0",
          RetryPolicy: { MaximumRetryAttempts: 0, MaximumEventAgeInSeconds: 60 },
        },
      ],
    });
    template.hasResourceProperties("AWS::Lambda::Permission", {
      Action: "lambda:InvokeFunction",
      Principal: "events.amazonaws.com",
      SourceArn: { "Fn::GetAtt": [logicalId(env.stack, worker.schedule), "Arn"] },
    });
    template.hasResourceProperties("AWS::Lambda::EventInvokeConfig", {
      FunctionName: { Ref: logicalId(env.stack, worker.workerFunction.function) },
      MaximumRetryAttempts: 0,
      MaximumEventAgeInSeconds: 60,
    });
  });

  it("may SendMessage (one or a batch) only to the consumer queues, and read only the ops login's secret", () => {
    const statements = policyStatements(worker.workerFunction.function);
    const sqsStatements = statements.filter((s) =>
      [s.Action].flat().some((a) => String(a).startsWith("sqs:")),
    );
    expect(sqsStatements).toEqual([
      {
        Effect: "Allow",
        Action: "sqs:SendMessage",
        Resource: queues.map((q) => ({ "Fn::GetAtt": [logicalId(env.stack, q), "Arn"] })),
      },
    ]);
    const secretStatements = statements.filter((s) =>
      [s.Action].flat().some((a) => String(a).startsWith("secretsmanager:")),
    );
    expect(secretStatements.map((s) => s.Resource)).toEqual([{ Ref: logicalId(env.stack, env.secrets.ops) }]);
    const actions = statements.flatMap((s) => [s.Action].flat());
    expect(actions).not.toContain("events:PutEvents");
  });

  it("alarms on the function's errors and on failed chunks, notifying the alarm actions", () => {
    const pager = { Ref: logicalId(env.stack, topic) };
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      Namespace: "AWS/Lambda",
      MetricName: "Errors",
      Dimensions: [
        { Name: "FunctionName", Value: { Ref: logicalId(env.stack, worker.workerFunction.function) } },
      ],
      Statistic: "Sum",
      Period: 300,
      Threshold: 0,
      ComparisonOperator: "GreaterThanThreshold",
      TreatMissingData: "notBreaching",
      AlarmActions: [pager],
    });
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      Namespace: "jobfence",
      MetricName: "BulkOperationChunkFailures",
      Dimensions: [{ Name: "service", Value: "bulk-operations" }],
      Statistic: "Sum",
      Period: 300,
      Threshold: 0,
      ComparisonOperator: "GreaterThanThreshold",
      TreatMissingData: "notBreaching",
      AlarmActions: [pager],
      AlarmDescription: Match.stringLikeRegexp("chunks failed"),
    });
    expect(Object.keys(template.findResources("AWS::CloudWatch::Alarm"))).toHaveLength(2);
  });

  it("gives the worker time to work most of each minute, after its reserve", () => {
    const workMs = BULK_WORKER_DEFAULTS.timeout.toMilliseconds() - BULK_WORKER_RESERVE_MS;
    expect(workMs).toBeGreaterThanOrEqual(BULK_WORKER_DEFAULTS.rate.toMilliseconds() * 0.8);
  });

  it("refuses an empty queue list", () => {
    const local = testEnvironment();
    expect(
      () => new BulkOperationsWorker(local.stack, "Bad", { database: local.database, consumerQueues: [] }),
    ).toThrow(ConfigurationError);
  });
});
