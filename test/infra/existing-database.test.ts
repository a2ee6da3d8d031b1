/**
 * The reference stack on an existing database: imported VPC, security group and per-login secrets
 * (one per consumer besides the shared logins), refused at synth when a consumer has none.
 */
import type { CfnElement } from "aws-cdk-lib";
import { Template } from "aws-cdk-lib/assertions";
import { AwsSolutionsChecks } from "cdk-nag";
import { beforeAll, describe, expect, it } from "vitest";
import { JobfenceStack, type JobfenceStackProps } from "../../infra/reference-stack.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { testApp } from "./support.ts";

const SECRET = (login: string) =>
  `arn:aws:secretsmanager:eu-west-1:123456789012:secret:jobfence/db/${login}-AbCdEf`;
let stack: JobfenceStack;
let template: Template;

const importedProps = (provisionLogins?: boolean): JobfenceStackProps =>
  ({
    env: { account: "123456789012", region: "eu-west-1" },
    jwtIssuer: "https://auth.example.com",
    jwtAudience: "jobfence-ops",
    betterStackEndpoint: "https://in.logs.betterstack.com",
    betterStackSecretName: "jobfence/betterstack",
    emailProviderUrl: "https://email.example.com",
    existingDatabase: {
      vpcId: "vpc-0123456789abcdef0",
      securityGroupId: "sg-0123456789abcdef0",
      endpoint: "jobfence.proxy-abc.eu-west-1.rds.amazonaws.com",
      databaseName: "orders",
      secrets: {
        migrator: SECRET("migrator"),
        ops: SECRET("ops"),
        cleanup: SECRET("cleanup"),
        consumers: {
          "award-points": SECRET("consumer/award-points"),
          "notify-user": SECRET("consumer/notify-user"),
        },
      },
      ...(provisionLogins === undefined ? {} : { provisionLogins }),
    },
  }) as const;

beforeAll(() => {
  stack = new JobfenceStack(testApp(), "Imported", importedProps());
  template = Template.fromStack(stack);
});

