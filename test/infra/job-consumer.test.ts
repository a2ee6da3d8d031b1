/**
 * JobConsumer: every default the design relies on, asserted on the synthesized template
 * (docs/design.md §4, §5), and invalid props refused at synth with every problem listed.
 */
import { Match, Template } from "aws-cdk-lib/assertions";
import * as lambda from "aws-cdk-lib/aws-lambda";
import * as sqs from "aws-cdk-lib/aws-sqs";
import type { IConstruct } from "constructs";
import { beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { CONSUMERS, type ConsumerDeployment } from "../../functions/consumers.ts";
import { JobConsumer } from "../../infra/cdk.ts";
import { jobConsumerProps } from "../../infra/reference-stack.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { ERROR_KINDS } from "../../shared/errors/error-kind.ts";
import { deadLetteredMetric, METRIC } from "../../shared/metrics/names.ts";
import type { RetryOverride } from "../../shared/retry/policy.ts";
import { databaseVariables, logicalId, type TestEnvironment, testEnvironment } from "./support.ts";

const awardPoints = CONSUMERS.find((c) => c.definition.name === "award-points") as ConsumerDeployment;
const notifyUser = CONSUMERS.find((c) => c.definition.name === "notify-user") as ConsumerDeployment;
/** award-points' entry point, which its renamed copies below bundle. */
const AWARD_POINTS_ENTRY = jobConsumerProps(awardPoints).entry;

/** A queue standing in for notify-user's, award-points' one follow-up target, in `local`'s stack. */
function notifyUserTarget(local: TestEnvironment): { "notify-user": sqs.IQueue } {
  return { "notify-user": new sqs.Queue(local.stack, "NotifyUserTarget") };
}

let env: TestEnvironment;
let notifyUserConsumer: JobConsumer;
let consumer: JobConsumer;
let fifoConsumer: JobConsumer;
let fifoDefaultConsumer: JobConsumer;
let template: Template;

beforeAll(() => {
  env = testEnvironment();
  notifyUserConsumer = new JobConsumer(env.stack, "NotifyUser", {
    ...jobConsumerProps(notifyUser),
    database: env.database,
    opsBus: env.opsBus,
  });
  // award-points sends follow-ups to notify-user; so do its copies below.
  const followUpTargets = { "notify-user": notifyUserConsumer.queue };
  consumer = new JobConsumer(env.stack, "AwardPoints", {
    ...jobConsumerProps(awardPoints),
    database: env.database,
    opsBus: env.opsBus,
    followUpTargets,
  });
  fifoConsumer = new JobConsumer(env.stack, "Ordered", {
    ...jobConsumerProps({
      ...awardPoints,
      fifo: true,
      functionTimeoutSeconds: 60,
      definition: {
        ...awardPointsConsumer,
        name: "ordered-points",
        retry: { maxAttempts: 8, rationale: "the ledger service throttles in bursts" },
      },
    }),
    entry: AWARD_POINTS_ENTRY,
    database: env.database,
    opsBus: env.opsBus,
    followUpTargets,
  });
  fifoDefaultConsumer = new JobConsumer(env.stack, "OrderedDefault", {
    ...jobConsumerProps({
      ...awardPoints,
      fifo: true,
      definition: { ...awardPointsConsumer, name: "ordered-default" },
    }),
    entry: AWARD_POINTS_ENTRY,
    database: env.database,
    opsBus: env.opsBus,
    followUpTargets,
  });
  template = Template.fromStack(env.stack);
});

function build(deployment: Partial<ConsumerDeployment>, extra: Record<string, unknown> = {}): () => void {
  const local = testEnvironment();
  return () =>
    new JobConsumer(local.stack, "Bad", {
      ...jobConsumerProps({ ...awardPoints, ...deployment }),
      database: local.database,
      opsBus: local.opsBus,
      followUpTargets: notifyUserTarget(local),
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

  it("redrives to its backstop after maxAttempts 5 + maxInterruptions 2 + 2 + 10 spare = 19 receives", () => {
    template.hasResourceProperties("AWS::SQS::Queue", {
      QueueName: "award-points",
      RedrivePolicy: {
        deadLetterTargetArn: { "Fn::GetAtt": [logicalId(env.stack, consumer.backstopQueue), "Arn"] },
        maxReceiveCount: 5 + 2 + 2 + 10,
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
          JOBFENCE_FENCE_TTL_SECONDS: String(21 * 86_400),
          JOBFENCE_QUEUE_RETENTION_SECONDS: String(awardPoints.queueRetentionSeconds),
          JOBFENCE_BACKSTOP_RETENTION_SECONDS: String(14 * 86_400),
          JOBFENCE_FUNCTION_TIMEOUT_SECONDS: String(awardPoints.functionTimeoutSeconds),
          JOBFENCE_DB_SECRET_ARN: {
            Ref: logicalId(env.stack, env.secrets.consumers["award-points"] as IConstruct),
          },
        }),
      },
    });
  });

  it("gets the delivery timings it was deployed with, so its start-up can validate them", () => {
    // The variable names as written: they are the contract between the construct and the function.
    template.hasResourceProperties("AWS::Lambda::Function", {
      Description: "jobfence consumer award-points",
      Environment: {
        Variables: Match.objectLike({
          JOBFENCE_LOCK_TIMEOUT_MS: "5000",
          JOBFENCE_MAX_RECEIVE_COUNT: "19",
          JOBFENCE_VISIBILITY_TIMEOUT_SECONDS: "180",
          JOBFENCE_BATCHING_WINDOW_SECONDS: "0",
          JOBFENCE_MAX_INTERRUPTIONS: "2",
          JOBFENCE_RECORD_BUDGET_MS: "10000",
          JOBFENCE_RETURN_RESERVE_MS: "2000",
          JOBFENCE_FIFO: "false",
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
      MaximumBatchingWindowInSeconds: Match.absent(),
    });
  });

  it("connects the function and its drain as the consumer's own login: its secret's ARN and the endpoint, no credential", () => {
    const secret = env.secrets.consumers["award-points"] as IConstruct;
    for (const description of ["jobfence consumer award-points", "jobfence backstop drain of award-points"]) {
      const fn = template.findResources("AWS::Lambda::Function", {
        Properties: { Description: description },
      });
      const variables = Object.values(fn)[0]?.Properties.Environment.Variables;
      expect(variables, description).toMatchObject(databaseVariables(env.stack, secret));
      expect(variables.DATABASE_URL, description).toBeUndefined();
      expect(JSON.stringify(variables), description).not.toContain("resolve:secretsmanager");
    }
    // Another consumer logs in with its own secret, never award-points'.
    const other = template.findResources("AWS::Lambda::Function", {
      Properties: { Description: "jobfence consumer ordered-points" },
    });
    expect(Object.values(other)[0]?.Properties.Environment.Variables.JOBFENCE_DB_SECRET_ARN).toEqual({
      Ref: logicalId(env.stack, env.secrets.consumers["ordered-points"] as IConstruct),
    });
  });

  it("refuses at synth a consumer the database has no login secret for, saying what to add", () => {
    const local = testEnvironment(undefined, ["someone-else"]);
    expect(
      () =>
        new JobConsumer(local.stack, "NoLogin", {
          ...jobConsumerProps(awardPoints),
          database: local.database,
          opsBus: local.opsBus,
          followUpTargets: notifyUserTarget(local),
        }),
    ).toThrow(/no login secret for consumer "award-points": add secrets\.consumers\["award-points"\]/);
  });

  it("may change visibility on its own queue, send to its follow-up target's queue, put events on the ops bus and read its own database secret, and nothing else", () => {
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
          Action: "sqs:SendMessage",
          Resource: { "Fn::GetAtt": [logicalId(env.stack, notifyUserConsumer.queue), "Arn"] },
        }),
        expect.objectContaining({
          Action: "events:PutEvents",
          Resource: { "Fn::GetAtt": [logicalId(env.stack, env.opsBus), "Arn"] },
        }),
        expect.objectContaining({
          Action: ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
          Resource: { Ref: logicalId(env.stack, env.secrets.consumers["award-points"] as IConstruct) },
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
          JOBFENCE_SOURCE_MAX_RECEIVE_COUNT: "19",
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
  it("names both queues .fifo and redrives after (8 + 2 + 2) × (1 + 9 FIFO predecessors) + 10 = 130 receives", () => {
    template.hasResourceProperties("AWS::SQS::Queue", {
      QueueName: "ordered-points.fifo",
      FifoQueue: true,
      VisibilityTimeout: 360,
      RedrivePolicy: Match.objectLike({ maxReceiveCount: (8 + 2 + 2) * (1 + 9) + 10 }),
    });
    template.hasResourceProperties("AWS::SQS::Queue", {
      QueueName: "ordered-points-backstop.fifo",
      FifoQueue: true,
      MessageRetentionPeriod: 1_209_600,
    });
    expect(fifoConsumer.retryPolicy.maxAttempts).toBe(8);
    template.hasResourceProperties("AWS::Lambda::Function", {
      Description: "jobfence consumer ordered-points",
      Environment: {
        Variables: Match.objectLike({
          JOBFENCE_MAX_RECEIVE_COUNT: "130",
          JOBFENCE_VISIBILITY_TIMEOUT_SECONDS: "360",
          JOBFENCE_FIFO: "true",
        }),
      },
    });
  });

  it("with the default policy redrives a FIFO queue after 9 × (1 + 9) + 10 = 100 receives", () => {
    template.hasResourceProperties("AWS::SQS::Queue", {
      QueueName: "ordered-default.fifo",
      FifoQueue: true,
      VisibilityTimeout: 180,
      RedrivePolicy: {
        deadLetterTargetArn: {
          "Fn::GetAtt": [logicalId(env.stack, fifoDefaultConsumer.backstopQueue), "Arn"],
        },
        maxReceiveCount: 100,
      },
    });
    template.hasResourceProperties("AWS::Lambda::Function", {
      Description: "jobfence backstop drain of ordered-default",
      Environment: { Variables: Match.objectLike({ JOBFENCE_SOURCE_MAX_RECEIVE_COUNT: "100" }) },
    });
  });
});

describe("JobConsumer with a batching window", () => {
  it("passes the window to the event source and adds it to the default visibility timeout", () => {
    const local = testEnvironment();
    const windowed = new JobConsumer(local.stack, "Windowed", {
      ...jobConsumerProps({ ...awardPoints, batchingWindowSeconds: 20 }),
      database: local.database,
      opsBus: local.opsBus,
      followUpTargets: notifyUserTarget(local),
    });
    const windowedTemplate = Template.fromStack(local.stack);
    windowedTemplate.hasResourceProperties("AWS::SQS::Queue", {
      QueueName: "award-points",
      VisibilityTimeout: 6 * 30 + 20,
      RedrivePolicy: Match.objectLike({ maxReceiveCount: 19 }),
    });
    windowedTemplate.hasResourceProperties("AWS::Lambda::EventSourceMapping", {
      EventSourceArn: { "Fn::GetAtt": [logicalId(local.stack, windowed.queue), "Arn"] },
      MaximumBatchingWindowInSeconds: 20,
    });
    windowedTemplate.hasResourceProperties("AWS::Lambda::Function", {
      Description: "jobfence consumer award-points",
      Environment: {
        Variables: Match.objectLike({
          JOBFENCE_VISIBILITY_TIMEOUT_SECONDS: "200",
          JOBFENCE_BATCHING_WINDOW_SECONDS: "20",
        }),
      },
    });
  });
});

describe("JobConsumer refuses invalid props at synth", () => {
  it("a fence TTL that a late delivery could outlive", () => {
    const problems = problemsOf(build({}, { fenceTtlSeconds: 4 * 86_400 }));
    expect(problems).toEqual([
      expect.stringMatching(
        /^fence TTL 345600 s .* must exceed .* max\(queue retention 345600 s, backstop retention 1209600 s\)/,
      ),
    ]);
  });

  it("the 7-day TTL of earlier versions, which a copy waiting in the backstop outlives; on FIFO, the TTL a standard queue needs", () => {
    expect(problemsOf(build({}, { fenceTtlSeconds: 7 * 86_400 }))).toEqual([
      expect.stringMatching(
        /^fence TTL 604800 s .* outbox deadline 86400 s .* backstop retention 1209600 s.* drain 60 s/,
      ),
    ]);
    expect(problemsOf(build({ fifo: true, batchSize: 10 }, { fenceTtlSeconds: 17 * 86_400 }))).toEqual([
      expect.stringMatching(/queue retention 345600 s \+ backstop retention 1209600 s \(FIFO/),
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

  it("a redrive count that would push retriable messages to the backstop (the old maxAttempts + 3)", () => {
    expect(problemsOf(build({ maxReceiveCount: 8 }))).toEqual([
      expect.stringMatching(
        /^maxReceiveCount 8 must be at least maxAttempts 5 \+ maxInterruptions 2 \+ 2 = 9 receives per message \+ 10 spare receives = 19; otherwise a message that can still be retried reaches the backstop/,
      ),
    ]);
    expect(problemsOf(build({ fifo: true, maxReceiveCount: 99 }))).toEqual([
      expect.stringMatching(
        /^maxReceiveCount 99 must be at least .* × \(1 \+ 9 FIFO predecessors\) .* = 100/,
      ),
    ]);
  });

  it("a redrive count that, with the database down, the retention could not hold", () => {
    expect(problemsOf(build({ maxReceiveCount: 961 }))).toEqual([
      expect.stringMatching(
        /^maxReceiveCount 961 × \(visibility timeout 180 s \+ batching window 0 s\) = 172980 s .* must not exceed 0\.5 × the queue retention 345600 s = 172800 s .* retention could delete a message before the backstop got it/,
      ),
    ]);
    expect(() => build({ maxReceiveCount: 960 })()).not.toThrow();
  });

  it("a visibility timeout that leaves out the batching window", () => {
    expect(problemsOf(build({ batchingWindowSeconds: 20 }, { visibilityTimeoutSeconds: 199 }))).toEqual([
      expect.stringMatching(
        /^visibility timeout 199 s must be a whole number at least 6 × the function timeout 30 s = 180 s plus the batching window 20 s, 200 s in all/,
      ),
    ]);
    expect(() => build({ batchingWindowSeconds: 20 }, { visibilityTimeoutSeconds: 200 })()).not.toThrow();
  });

  it("a batching window on a FIFO queue, in the one error rather than CDK's", () => {
    expect(problemsOf(build({ fifo: true, batchingWindowSeconds: 5 }))).toEqual([
      expect.stringMatching(/^batching window must be 0 on a FIFO queue/),
    ]);
  });

  it("a function timeout out of Lambda's bounds, reported once though two validations check it", () => {
    expect(problemsOf(build({ functionTimeoutSeconds: 901 }))).toEqual([
      "function timeout must be 1–900 s (Lambda's bounds), got 901",
    ]);
  });

  it("a retry override without a rationale does not compile", () => {
    // @ts-expect-error -- the rationale is required by the type
    const override: RetryOverride = { maxAttempts: 3 };
    expect(override.rationale).toBeUndefined();
  });
});

describe("JobConsumer runtime", () => {
  it("runs on Node 24 by default: the consumer, its drain and its relay, bundled for node24", () => {
    for (const fn of [consumer.consumerFunction, consumer.drainFunction, consumer.outbox?.relayFunction]) {
      const props = template.toJSON().Resources[logicalId(env.stack, fn?.function as IConstruct)].Properties;
      expect(props.Runtime, fn?.node.path).toBe("nodejs24.x");
      expect(fn?.esbuildTarget).toBe("node24");
    }
  });

  it("runs on Node 22 when chosen: every function of the consumer, bundled for node22", () => {
    const local = testEnvironment();
    const on22 = new JobConsumer(local.stack, "On22", {
      ...jobConsumerProps(awardPoints),
      runtime: lambda.Runtime.NODEJS_22_X,
      database: local.database,
      opsBus: local.opsBus,
      followUpTargets: notifyUserTarget(local),
    });
    const t = Template.fromStack(local.stack);
    const functions = [on22.consumerFunction, on22.drainFunction, on22.outbox?.relayFunction];
    for (const fn of functions) {
      const props = t.toJSON().Resources[logicalId(local.stack, fn?.function as IConstruct)].Properties;
      expect(props.Runtime, fn?.node.path).toBe("nodejs22.x");
      expect(fn?.esbuildTarget).toBe("node22");
    }
  });

  it("refuses an entry that is not an absolute path to a file there, naming the function", () => {
    expect(problemsOf(build({}, { entry: "functions/award-points/handler.ts" }))).toEqual([
      expect.stringMatching(/^entry "functions\/award-points\/handler\.ts" must be an absolute path/),
    ]);
    expect(problemsOf(build({}, { entry: `${AWARD_POINTS_ENTRY}.missing.ts` }))).toEqual([
      `entry ${AWARD_POINTS_ENTRY}.missing.ts does not exist`,
    ]);
    expect(build({}, { entry: "/srv/app/handler.py" })).toThrow(
      /Bad\/Consumer[\s\S]*must be a \.ts, \.mts, \.js, \.mjs file/,
    );
  });

  it("refuses any other runtime at synth, with the other problems", () => {
    for (const runtime of [lambda.Runtime.NODEJS_20_X, lambda.Runtime.PYTHON_3_12]) {
      expect(problemsOf(build({ functionTimeoutSeconds: 901 }, { runtime }))).toEqual([
        `runtime ${runtime.name} is not supported: choose Runtime.NODEJS_22_X or Runtime.NODEJS_24_X (nodejs22.x, nodejs24.x)`,
        "function timeout must be 1–900 s (Lambda's bounds), got 901",
      ]);
    }
  });
});

describe("JobConsumer failure alarms", () => {
  // Every failure metric the harness (service = the consumer) or the drain (service =
  // <consumer>-backstop) emits, by the name the code emits it under: > 0 in 5 minutes alarms.
  const failureAlarms = [
    ["deadLetterWriteFailed", "DeadLetterWriteFailed", "award-points"],
    ["alertFailed", "AlertFailed", "award-points"],
    ["recordFailed", "RecordFailed", "award-points"],
    ["retryScheduleFailed", "RetryScheduleFailed", "award-points"],
    ["failureUnrecorded", "FailureUnrecorded", "award-points"],
    ["recordInterrupted", "RecordInterrupted", "award-points"],
    ["backstopRecordFailed", "BackstopRecordFailed", "award-points-backstop"],
    ["drainAlertFailed", "AlertFailed", "award-points-backstop"],
  ] as const;

  it.each(failureAlarms)(
    "%s: %s of service %s, summed over 5 minutes, > 0, missing data not breaching",
    (key, metricName, service) => {
      const props = template.toJSON().Resources[logicalId(env.stack, consumer.alarms[key])].Properties;
      expect(props).toMatchObject({
        AlarmName: expect.stringMatching(/^Test\/AwardPoints\/[A-Za-z]+Alarm$/),
        Namespace: "jobfence",
        MetricName: metricName,
        Dimensions: [{ Name: "service", Value: service }],
        Statistic: "Sum",
        Period: 300,
        EvaluationPeriods: 1,
        Threshold: 0,
        ComparisonOperator: "GreaterThanThreshold",
        TreatMissingData: "notBreaching",
      });
    },
  );

  it("alarms on every dead letter recorded, of any kind, by the harness, the drain or the outbox relay (> 0 in 5 minutes)", () => {
    const props = template.toJSON().Resources[logicalId(env.stack, consumer.alarms.deadLettered)].Properties;
    expect(props).toMatchObject({
      AlarmName: "Test/AwardPoints/DeadLetteredAlarm",
      EvaluationPeriods: 1,
      Threshold: 0,
      ComparisonOperator: "GreaterThanThreshold",
      TreatMissingData: "notBreaching",
    });
    const queries = props.Metrics as Array<{
      Id: string;
      Expression?: string;
      ReturnData?: boolean;
      MetricStat?: {
        Metric: { Namespace: string; MetricName: string; Dimensions: unknown };
        Stat: string;
        Period: number;
      };
    }>;
    expect(queries.find((q) => q.Expression !== undefined)).toMatchObject({ Expression: "SUM(METRICS())" });
    const watched = queries
      .flatMap((q) => (q.MetricStat ? [q.MetricStat] : []))
      .map(({ Metric, Stat, Period }) => {
        expect(Metric.Namespace).toBe("jobfence");
        expect([Stat, Period]).toEqual(["Sum", 300]);
        return `${(Metric.Dimensions as Array<{ Value: string }>)[0]?.Value} ${Metric.MetricName}`;
      });
    // Every kind the harness records (shared/record/observe.ts publishes DeadLettered<Kind>), the
    // drain's unrecorded and the relay's undelivered: ten metrics, CloudWatch's limit for an alarm.
    expect(watched.sort()).toEqual(
      [
        ...ERROR_KINDS.map((kind) => `award-points ${deadLetteredMetric(kind)}`),
        `award-points-backstop ${deadLetteredMetric("unrecorded")}`,
        `award-points-outbox ${METRIC.outboxUndelivered}`,
      ].sort(),
    );
    expect(watched).toHaveLength(10);
  });

  it("alarms on the backstop's in-flight messages (> 0) and its oldest message (> 1 hour), each minute", () => {
    const backstop = {
      Name: "QueueName",
      Value: { "Fn::GetAtt": [logicalId(env.stack, consumer.backstopQueue), "QueueName"] },
    };
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      AlarmName: "Test/AwardPoints/BackstopInFlightAlarm",
      Namespace: "AWS/SQS",
      MetricName: "ApproximateNumberOfMessagesNotVisible",
      Dimensions: [backstop],
      Statistic: "Maximum",
      Period: 60,
      Threshold: 0,
      ComparisonOperator: "GreaterThanThreshold",
      TreatMissingData: "notBreaching",
    });
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      AlarmName: "Test/AwardPoints/BackstopOldestMessageAlarm",
      Namespace: "AWS/SQS",
      MetricName: "ApproximateAgeOfOldestMessage",
      Dimensions: [backstop],
      Statistic: "Maximum",
      Period: 60,
      Threshold: 3600,
      ComparisonOperator: "GreaterThanThreshold",
      TreatMissingData: "notBreaching",
    });
  });

  it("names every alarm under the stack's prefix, the one the BetterStack rule matches", () => {
    expect(Object.keys(consumer.alarms)).toHaveLength(15);
    for (const alarm of Object.values(consumer.alarms)) {
      expect(template.toJSON().Resources[logicalId(env.stack, alarm)].Properties.AlarmName).toMatch(
        /^Test\/AwardPoints\//,
      );
    }
  });
});

describe("JobConsumer event sources", () => {
  it("publish their event-count metrics, the consumer's and the drain's", () => {
    for (const queue of [consumer.queue, consumer.backstopQueue]) {
      template.hasResourceProperties("AWS::Lambda::EventSourceMapping", {
        EventSourceArn: { "Fn::GetAtt": [logicalId(env.stack, queue), "Arn"] },
        MetricsConfig: { Metrics: ["EventCount"] },
      });
    }
  });

  it("deploy the pool size the connection budget counts", () => {
    template.hasResourceProperties("AWS::Lambda::Function", {
      Description: "jobfence consumer award-points",
      Environment: { Variables: Match.objectLike({ JOBFENCE_POOL_MAX: "2" }) },
    });
    // award-points sends follow-ups: its outbox relay's one run holds one connection.
    expect(consumer.connections).toMatchObject({
      concurrency: awardPoints.maxConcurrency,
      poolMax: 2,
      drainConcurrency: 2,
      drainPoolMax: 2,
      relayConcurrency: 1,
      relayPoolMax: 1,
      total: awardPoints.maxConcurrency * 2 + 2 * 2 + 1 * 1,
      provisioned: false,
    });
    expect(notifyUserConsumer.connections).toMatchObject({
      relayConcurrency: 0,
      total: notifyUser.maxConcurrency * 2 + 2 * 2,
    });
  });

  it("in provisioned mode keep the pollers between their bounds and set no maximum concurrency (AWS takes one or the other)", () => {
    const local = testEnvironment();
    const provisioned = new JobConsumer(local.stack, "Provisioned", {
      ...jobConsumerProps({
        ...awardPoints,
        maxConcurrency: 50,
        provisionedPollers: { minimumPollers: 2, maximumPollers: 5 },
      }),
      database: local.database,
      opsBus: local.opsBus,
      followUpTargets: notifyUserTarget(local),
    });
    Template.fromStack(local.stack).hasResourceProperties("AWS::Lambda::EventSourceMapping", {
      EventSourceArn: { "Fn::GetAtt": [logicalId(local.stack, provisioned.queue), "Arn"] },
      ProvisionedPollerConfig: { MinimumPollers: 2, MaximumPollers: 5 },
      ScalingConfig: Match.absent(),
      MetricsConfig: { Metrics: ["EventCount"] },
    });
    expect(provisioned.connections).toMatchObject({
      concurrency: 50,
      total: 50 * 2 + 2 * 2 + 1,
      provisioned: true,
    });
  });
});

describe("JobConsumer refuses unsafe event-source settings at synth", () => {
  it("provisioned pollers that could run more invocations than maxConcurrency", () => {
    expect(problemsOf(build({ provisionedPollers: { minimumPollers: 2, maximumPollers: 5 } }))).toEqual([
      expect.stringMatching(
        /^maxConcurrency 4 is below what the provisioned pollers can run: maximumPollers 5 × 10 invocations per poller = 50 .*raise maxConcurrency to 50 or lower maximumPollers$/,
      ),
    ]);
    expect(() =>
      build({ maxConcurrency: 50, provisionedPollers: { minimumPollers: 2, maximumPollers: 5 } })(),
    ).not.toThrow();
  });

  it("provisioned pollers out of SQS's bounds, or a minimum above the maximum", () => {
    expect(
      problemsOf(
        build({ maxConcurrency: 30_000, provisionedPollers: { minimumPollers: 1, maximumPollers: 2001 } }),
      ),
    ).toEqual([
      "provisionedPollers.minimumPollers must be 2–200 (SQS's bounds), got 1",
      "provisionedPollers.maximumPollers must be 2–2000 (SQS's bounds), got 2001",
    ]);
    expect(
      problemsOf(
        build({ maxConcurrency: 100, provisionedPollers: { minimumPollers: 8, maximumPollers: 4 } }),
      ),
    ).toEqual(["provisionedPollers.minimumPollers 8 must not exceed maximumPollers 4"]);
  });

  it("event filters, which would delete the messages they drop unrecorded", () => {
    // @ts-expect-error -- the type refuses filters too
    const filtered: Partial<ConsumerDeployment> = { filters: [{ body: { kind: ["points"] } }] };
    expect(problemsOf(build(filtered))).toEqual([
      expect.stringMatching(/^filters are refused: Lambda deletes every message an event filter drops/),
    ]);
  });

  it("a redrive count whose unrecorded receives, batching window included, the retention could not hold", () => {
    // The window counts twice per receive: in the default visibility timeout (6 × 30 + 300 = 480 s)
    // and as the time the poller may hold the message: 180 × (480 + 300) = 140,400 s fits half of
    // the 4-day retention (172,800 s); 222 receives (173,160 s) do not.
    expect(problemsOf(build({ batchingWindowSeconds: 300, maxReceiveCount: 222 }))).toEqual([
      expect.stringMatching(
        /^maxReceiveCount 222 × \(visibility timeout 480 s \+ batching window 300 s\) = 173160 s .* must not exceed 0\.5 × the queue retention 345600 s = 172800 s/,
      ),
    ]);
    expect(() => build({ batchingWindowSeconds: 300, maxReceiveCount: 221 })()).not.toThrow();
  });
});

describe("JobConsumer that sends follow-ups", () => {
  const relayDescription = "jobfence outbox relay of award-points";
  const functionOf = (description: string) => {
    const found = template.findResources("AWS::Lambda::Function", {
      Properties: { Description: description },
    });
    expect(Object.keys(found), description).toHaveLength(1);
    const [fn] = Object.values(found);
    if (!fn) throw new Error(`no function "${description}"`);
    return fn;
  };
  const statementsOf = (role: IConstruct) =>
    Object.values(
      template.findResources("AWS::IAM::Policy", {
        Properties: { Roles: [{ Ref: logicalId(env.stack, role) }] },
      }),
    ).flatMap((p) => p.Properties.PolicyDocument.Statement as Array<Record<string, unknown>>);
  const sendsOf = (role: IConstruct) =>
    statementsOf(role).filter((s) => [s.Action].flat().some((a) => String(a).startsWith("sqs:Send")));
  /** `{"notify-user":"<its queue URL>"}`, as Stack.toJsonString renders it. */
  const outboxQueues = () => ({
    "Fn::Join": ["", ['{"notify-user":"', { Ref: logicalId(env.stack, notifyUserConsumer.queue) }, '"}']],
  });

  it("gives the consumer function each target's queue URL, by name, in JOBFENCE_OUTBOX_QUEUES", () => {
    expect(
      functionOf("jobfence consumer award-points").Properties.Environment.Variables.JOBFENCE_OUTBOX_QUEUES,
    ).toEqual(outboxQueues());
  });

  it("lets the consumer function and its relay send to the target queues, and to no other queue", () => {
    const targetArn = { "Fn::GetAtt": [logicalId(env.stack, notifyUserConsumer.queue), "Arn"] };
    const outbox = consumer.outbox;
    expect(outbox).toBeDefined();
    for (const fn of [consumer.consumerFunction, outbox?.relayFunction]) {
      expect(sendsOf(fn?.function.role as IConstruct)).toEqual([
        { Effect: "Allow", Action: "sqs:SendMessage", Resource: targetArn },
      ]);
    }
    expect(Object.keys(outbox?.targets ?? {})).toEqual(["notify-user"]);
  });

  it("deploys the outbox relay as the consumer's own login, in its VPC, with its targets and the ops bus", () => {
    const relay = functionOf(relayDescription).Properties;
    const consumerFn = functionOf("jobfence consumer award-points").Properties;
    expect(relay).toMatchObject({ Runtime: "nodejs24.x", Architectures: ["arm64"], Timeout: 50 });
    expect(relay.Environment.Variables).toMatchObject({
      ...databaseVariables(env.stack, env.secrets.consumers["award-points"] as IConstruct),
      JOBFENCE_CONSUMER: "award-points",
      JOBFENCE_OPS_BUS_NAME: { Ref: logicalId(env.stack, env.opsBus) },
      JOBFENCE_OUTBOX_QUEUES: outboxQueues(),
    });
    expect(relay.Environment.Variables.DATABASE_URL).toBeUndefined();
    expect(relay.VpcConfig.SubnetIds).toEqual(consumerFn.VpcConfig.SubnetIds);
    const relayGroup = (consumer.outbox?.relayFunction.function.connections.securityGroups ?? [])[0];
    template.hasResourceProperties("AWS::EC2::SecurityGroupIngress", {
      GroupId: { "Fn::GetAtt": [logicalId(env.stack, env.databaseSecurityGroup), "GroupId"] },
      SourceSecurityGroupId: { "Fn::GetAtt": [logicalId(env.stack, relayGroup as IConstruct), "GroupId"] },
      FromPort: 5432,
      ToPort: 5432,
    });
  });

  it("lets the relay put events on the ops bus and read the consumer's secret; nothing is a wildcard but X-Ray", () => {
    const statements = statementsOf(consumer.outbox?.relayFunction.function.role as IConstruct);
    expect(statements).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          Action: "events:PutEvents",
          Resource: { "Fn::GetAtt": [logicalId(env.stack, env.opsBus), "Arn"] },
        }),
        expect.objectContaining({
          Action: ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
          Resource: { Ref: logicalId(env.stack, env.secrets.consumers["award-points"] as IConstruct) },
        }),
      ]),
    );
    for (const statement of statements.filter((s) => !String(s.Action).startsWith("xray:"))) {
      expect(JSON.stringify(statement.Resource), JSON.stringify(statement)).not.toContain('"*"');
    }
  });

  it("runs the relay every minute, never retrying a run", () => {
    const relay = consumer.outbox?.relayFunction.function as IConstruct;
    const rule = template.toJSON().Resources[logicalId(env.stack, consumer.outbox?.schedule as IConstruct)];
    expect(rule.Properties).toMatchObject({
      ScheduleExpression: "rate(1 minute)",
      State: "ENABLED",
      Targets: [
        expect.objectContaining({
          Arn: { "Fn::GetAtt": [logicalId(env.stack, relay), "Arn"] },
          RetryPolicy: { MaximumRetryAttempts: 0, MaximumEventAgeInSeconds: 60 },
        }),
      ],
    });
    template.hasResourceProperties("AWS::Lambda::EventInvokeConfig", {
      FunctionName: { Ref: logicalId(env.stack, relay) },
      MaximumRetryAttempts: 0,
      MaximumEventAgeInSeconds: 60,
    });
  });

  const relayAlarms = [
    ["oldestRowAge", "OutboxOldestAgeSeconds", "Maximum", 900],
    ["undelivered", "OutboxUndelivered", "Sum", 0],
    ["relayFailed", "OutboxRelayFailed", "Sum", 0],
    ["alertFailed", "AlertFailed", "Sum", 0],
  ] as const;

  it.each(relayAlarms)(
    "alarms on %s: %s (%s over 5 minutes) of service award-points-outbox above %d",
    (key, metricName, statistic, threshold) => {
      const alarm = consumer.outbox?.alarms[key] as IConstruct;
      expect(template.toJSON().Resources[logicalId(env.stack, alarm)].Properties).toMatchObject({
        AlarmName: expect.stringMatching(/^Test\/AwardPoints\/Outbox[A-Za-z]+Alarm$/),
        Namespace: "jobfence",
        MetricName: metricName,
        Dimensions: [{ Name: "service", Value: "award-points-outbox" }],
        Statistic: statistic,
        Period: 300,
        EvaluationPeriods: 1,
        Threshold: threshold,
        ComparisonOperator: "GreaterThanThreshold",
        TreatMissingData: "notBreaching",
      });
    },
  );

  it("alarms on the relay's invocation errors, and never on FollowUpRelayFailed (the relay covers those)", () => {
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      AlarmName: "Test/AwardPoints/OutboxRelayErrorsAlarm",
      Namespace: "AWS/Lambda",
      MetricName: "Errors",
      Dimensions: [
        {
          Name: "FunctionName",
          Value: { Ref: logicalId(env.stack, consumer.outbox?.relayFunction.function as IConstruct) },
        },
      ],
      Threshold: 0,
    });
    expect(
      template.findResources("AWS::CloudWatch::Alarm", { Properties: { MetricName: "FollowUpRelayFailed" } }),
    ).toEqual({});
    expect(consumer.allAlarms).toEqual([
      ...Object.values(consumer.alarms),
      ...Object.values(consumer.outbox?.alarms ?? {}),
    ]);
    expect(consumer.allAlarms).toHaveLength(15 + 5);
  });

  it("gives a consumer that sends nothing no outbox: no variable, no send grant, no relay, no schedule, no alarm", () => {
    expect(notifyUserConsumer.outbox).toBeUndefined();
    expect(notifyUserConsumer.allAlarms).toEqual(Object.values(notifyUserConsumer.alarms));
    const variables = functionOf("jobfence consumer notify-user").Properties.Environment.Variables;
    expect(variables.JOBFENCE_OUTBOX_QUEUES).toBeUndefined();
    expect(sendsOf(notifyUserConsumer.consumerFunction.function.role as IConstruct)).toEqual([]);
    expect(
      template.findResources("AWS::Lambda::Function", {
        Properties: { Description: "jobfence outbox relay of notify-user" },
      }),
    ).toEqual({});
    const own = (type: string) =>
      Object.keys(template.findResources(type)).filter((id) => id.startsWith("NotifyUser"));
    expect(own("AWS::Events::Rule")).toEqual([]);
    expect(own("AWS::CloudWatch::Alarm")).toHaveLength(15);
  });

  it("refuses at synth a target without a queue and a queue for a consumer it does not send to, together", () => {
    const local = testEnvironment();
    const elsewhere = new sqs.Queue(local.stack, "Elsewhere");
    expect(problemsOf(build({}, { followUpTargets: { "someone-else": elsewhere } }))).toEqual([
      'sends: "notify-user" has no queue: give followUpTargets["notify-user"], the target consumer\'s source queue',
      'followUpTargets: "someone-else" is not a target of consumer "award-points" (its definition\'s sends): remove it',
    ]);
    expect(problemsOf(build({}, { followUpTargets: undefined }))).toEqual([
      expect.stringMatching(/^sends: "notify-user" has no queue/),
    ]);
    // A consumer that sends nothing takes no queue either.
    expect(
      problemsOf(build({ definition: notifyUser.definition }, { followUpTargets: { x: elsewhere } })),
    ).toEqual([expect.stringMatching(/^followUpTargets: "x" is not a target of consumer "notify-user"/)]);
  });

  it("sends a consumer's follow-ups to itself on its own queue, which it need not be given", () => {
    const local = testEnvironment();
    const selfSending = new JobConsumer(local.stack, "SelfSending", {
      ...jobConsumerProps({
        ...notifyUser,
        definition: { ...notifyUser.definition, sends: { "notify-user": notifyUser.definition.payload } },
      }),
      database: local.database,
      opsBus: local.opsBus,
    });
    expect(selfSending.outbox?.targets).toEqual({ "notify-user": selfSending.queue });
    Template.fromStack(local.stack).hasResourceProperties("AWS::Lambda::Function", {
      Description: "jobfence outbox relay of notify-user",
      Environment: {
        Variables: Match.objectLike({
          JOBFENCE_OUTBOX_QUEUES: {
            "Fn::Join": ["", ['{"notify-user":"', { Ref: logicalId(local.stack, selfSending.queue) }, '"}']],
          },
        }),
      },
    });
  });
});
