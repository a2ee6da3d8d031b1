/**
 * Doctor: the daily check as the ops login, expecting of each consumer's queues exactly what its
 * JobConsumer deploys, allowed to describe those queues only, with an alarm on any finding and
 * one on its errors; its bundle ships the migrations and the committed descriptions of core and of
 * each consumer's schemas.
 */
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { Template } from "aws-cdk-lib/assertions";
import * as sqs from "aws-cdk-lib/aws-sqs";
import type { IConstruct } from "constructs";
import { beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import {
  CONSUMERS,
  type ConsumerDeployment,
  deployedDeliveryTimings,
  expectedQueues,
} from "../../functions/consumers.ts";
import { Doctor, JobConsumer } from "../../infra/cdk.ts";
import { jobConsumerProps } from "../../infra/reference-stack.ts";
import type { ExpectedConsumerQueues } from "../../shared/doctor/check-queues.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { synthesizedReferenceStack } from "../support/synthesized-stack.ts";
import { databaseVariables, logicalId, type TestEnvironment, testEnvironment } from "./support.ts";

const awardPoints = CONSUMERS.find((c) => c.definition.name === "award-points") as ConsumerDeployment;
/** A FIFO consumer with a retry override: its redrive count differs from the default's. */
const orderedPoints: ConsumerDeployment = {
  ...awardPoints,
  fifo: true,
  functionTimeoutSeconds: 60,
  definition: {
    ...awardPointsConsumer,
    name: "ordered-points",
    retry: { maxAttempts: 8, rationale: "the ledger service throttles in bursts" },
  },
};
const DEPLOYMENTS = [awardPoints, orderedPoints];
/** award-points' entry point, which its renamed copy bundles. */
const AWARD_POINTS_ENTRY = jobConsumerProps(awardPoints).entry;

let env: TestEnvironment;
let doctor: Doctor;
let template: Template;

beforeAll(() => {
  env = testEnvironment();
  // Both send follow-ups to notify-user, as award-points does: a queue stands in for its.
  const followUpTargets = { "notify-user": new sqs.Queue(env.stack, "NotifyUserTarget") };
  const consumers = DEPLOYMENTS.map(
    (deployment) =>
      new JobConsumer(env.stack, `Consumer-${deployment.definition.name}`, {
        ...jobConsumerProps(deployment),
        entry: AWARD_POINTS_ENTRY,
        database: env.database,
        opsBus: env.opsBus,
        followUpTargets,
      }),
  );
  doctor = new Doctor(env.stack, "Doctor", { database: env.database, consumers });
  template = Template.fromStack(env.stack);
});

function doctorVariables(): Record<string, unknown> {
  const fn = template.toJSON().Resources[logicalId(env.stack, doctor.doctorFunction.function)];
  return fn.Properties.Environment.Variables;
}

function queueNamed(name: string): Record<string, unknown> {
  const found = Object.values(template.findResources("AWS::SQS::Queue", { Properties: { QueueName: name } }));
  expect(found, name).toHaveLength(1);
  return (found[0] as { Properties: Record<string, unknown> }).Properties;
}

describe("Doctor", () => {
  it("runs daily at 06:00 UTC, retried twice", () => {
    template.hasResourceProperties("AWS::Events::Rule", {
      ScheduleExpression: "cron(0 6 * * ? *)",
      Targets: [
        {
          Arn: { "Fn::GetAtt": [logicalId(env.stack, doctor.doctorFunction.function), "Arn"] },
          Id: "Target0",
          RetryPolicy: { MaximumRetryAttempts: 2 },
        },
      ],
    });
  });

  it("runs on Node 24 arm64 as the ops login, with each consumer's expected queues", () => {
    template.hasResourceProperties("AWS::Lambda::Function", {
      Runtime: "nodejs24.x",
      Architectures: ["arm64"],
      Description: "jobfence doctor: the database and queues against what jobfence intends",
    });
    const variables = doctorVariables();
    expect(variables).toMatchObject(databaseVariables(env.stack, env.secrets.ops));
    const expected = JSON.parse(String(variables.JOBFENCE_DOCTOR_QUEUES)) as ExpectedConsumerQueues[];
    expect(expected.map((e) => [e.consumer, e.source.name, e.backstop.name])).toEqual([
      ["award-points", "award-points", "award-points-backstop"],
      ["ordered-points", "ordered-points.fifo", "ordered-points-backstop.fifo"],
    ]);
  });

  it("expects of each queue exactly what the consumer's JobConsumer deploys", () => {
    const expected = JSON.parse(String(doctorVariables().JOBFENCE_DOCTOR_QUEUES)) as ExpectedConsumerQueues[];
    for (const e of expected) {
      const source = queueNamed(e.source.name);
      const backstop = queueNamed(e.backstop.name);
      expect(source.MessageRetentionPeriod, e.consumer).toBe(e.source.retentionSeconds);
      expect(source.VisibilityTimeout, e.consumer).toBe(e.source.visibilityTimeoutSeconds);
      expect((source.RedrivePolicy as { maxReceiveCount: number }).maxReceiveCount, e.consumer).toBe(
        e.source.maxReceiveCount,
      );
      expect(backstop.MessageRetentionPeriod, e.consumer).toBe(e.backstop.retentionSeconds);
    }
    // The retry override shows: 8 attempts on FIFO redrive later than the default's 5 on standard.
    expect(expected.map((e) => e.source.maxReceiveCount)).toEqual([19, 130]);
    expect(expected.every((e) => e.backstop.retentionSeconds === 14 * 86_400)).toBe(true);
  });

  it("may describe the consumers' queues (GetQueueUrl, GetQueueAttributes) and do nothing else with SQS", () => {
    const statements = Object.values(
      template.findResources("AWS::IAM::Policy", {
        Properties: {
          Roles: [{ Ref: logicalId(env.stack, doctor.doctorFunction.function.role as IConstruct) }],
        },
      }),
    ).flatMap(
      (p) => p.Properties.PolicyDocument.Statement as Array<{ Action: string | string[]; Resource: unknown }>,
    );
    const sqsStatements = statements.filter((s) => [s.Action].flat().some((a) => a.startsWith("sqs:")));
    expect(sqsStatements).toHaveLength(1);
    expect([sqsStatements[0]?.Action].flat().sort()).toEqual(["sqs:GetQueueAttributes", "sqs:GetQueueUrl"]);
    const arn = (name: string) => ({
      "Fn::Join": ["", ["arn:", { Ref: "AWS::Partition" }, `:sqs:eu-west-1:123456789012:${name}`]],
    });
    expect(sqsStatements[0]?.Resource).toEqual(
      ["award-points", "award-points-backstop", "ordered-points.fifo", "ordered-points-backstop.fifo"].map(
        arn,
      ),
    );
  });

  it("alarms on any finding of a run, and on a run that failed", () => {
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      Namespace: "jobfence",
      MetricName: "DoctorFindings",
      Dimensions: [{ Name: "service", Value: "doctor" }],
      Statistic: "Maximum",
      Period: 86_400,
      Threshold: 0,
      ComparisonOperator: "GreaterThanThreshold",
      TreatMissingData: "notBreaching",
    });
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      MetricName: "Errors",
      Namespace: "AWS/Lambda",
      Dimensions: [
        { Name: "FunctionName", Value: { Ref: logicalId(env.stack, doctor.doctorFunction.function) } },
      ],
      Period: 86_400,
      Threshold: 0,
      TreatMissingData: "notBreaching",
    });
    expect(Object.keys(doctor.alarms).sort()).toEqual(["errors", "findings"]);
  });

  it("refuses an hour outside 0–23, and more consumers than its environment can describe", () => {
    const build = (props: { hourUtc?: number; consumers?: readonly ConsumerDeployment[] }) => () =>
      new Doctor(testEnvironment().stack, "Doctor", {
        database: testEnvironment().database,
        consumers: (props.consumers ?? [awardPoints]).map((d) => ({
          expectedQueues: expectedQueues(d, deployedDeliveryTimings(d)),
          deployment: d,
        })),
        ...(props.hourUtc !== undefined ? { hourUtc: props.hourUtc } : {}),
      });
    expect(build({ hourUtc: 24 })).toThrow(ConfigurationError);
    expect(build({ hourUtc: 24 })).toThrow(/hourUtc must be a whole hour 0–23, got 24/);
    const many = Array.from({ length: 40 }, (_, i) => ({
      ...awardPoints,
      definition: { ...awardPointsConsumer, name: `consumer-number-${i}` },
    }));
    expect(build({ consumers: many })).toThrow(/bytes of JOBFENCE_DOCTOR_QUEUES/);
  });
});

describe("the doctor's bundle", () => {
  let dir: string;
  beforeAll(async () => {
    // The reference stack's doctor (every registered consumer), from the run's one bundled synthesis.
    dir = (await synthesizedReferenceStack()).bundleOf(
      "jobfence doctor: the database and queues against what jobfence intends",
    );
  });

  it("ships the committed descriptions of core and of each consumer's schemas, and every migration set, beside the modules that read them", () => {
    expect(readdirSync(dir)).toEqual(expect.arrayContaining(["index.mjs", "index.mjs.map"]));
    expect(existsSync(join(dir, "shared/db/core-catalog.txt"))).toBe(true);
    // Where consumerSchemaFile finds it from the bundled registry module (functions/registry.ts).
    for (const deployment of CONSUMERS) {
      const schema = `functions/${deployment.definition.name}/schema.txt`;
      expect(existsSync(join(dir, schema)), schema).toBe(true);
    }
    expect(existsSync(join(dir, "shared/db/migrations/0001_processed_jobs.sql"))).toBe(true);
    expect(existsSync(join(dir, "functions/award-points/migrations/0001_ledger.sql"))).toBe(true);
  });
});