describe("reference stack on an existing database", () => {
  it("has zero unacknowledged cdk-nag AwsSolutions findings", () => {
    const report = new AwsSolutionsChecks().validateScope(stack);
    expect(report.violations.map((v) => v.ruleName)).toEqual([]);
  });

  it("creates no database, VPC or database secrets of its own (its one secret is the API's signing key)", () => {
    for (const type of ["AWS::RDS::DBCluster", "AWS::RDS::DBProxy", "AWS::EC2::VPC"]) {
      expect(Object.keys(template.findResources(type)), type).toEqual([]);
    }
    expect(Object.keys(template.findResources("AWS::SecretsManager::Secret"))).toEqual([
      stack.getLogicalId(stack.api.signingKey.node.defaultChild as CfnElement),
    ]);
  });

  it("connects each function as its own login, through the given endpoint and database", () => {
    const fns = Object.values(template.findResources("AWS::Lambda::Function")).filter(
      (f) => f.Properties.Environment?.Variables?.JOBFENCE_DB_SECRET_ARN,
    );
    const variablesOf = (description: string) =>
      fns.find((f) => f.Properties.Description === description)?.Properties.Environment.Variables;
    const expectations: Array<[string, string]> = [
      ["jobfence consumer award-points", "consumer/award-points"],
      ["jobfence backstop drain of award-points", "consumer/award-points"],
      ["jobfence outbox relay of award-points", "consumer/award-points"],
      ["jobfence consumer notify-user", "consumer/notify-user"],
      ["jobfence dead-letter API", "ops"],
      ["jobfence bulk-operations worker (bulk replays and discards, in chunks)", "ops"],
      ["jobfence daily escalation of stale pending dead letters", "ops"],
      ["jobfence TTL cleanup of expired fences", "cleanup"],
      ["jobfence database migrations (run on deploy)", "migrator"],
    ];
    for (const [description, login] of expectations) {
      expect(variablesOf(description), description).toMatchObject({
        JOBFENCE_DB_SECRET_ARN: SECRET(login),
        JOBFENCE_DB_HOST: "jobfence.proxy-abc.eu-west-1.rds.amazonaws.com",
        JOBFENCE_DB_PORT: "5432",
        JOBFENCE_DB_NAME: "orders",
        JOBFENCE_DB_SSLMODE: "verify-full",
      });
    }
    expect(fns).toHaveLength(stack.functions.length);
  });

  it("sets no credentials revision: a rotated password needs no deploy", () => {
    for (const fn of Object.values(template.findResources("AWS::Lambda::Function"))) {
      expect(fn.Properties.Environment?.Variables?.JOBFENCE_DB_CREDENTIALS_REVISION).toBeUndefined();
    }
  });

  it("opens the given security group to each function on 5432", () => {
    const rules = Object.values(template.findResources("AWS::EC2::SecurityGroupIngress")).filter(
      (r) => r.Properties.GroupId === "sg-0123456789abcdef0",
    );
    expect(rules).toHaveLength(stack.functions.length);
    for (const rule of rules)
      expect(rule.Properties).toMatchObject({ FromPort: 5432, ToPort: 5432, IpProtocol: "tcp" });
  });

  it("creates the function logins from the given secrets on deploy, unless told a DBA manages them", () => {
    const variables = (t: Template) =>
      Object.values(
        t.findResources("AWS::Lambda::Function", {
          Properties: { Description: "jobfence database migrations (run on deploy)" },
        }),
      )[0]?.Properties.Environment.Variables;
    expect(JSON.parse(variables(template).JOBFENCE_LOGIN_SECRETS)).toEqual([
      { secretArn: SECRET("consumer/award-points"), consumer: "award-points" },
      { secretArn: SECRET("consumer/notify-user"), consumer: "notify-user" },
      { secretArn: SECRET("ops"), memberOf: "jobfence_ops" },
      { secretArn: SECRET("cleanup"), memberOf: "jobfence_cleanup" },
    ]);
    const managed = new JobfenceStack(testApp(), "Managed", importedProps(false));
    expect(variables(Template.fromStack(managed)).JOBFENCE_LOGIN_SECRETS).toBeUndefined();
  });

  it("refuses at synth a consumer without its login's secret, saying what to add, with every other problem", () => {
    const base = importedProps();
    const withSecrets = (secrets: unknown) =>
      new JobfenceStack(testApp(), "Refused", {
        ...base,
        existingDatabase: {
          ...(base.existingDatabase as object),
          secrets,
        } as JobfenceStackProps["existingDatabase"],
      });
    const problemsOf = (secrets: unknown): readonly string[] => {
      try {
        withSecrets(secrets);
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigurationError);
        return (error as ConfigurationError).problems;
      }
      throw new Error("expected a ConfigurationError");
    };
    const shared = { migrator: SECRET("migrator"), ops: SECRET("ops"), cleanup: SECRET("cleanup") };
    expect(problemsOf({ ...shared, consumers: {} })).toEqual([
      'secrets.consumers["award-points"] is missing: add the name or ARN of the secret of consumer award-points\'s login (username and password)',
      'secrets.consumers["notify-user"] is missing: add the name or ARN of the secret of consumer notify-user\'s login (username and password)',
    ]);
    // The single shared consumer login of earlier versions is named as such.
    expect(problemsOf({ ...shared, consumer: SECRET("consumer") })).toEqual([
      'secrets.consumer is no longer used: each consumer logs in as its own user; give secrets.consumers instead, e.g. { "award-points": "<secret name or ARN>" }',
      'secrets.consumers["award-points"] is missing: add the name or ARN of the secret of consumer award-points\'s login (username and password)',
      'secrets.consumers["notify-user"] is missing: add the name or ARN of the secret of consumer notify-user\'s login (username and password)',
    ]);
    expect(
      problemsOf({
        migrator: SECRET("migrator"),
        consumers: { "award-points": "a", "notify-user": "n", award_points: "b" },
      }),
    ).toEqual([
      "secrets.ops is required: the name or ARN of the ops login's secret",
      "secrets.cleanup is required: the name or ARN of the cleanup login's secret",
      'secrets.consumers["award_points"] names no consumer this stack deploys (award-points, notify-user): remove it or correct the name',
    ]);
  });
});
