/**
 * JobConsumer: every default the design relies on, asserted on the synthesized template
 * (SPEC §4, §5, §10), and invalid props refused at synth with every problem listed.
 */
import { Match, Template } from "aws-cdk-lib/assertions";
import type { IConstruct } from "constructs";
import { beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { CONSUMERS, type ConsumerDeployment } from "../../functions/consumers.ts";
import { JobConsumer } from "../../infra/constructs/job-consumer.ts";
import { ConfigurationError } from "../../shared/errors.ts";
import type { RetryOverride } from "../../shared/retry/policy.ts";
import { logicalId, type TestEnvironment, testEnvironment } from "./support.ts";

const awardPoints = CONSUMERS.find((c) => c.definition.name === "award-points") as ConsumerDeployment;

let env: TestEnvironment;
let consumer: JobConsumer;
let fifoConsumer: JobConsumer;
let template: Template;

beforeAll(() => {
  env = testEnvironment();
  consumer = new JobConsumer(env.stack, "AwardPoints", {
    deployment: awardPoints,
    database: env.database,
    opsBus: env.opsBus,
  });
  fifoConsumer = new JobConsumer(env.stack, "Ordered", {
    deployment: {
      ...awardPoints,
      fifo: true,
      functionTimeoutSeconds: 60,
      definition: {
        ...awardPointsConsumer,
        name: "ordered-points",
        retry: { maxAttempts: 8, rationale: "the ledger service throttles in bursts" },
      },
    },
    entry: "functions/award-points/handler.ts",
    database: env.database,
    opsBus: env.opsBus,
  });
  template = Template.fromStack(env.stack);
});

function build(deployment: Partial<ConsumerDeployment>, extra: Record<string, unknown> = {}): () => void {
  const local = testEnvironment();
  return () =>
    new JobConsumer(local.stack, "Bad", {
      deployment: { ...awardPoints, ...deployment },
      database: local.database,
      opsBus: local.opsBus,
      ...extra,
    });
}

function problemsOf(thunk: () => void): readonly string[] {
  try {
    thunk();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigurationError);
    return (error as ConfigurationError).problems;
  }
  throw new Error("expected a ConfigurationError");
}

describe("JobConsumer source queue", () => {
  it("is SSE-encrypted, keeps messages the deployment's retention, and hides a message 6 × the function timeout", () => {
    template.hasResourceProperties("AWS::SQS::Queue", {
      QueueName: "award-points",
      SqsManagedSseEnabled: true,
      MessageRetentionPeriod: awardPoints.queueRetentionSeconds,
      VisibilityTimeout: 6 * awardPoints.functionTimeoutSeconds,
    });
  });

  it("redrives to its backstop after maxAttempts + 3 receives", () => {
    template.hasResourceProperties("AWS::SQS::Queue", {
      QueueName: "award-points",
      RedrivePolicy: {
        deadLetterTargetArn: { "Fn::GetAtt": [logicalId(env.stack, consumer.backstopQueue), "Arn"] },
        maxReceiveCount: 5 + 3,
      },
    });
  });

  it("refuses every request that is not over TLS", () => {
    template.hasResourceProperties("AWS::SQS::QueuePolicy", {
      Queues: [{ Ref: logicalId(env.stack, consumer.queue) }],
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({
            Effect: "Deny",
            Action: "sqs:*",
            Condition: { Bool: { "aws:SecureTransport": "false" } },
            Principal: { AWS: "*" },
          }),
        ]),
      },
    });
  });
});

describe("JobConsumer backstop queue", () => {
  it("keeps messages 14 days, encrypted and TLS-only", () => {
    template.hasResourceProperties("AWS::SQS::Queue", {
      QueueName: "award-points-backstop",
      SqsManagedSseEnabled: true,
      MessageRetentionPeriod: 1_209_600,
    });
    template.hasResourceProperties("AWS::SQS::QueuePolicy", {
      Queues: [{ Ref: logicalId(env.stack, consumer.backstopQueue) }],
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({ Effect: "Deny", Condition: { Bool: { "aws:SecureTransport": "false" } } }),
        ]),
      },
    });
  });
});

