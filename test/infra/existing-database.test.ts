/** The reference stack on an existing database: imported VPC, security group and per-login secrets. */
import type { CfnElement } from "aws-cdk-lib";
import { Template } from "aws-cdk-lib/assertions";
import { AwsSolutionsChecks } from "cdk-nag";
import { beforeAll, describe, expect, it } from "vitest";
import { JobfenceStack } from "../../infra/reference-stack.ts";
import { testApp } from "./support.ts";

const SECRET = (login: string) =>
  `arn:aws:secretsmanager:eu-west-1:123456789012:secret:jobfence/db/${login}-AbCdEf`;
let stack: JobfenceStack;
let template: Template;

const importedProps = (provisionLogins?: boolean) =>
  ({
    env: { account: "123456789012", region: "eu-west-1" },
    jwtIssuer: "https://auth.example.com",
    jwtAudience: "jobfence-ops",
    betterStackEndpoint: "https://in.logs.betterstack.com",
    betterStackSecretName: "jobfence/betterstack",
    databaseCredentialsRevision: "2026-11-29",
    existingDatabase: {
      vpcId: "vpc-0123456789abcdef0",
      securityGroupId: "sg-0123456789abcdef0",
      endpoint: "jobfence.proxy-abc.eu-west-1.rds.amazonaws.com",
      databaseName: "orders",
      secrets: {
        migrator: SECRET("migrator"),
        consumer: SECRET("consumer"),
        ops: SECRET("ops"),
        cleanup: SECRET("cleanup"),
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
      (f) => f.Properties.Environment?.Variables?.DATABASE_URL,
    );
    const loginOf = (description: string) => {
      const fn = fns.find((f) => f.Properties.Description === description);
      return JSON.stringify(fn?.Properties.Environment.Variables.DATABASE_URL);
    };
    const expectations: Array<[string, string]> = [
      ["jobfence consumer award-points", "consumer"],
      ["jobfence backstop drain of award-points", "consumer"],
      ["jobfence dead-letter API", "ops"],
      ["jobfence bulk-operations worker (bulk replays and discards, in chunks)", "ops"],
      ["jobfence daily escalation of stale pending dead letters", "ops"],
      ["jobfence TTL cleanup of expired fences", "cleanup"],
      ["jobfence database migrations (run on deploy)", "migrator"],
    ];
    for (const [description, login] of expectations) {
      const url = loginOf(description);
      expect(url, description).toContain(
        `{{resolve:secretsmanager:${SECRET(login)}:SecretString:password::}}`,
      );
      expect(url, description).toContain(
        "@jobfence.proxy-abc.eu-west-1.rds.amazonaws.com:5432/orders?sslmode=verify-full",
      );
    }
  });

  it("passes the credentials revision to every function, so changing it refreshes their credentials", () => {
    const fns = Object.values(template.findResources("AWS::Lambda::Function")).filter(
      (f) => f.Properties.Environment?.Variables?.DATABASE_URL,
    );
    expect(fns).toHaveLength(stack.functions.length);
    expect(stack.functions).toHaveLength(7);
    for (const fn of fns)
      expect(fn.Properties.Environment.Variables.JOBFENCE_DB_CREDENTIALS_REVISION).toBe("2026-11-29");
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
      { secretArn: SECRET("consumer"), memberOf: "jobfence_consumer" },
      { secretArn: SECRET("ops"), memberOf: "jobfence_ops" },
      { secretArn: SECRET("cleanup"), memberOf: "jobfence_cleanup" },
    ]);
    const managed = new JobfenceStack(testApp(), "Managed", importedProps(false));
    expect(variables(Template.fromStack(managed)).JOBFENCE_LOGIN_SECRETS).toBeUndefined();
  });
});
