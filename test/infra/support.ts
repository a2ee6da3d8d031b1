/** Shared set-up of the infra tests: a stack with a VPC, an ops bus and a database to connect to. */
import { App, type CfnElement, CfnResource, Stack } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as events from "aws-cdk-lib/aws-events";
import * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import type { IConstruct } from "constructs";
import { DATABASE_LOGINS, DatabaseAccess, type DatabaseSecrets } from "../../infra/constructs/database.ts";

/** An app; bundling is skipped unless asked for (it is tested once, in the reference stack). */
export function testApp(options: { bundle?: boolean } = {}): App {
  return new App({ context: options.bundle ? {} : { "aws:cdk:bundling-stacks": [] } });
}

/** What a construct under test needs around it. */
export interface TestEnvironment {
  readonly stack: Stack;
  readonly vpc: ec2.Vpc;
  readonly opsBus: events.EventBus;
  readonly database: DatabaseAccess;
  readonly databaseSecurityGroup: ec2.SecurityGroup;
  readonly secrets: DatabaseSecrets<secretsmanager.Secret>;
}

/** The consumers the infra tests deploy; each has a login secret in {@link testEnvironment}. */
export const TEST_CONSUMERS = ["award-points", "notify-user", "ordered-points", "ordered-default"] as const;

/** A stack with a VPC, an ops bus and a database with a secret per shared login and per consumer. */
export function testEnvironment(
  app: App = testApp(),
  consumers: readonly string[] = TEST_CONSUMERS,
): TestEnvironment {
  const stack = new Stack(app, "Test", { env: { account: "123456789012", region: "eu-west-1" } });
  const vpc = new ec2.Vpc(stack, "Vpc", { natGateways: 1, maxAzs: 2 });
  const databaseSecurityGroup = new ec2.SecurityGroup(stack, "DbSg", { vpc });
  const opsBus = new events.EventBus(stack, "Ops", { eventBusName: "jobfence-ops" });
  const shared = Object.fromEntries(
    Object.keys(DATABASE_LOGINS).map((login) => [login, new secretsmanager.Secret(stack, `${login}Secret`)]),
  ) as Record<keyof typeof DATABASE_LOGINS, secretsmanager.Secret>;
  const secrets: DatabaseSecrets<secretsmanager.Secret> = {
    ...shared,
    consumers: Object.fromEntries(
      consumers.map((name) => [name, new secretsmanager.Secret(stack, `ConsumerSecret-${name}`)]),
    ),
  };
  const database = DatabaseAccess.fromAttributes({
    vpc,
    securityGroup: databaseSecurityGroup,
    endpoint: "db.example.internal",
    secrets,
  });
  return { stack, vpc, opsBus, database, databaseSecurityGroup, secrets };
}

/** The logical id of a construct's CloudFormation resource (its default child, or its only CfnResource). */
export function logicalId(stack: Stack, resource: IConstruct): string {
  const child =
    resource.node.defaultChild ??
    (CfnResource.isCfnResource(resource) ? resource : resource.node.children.find(CfnResource.isCfnResource));
  if (!child) throw new Error(`${resource.node.path} has no CloudFormation resource`);
  return stack.getLogicalId(child as CfnElement);
}

/**
 * The environment `DatabaseAccess.connect` gives a function of {@link testEnvironment}: the
 * endpoint and the ARN of its login's secret, nothing secret.
 */
export function databaseVariables(stack: Stack, secret: IConstruct): Record<string, unknown> {
  return {
    JOBFENCE_DB_SECRET_ARN: { Ref: logicalId(stack, secret) },
    JOBFENCE_DB_HOST: "db.example.internal",
    JOBFENCE_DB_PORT: "5432",
    JOBFENCE_DB_NAME: "jobfence",
    JOBFENCE_DB_SSLMODE: "verify-full",
    NODE_EXTRA_CA_CERTS: "/var/runtime/ca-cert.pem",
  };
}