describe("JobConsumer function", () => {
  it("runs Node 24 on arm64 with the consumer's configuration", () => {
    template.hasResourceProperties("AWS::Lambda::Function", {
      FunctionName: Match.absent(),
      Runtime: "nodejs24.x",
      Architectures: ["arm64"],
      Handler: "index.handler",
      Timeout: awardPoints.functionTimeoutSeconds,
      Description: "jobfence consumer award-points",
      Environment: {
        Variables: Match.objectLike({
          JOBFENCE_OPS_BUS_NAME: { Ref: logicalId(env.stack, env.opsBus) },
          JOBFENCE_QUEUE_URL: { Ref: logicalId(env.stack, consumer.queue) },
          JOBFENCE_FENCE_TTL_SECONDS: String(7 * 86_400),
          JOBFENCE_QUEUE_RETENTION_SECONDS: String(awardPoints.queueRetentionSeconds),
          JOBFENCE_FUNCTION_TIMEOUT_SECONDS: String(awardPoints.functionTimeoutSeconds),
          JOBFENCE_DB_SECRET_ARN: { Ref: logicalId(env.stack, env.secrets.consumer) },
        }),
      },
    });
  });

  it("reads its SQS batch with ReportBatchItemFailures and the deployment's batch size and concurrency", () => {
    template.hasResourceProperties("AWS::Lambda::EventSourceMapping", {
      EventSourceArn: { "Fn::GetAtt": [logicalId(env.stack, consumer.queue), "Arn"] },
      FunctionName: { Ref: logicalId(env.stack, consumer.consumerFunction.function) },
      FunctionResponseTypes: ["ReportBatchItemFailures"],
      BatchSize: awardPoints.batchSize,
      ScalingConfig: { MaximumConcurrency: awardPoints.maxConcurrency },
    });
  });

  it("gets DATABASE_URL from Secrets Manager dynamic references: no password in the template", () => {
    const fn = template.findResources("AWS::Lambda::Function", {
      Properties: { Description: "jobfence consumer award-points" },
    });
    const url = JSON.stringify(Object.values(fn)[0]?.Properties.Environment.Variables.DATABASE_URL);
    expect(url).toContain("{{resolve:secretsmanager:");
    expect(url).toContain(":SecretString:password::}}");
    expect(url).toContain("@db.example.internal:5432/jobfence?sslmode=verify-full");
  });

  it("may change visibility on its own queue, put events on the ops bus and read its own database secret, and nothing else", () => {
    const role = consumer.consumerFunction.function.role as IConstruct;
    const policies = template.findResources("AWS::IAM::Policy", {
      Properties: { Roles: [{ Ref: logicalId(env.stack, role) }] },
    });
    const statements = Object.values(policies).flatMap((p) => p.Properties.PolicyDocument.Statement);
    const queueArn = { "Fn::GetAtt": [logicalId(env.stack, consumer.queue), "Arn"] };
    expect(statements).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ Action: "sqs:ChangeMessageVisibility", Resource: queueArn }),
        expect.objectContaining({
          Action: "events:PutEvents",
          Resource: { "Fn::GetAtt": [logicalId(env.stack, env.opsBus), "Arn"] },
        }),
        expect.objectContaining({
          Action: ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
          Resource: { Ref: logicalId(env.stack, env.secrets.consumer) },
        }),
      ]),
    );
    // X-Ray's trace-segment actions have no resource-level permissions; everything else is named.
    for (const statement of statements.filter((s) => !String(s.Action).startsWith("xray:"))) {
      expect(JSON.stringify(statement.Resource), JSON.stringify(statement)).not.toContain('"*"');
    }
  });

  it("allows its functions into the database's security group on 5432 only", () => {
    template.hasResourceProperties("AWS::EC2::SecurityGroupIngress", {
      GroupId: { "Fn::GetAtt": [logicalId(env.stack, env.databaseSecurityGroup), "GroupId"] },
      IpProtocol: "tcp",
      FromPort: 5432,
      ToPort: 5432,
    });
  });

  it("bundles ESM for node24 with a require banner", async () => {
    const { BUNDLING_DEFAULTS } = await import("../../infra/defaults.ts");
    expect(BUNDLING_DEFAULTS).toMatchObject({ format: "esm", target: "node24" });
    expect(BUNDLING_DEFAULTS.banner).toContain("createRequire(import.meta.url)");
  });
});

