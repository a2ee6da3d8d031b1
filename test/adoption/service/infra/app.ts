/**
 * The service's own CDK app with jobfence/cdk: its consumer from its own entry and definition, the
 * dead-letter API, cleanup, the bulk worker, migrations and the doctor, alerting to the team's own
 * SNS topic (no vendor), checked by cdk-nag's AwsSolutions pack: a finding fails the synth.
 */
import { fileURLToPath } from "node:url";
import { App, Stack, Validations } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as eventsTargets from "aws-cdk-lib/aws-events-targets";
import * as lambda from "aws-cdk-lib/aws-lambda";
import * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import * as sns from "aws-cdk-lib/aws-sns";
import { AwsSolutionsChecks } from "cdk-nag";
import {
  BulkOperationsWorker,
  DatabaseAccess,
  DatabaseMigrations,
  DeadLetterApi,
  Doctor,
  FenceCleanup,
  JobConsumer,
  OpsAlerting,
} from "jobfence/cdk";
import { recordPayment } from "../src/consumer.js";

const app = new App({ outdir: fileURLToPath(new URL("../../cdk.out", import.meta.url)) });
Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
const stack = new Stack(app, "Billing", { env: { account: "123456789012", region: "eu-west-1" } });

const vpc = new ec2.Vpc(stack, "Vpc", { natGateways: 1, maxAzs: 2, flowLogs: { all: {} } });
/** The service's database logins: its own secrets, rotated by its own runbook. */
const login = (id: string) => {
  const secret = new secretsmanager.Secret(stack, id);
  Validations.of(secret).acknowledge({
    id: "AwsSolutions-SMG4",
    reason: "Rotated by the billing team's runbook.",
  });
  return secret;
};
const database = DatabaseAccess.fromAttributes({
  vpc,
  securityGroup: new ec2.SecurityGroup(stack, "DatabaseClients", { vpc }),
  endpoint: "billing-db.internal.example.com",
  secrets: {
    migrator: login("MigratorLogin"),
    ops: login("OpsLogin"),
    cleanup: login("CleanupLogin"),
    consumers: { "record-payment": login("RecordPaymentLogin") },
  },
});

const pager = new sns.Topic(stack, "Pager", { enforceSSL: true });
const alerting = new OpsAlerting(stack, "Alerting", {
  targets: [new eventsTargets.SnsTopic(pager)],
  alarmEmails: ["billing-oncall@example.com"],
});

const payments = new JobConsumer(stack, "RecordPayment", {
  entry: fileURLToPath(new URL("../../src/handler.ts", import.meta.url)),
  definition: recordPayment,
  runtime: lambda.Runtime.NODEJS_22_X,
  database,
  opsBus: alerting.bus,
});
const api = new DeadLetterApi(stack, "DeadLetters", {
  database,
  jwtIssuer: "https://auth.billing.example.com",
  jwtAudience: "billing-ops",
  consumerQueues: [payments.queue],
});
const bulk = new BulkOperationsWorker(stack, "Bulk", { database, consumerQueues: [payments.queue] });
const cleanup = new FenceCleanup(stack, "Cleanup", { database, opsBus: alerting.bus });
const doctor = new Doctor(stack, "Doctor", { database, consumers: [payments] });
new DatabaseMigrations(stack, "Migrations", { database, consumers: [payments] });
alerting.notifyAlarmTopic([
  ...payments.allAlarms,
  ...Object.values(api.alarms),
  ...Object.values(bulk.alarms),
  ...Object.values(cleanup.alarms),
  ...Object.values(doctor.alarms),
]);

const assembly = app.synth();
console.log(`synthesized ${assembly.stacks.map((s) => s.stackName).join(", ")} into ${assembly.directory}`);
