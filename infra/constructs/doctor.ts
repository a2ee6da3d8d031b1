/**
 * The doctor, deployed: `functions/doctor` once a day as the ops login (which reads the catalogs
 * but not the migration history), checking the database's roles, grants, memberships, definer
 * functions, row-level security and ownership against what the migrations create, and each
 * consumer's queues against its validated configuration. It may describe those queues
 * (GetQueueUrl, GetQueueAttributes) and nothing else. What each consumer's definition declares it
 * works on outside core (its `data`) is checked too, carried in the function's environment. Two
 * alarms: any finding (`DoctorFindings` above 0), and the function's errors (a run that failed
 * reports no findings at all).
 */
import { ArnFormat, Stack } from "aws-cdk-lib";
import type * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import * as events from "aws-cdk-lib/aws-events";
import * as targets from "aws-cdk-lib/aws-events-targets";
import * as iam from "aws-cdk-lib/aws-iam";
import { Construct } from "constructs";
import { DOCTOR_ENV, DOCTOR_METRIC, DOCTOR_SERVICE } from "../../functions/doctor/config.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { DOCTOR_DEFAULTS } from "../defaults.ts";
import { alarmFactory } from "./alarms.ts";
import type { DatabaseAccess } from "./database.ts";
import { jobfenceEntry } from "./entries.ts";
import type { JobConsumer } from "./job-consumer.ts";
import { JobfenceFunction } from "./jobfence-function.ts";
import { jobfenceMetric } from "./metrics.ts";

/** Lambda's limit on a function's environment, every variable together. */
const LAMBDA_ENVIRONMENT_BYTES = 4096;
/** What the doctor's expected queues may take of it: the database's variables need the rest. */
const EXPECTED_QUEUES_BYTES = 3072;

/** Props of {@link Doctor}. */
export interface DoctorProps {
  readonly database: DatabaseAccess;
  /**
   * The deployment's consumers: their queues, found by name, are checked against what each
   * JobConsumer validated and deployed (its `expectedQueues`), and the database against what each
   * one's definition declares (its `data`).
   */
  readonly consumers: readonly Pick<JobConsumer, "expectedQueues" | "deployment">[];
  /**
   * The UTC hour of the daily run.
   * @default DOCTOR_DEFAULTS.hourUtc (6)
   */
  readonly hourUtc?: number;
  /** Where the alarms notify. @default none (the alarms are still created) */
  readonly alarmActions?: readonly cloudwatch.IAlarmAction[];
  /**
   * The doctor function's entry point, an absolute path exporting `handler`: a deployment that has
   * jobfence run sets of its own besides `core` (this repository's reference deployment).
   * @default jobfence's own, which checks `core` and the declarations
   */
  readonly entry?: string;
}

/** The doctor function, its daily schedule and its alarms. */
export class Doctor extends Construct {
  readonly doctorFunction: JobfenceFunction;
  /** Once a day. */
  readonly schedule: events.Rule;
  readonly alarms: { readonly findings: cloudwatch.Alarm; readonly errors: cloudwatch.Alarm };

  constructor(scope: Construct, id: string, props: DoctorProps) {
    super(scope, id);
    const hour = props.hourUtc ?? DOCTOR_DEFAULTS.hourUtc;
    const problems: string[] = [];
    if (!Number.isInteger(hour) || hour < 0 || hour > 23) {
      problems.push(`hourUtc must be a whole hour 0–23, got ${hour}`);
    }
    const expected = props.consumers.map((consumer) => consumer.expectedQueues);
    const expectedJson = JSON.stringify(expected);
    const queuesTooLarge = Buffer.byteLength(expectedJson) > EXPECTED_QUEUES_BYTES;
    if (queuesTooLarge) {
      problems.push(
        `the expected queues of ${props.consumers.length} consumers take ${Buffer.byteLength(expectedJson)} bytes of ` +
          `${DOCTOR_ENV.expectedQueues}, more than the ${EXPECTED_QUEUES_BYTES} the function's environment leaves ` +
          `them (Lambda allows ${LAMBDA_ENVIRONMENT_BYTES} in all); split the consumers across doctors`,
      );
    }
    const declarations = props.consumers.map((consumer) => ({
      consumer: consumer.expectedQueues.consumer,
      data: consumer.deployment.definition.data ?? {},
    }));
    const declarationsJson = JSON.stringify(declarations);
    const together = Buffer.byteLength(expectedJson) + Buffer.byteLength(declarationsJson);
    if (!queuesTooLarge && together > EXPECTED_QUEUES_BYTES) {
      problems.push(
        `the expected queues and declared data of ${props.consumers.length} consumers take ${together} bytes of ` +
          `${DOCTOR_ENV.expectedQueues} and ${DOCTOR_ENV.declarations}, more than the ${EXPECTED_QUEUES_BYTES} the ` +
          `function's environment leaves them (Lambda allows ${LAMBDA_ENVIRONMENT_BYTES} in all); split the consumers across doctors`,
      );
    }
    if (problems.length > 0) throw new ConfigurationError("Doctor", problems);

    this.doctorFunction = new JobfenceFunction(this, "Doctor", {
      entry: props.entry ?? jobfenceEntry("doctor"),
      description: "jobfence doctor: the database and queues against what jobfence intends",
      timeout: DOCTOR_DEFAULTS.timeout,
      database: props.database,
      login: "ops",
      environment: {
        [DOCTOR_ENV.expectedQueues]: expectedJson,
        [DOCTOR_ENV.declarations]: declarationsJson,
      },
      // The migration history check reads the migration sets' files beside their modules, and
      // the catalog checks the committed descriptions of core and of each consumer's schemas
      // (see bundle-with-files.ts).
      bundleWithFiles: true,
    });
    const stack = Stack.of(this);
    const queueArns = expected.flatMap((e) =>
      [e.source.name, e.backstop.name].map((name) =>
        stack.formatArn({ service: "sqs", resource: name, arnFormat: ArnFormat.NO_RESOURCE_NAME }),
      ),
    );
    if (queueArns.length > 0) {
      this.doctorFunction.function.addToRolePolicy(
        new iam.PolicyStatement({
          actions: ["sqs:GetQueueUrl", "sqs:GetQueueAttributes"],
          resources: queueArns,
        }),
      );
    }
    this.schedule = new events.Rule(this, "Schedule", {
      description: "jobfence doctor, daily",
      schedule: events.Schedule.cron({ minute: "0", hour: String(hour) }),
      targets: [new targets.LambdaFunction(this.doctorFunction.function, { retryAttempts: 2 })],
    });

    const alarm = alarmFactory(this, { actions: props.alarmActions });
    this.alarms = {
      findings: alarm(
        "FindingsAlarm",
        jobfenceMetric(DOCTOR_SERVICE, DOCTOR_METRIC.findings, {
          statistic: "Maximum",
          period: DOCTOR_DEFAULTS.alarmPeriod,
        }),
        0,
        "jobfence doctor: the database or a queue differs from what jobfence intends; its log lists each finding and what to do (docs/operations.md, Doctor)",
      ),
      errors: alarm(
        "ErrorsAlarm",
        this.doctorFunction.function.metricErrors({ period: DOCTOR_DEFAULTS.alarmPeriod, statistic: "Sum" }),
        0,
        "jobfence doctor failed to run, so nothing was checked",
      ),
    };
  }
}
