/**
 * No function's configuration holds a database credential: every function of the reference stack
 * (created database and imported one) is given the endpoint and the ARN of its login's secret,
 * never a `DATABASE_URL`, a CloudFormation dynamic reference to a secret, or anything that looks
 * like a password. Anyone allowed `lambda:GetFunctionConfiguration` learns nothing secret.
 */
import { Template } from "aws-cdk-lib/assertions";
import { beforeAll, describe, expect, it } from "vitest";
import { JobfenceStack, type JobfenceStackProps } from "../../infra/reference-stack.ts";
import { DATABASE_ENV } from "../../shared/config/fields.ts";
import { logicalId, testApp } from "./support.ts";

const SECRET = (login: string) =>
  `arn:aws:secretsmanager:eu-west-1:123456789012:secret:jobfence/db/${login}-AbCdEf`;
const COMMON: JobfenceStackProps = {
  env: { account: "123456789012", region: "eu-west-1" },
  jwtIssuer: "https://auth.example.com",
  jwtAudience: "jobfence-ops",
  betterStackEndpoint: "https://in.logs.betterstack.com",
  betterStackSecretName: "jobfence/betterstack",
  emailProviderUrl: "https://email.example.com",
};

/** Variable names that would carry a credential (secret ARNs are the point, and allowed). */
const CREDENTIAL_NAME = /pass(word)?|passwd|pwd|credential|DATABASE_URL|CONNECTION_STRING|_DSN$/i;
/** Values that would: a dynamic reference resolved into the configuration, or a URL with a user:password. */
const CREDENTIAL_VALUE = [
  /\{\{resolve:secretsmanager/,
  /\{\{resolve:ssm-secure/,
  /SecretString/,
  /:\/\/[^/\s"@]+:[^/\s"@]+@/,
  /password/i,
];

let stacks: Array<{ name: string; stack: JobfenceStack; template: Template }>;

beforeAll(() => {
  const created = new JobfenceStack(testApp(), "Created", COMMON);
  const imported = new JobfenceStack(testApp(), "Imported", {
    ...COMMON,
    existingDatabase: {
      vpcId: "vpc-0123456789abcdef0",
      securityGroupId: "sg-0123456789abcdef0",
      endpoint: "jobfence.proxy-abc.eu-west-1.rds.amazonaws.com",
      secrets: {
        migrator: SECRET("migrator"),
        ops: SECRET("ops"),
        cleanup: SECRET("cleanup"),
        consumers: {
          "award-points": SECRET("consumer/award-points"),
          "notify-user": SECRET("consumer/notify-user"),
        },
      },
    },
  });
  stacks = [
    { name: "created database", stack: created, template: Template.fromStack(created) },
    { name: "imported database", stack: imported, template: Template.fromStack(imported) },
  ];
});

describe.each(["created database", "imported database"])("the reference stack on a %s", (name) => {
  const current = () => stacks.find((s) => s.name === name) as (typeof stacks)[number];

  it("gives no Lambda function of the template a credential in its environment", () => {
    const { template } = current();
    const functions = Object.entries(template.findResources("AWS::Lambda::Function"));
    // The jobfence functions (two consumers with their drains, award-points' outbox relay, six
    // others) and CDK's own.
    expect(functions.length).toBeGreaterThanOrEqual(12);
    for (const [id, fn] of functions) {
      const variables = (fn.Properties.Environment?.Variables ?? {}) as Record<string, unknown>;
      for (const [variable, value] of Object.entries(variables)) {
        expect(variable, `${id}: ${variable}`).not.toMatch(CREDENTIAL_NAME);
        const text = JSON.stringify(value);
        for (const pattern of CREDENTIAL_VALUE) expect(text, `${id}: ${variable}`).not.toMatch(pattern);
      }
    }
  });

  it("gives every jobfence function the endpoint and the ARN of its login's secret instead", () => {
    const { stack, template } = current();
    const resources = template.toJSON().Resources;
    expect(stack.functions.length).toBeGreaterThanOrEqual(11);
    for (const fn of stack.functions) {
      const variables = resources[logicalId(stack, fn.function)].Properties.Environment.Variables;
      const described = resources[logicalId(stack, fn.function)].Properties.Description;
      for (const variable of [
        DATABASE_ENV.dbSecretArn,
        DATABASE_ENV.dbHost,
        DATABASE_ENV.dbPort,
        DATABASE_ENV.dbName,
        DATABASE_ENV.dbSslMode,
      ]) {
        expect(variables[variable], `${described}: ${variable}`).toBeDefined();
      }
      expect(variables[DATABASE_ENV.databaseUrl], described).toBeUndefined();
      expect(variables.JOBFENCE_DB_CREDENTIALS_REVISION, described).toBeUndefined();
      expect(variables[DATABASE_ENV.dbSslMode], described).toBe("verify-full");
    }
  });
});