describe("JobConsumer backstop drain", () => {
  it("drains the backstop into unrecorded dead letters, knowing the source queue and its receive count", () => {
    template.hasResourceProperties("AWS::Lambda::Function", {
      Runtime: "nodejs24.x",
      Architectures: ["arm64"],
      Description: "jobfence backstop drain of award-points",
      Environment: {
        Variables: Match.objectLike({
          JOBFENCE_CONSUMER: "award-points",
          JOBFENCE_SOURCE_QUEUE_URL: { Ref: logicalId(env.stack, consumer.queue) },
          JOBFENCE_SOURCE_MAX_RECEIVE_COUNT: "8",
          JOBFENCE_OPS_BUS_NAME: { Ref: logicalId(env.stack, env.opsBus) },
        }),
      },
    });
    template.hasResourceProperties("AWS::Lambda::EventSourceMapping", {
      EventSourceArn: { "Fn::GetAtt": [logicalId(env.stack, consumer.backstopQueue), "Arn"] },
      FunctionResponseTypes: ["ReportBatchItemFailures"],
    });
  });
});

describe("JobConsumer alarms", () => {
  it("alarms on backstop depth > 0, the oldest message's age and function errors", () => {
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      MetricName: "ApproximateNumberOfMessagesVisible",
      Namespace: "AWS/SQS",
      Dimensions: [
        {
          Name: "QueueName",
          Value: { "Fn::GetAtt": [logicalId(env.stack, consumer.backstopQueue), "QueueName"] },
        },
      ],
      ComparisonOperator: "GreaterThanThreshold",
      Threshold: 0,
    });
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      MetricName: "ApproximateAgeOfOldestMessage",
      Dimensions: [
        { Name: "QueueName", Value: { "Fn::GetAtt": [logicalId(env.stack, consumer.queue), "QueueName"] } },
      ],
      Threshold: 900,
    });
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      MetricName: "Errors",
      Namespace: "AWS/Lambda",
      Dimensions: [
        { Name: "FunctionName", Value: { Ref: logicalId(env.stack, consumer.consumerFunction.function) } },
      ],
      Threshold: 0,
    });
  });
});

describe("JobConsumer on a FIFO queue with a retry override", () => {
  it("names both queues .fifo and redrives after the override's attempts + 3", () => {
    template.hasResourceProperties("AWS::SQS::Queue", {
      QueueName: "ordered-points.fifo",
      FifoQueue: true,
      VisibilityTimeout: 360,
      RedrivePolicy: Match.objectLike({ maxReceiveCount: 11 }),
    });
    template.hasResourceProperties("AWS::SQS::Queue", {
      QueueName: "ordered-points-backstop.fifo",
      FifoQueue: true,
      MessageRetentionPeriod: 1_209_600,
    });
    expect(fifoConsumer.retryPolicy.maxAttempts).toBe(8);
  });
});

describe("JobConsumer refuses invalid props at synth", () => {
  it("a fence TTL that a late delivery could outlive", () => {
    const problems = problemsOf(build({}, { fenceTtlSeconds: 4 * 86_400 }));
    expect(problems).toEqual([
      expect.stringMatching(/^fence TTL 345600 s .* must exceed queue retention 345600 s/),
    ]);
  });

  it("a blank rationale, a short visibility timeout, a short TTL and a bad batch size, all in one error", () => {
    const problems = problemsOf(
      build(
        {
          batchSize: 11,
          maxConcurrency: 1,
          definition: { ...awardPointsConsumer, retry: { maxAttempts: 3, rationale: "  " } },
        },
        { visibilityTimeoutSeconds: 60, fenceTtlSeconds: 86_400 },
      ),
    );
    expect(problems).toEqual([
      expect.stringMatching(/non-blank rationale/),
      expect.stringMatching(
        /visibility timeout 60 s must be .* at least 6 × the function timeout 30 s = 180 s/,
      ),
      expect.stringMatching(/batch size must be 1–10/),
      expect.stringMatching(/maxConcurrency must be 2–1000/),
      expect.stringMatching(/fence TTL 86400 s/),
    ]);
  });

  it("a retry override without a rationale does not compile", () => {
    // @ts-expect-error -- the rationale is required by the type
    const override: RetryOverride = { maxAttempts: 3 };
    expect(override.rationale).toBeUndefined();
  });
});
