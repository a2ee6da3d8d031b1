/**
 * Every Lambda entry point reads its configuration at init: a missing or malformed variable stops
 * the function before it takes any work, with every problem named by its variable; a complete
 * configuration loads (connections open only when first used). The database is given one way:
 * `DATABASE_URL`, or (deployed) the login's secret and the endpoint, in which case the secret is
 * read at init; both, or neither, is refused.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { CONSUMERS } from "../../functions/consumers.ts";
import type { ConfigurationError } from "../../shared/errors/configuration.ts";
import { type LocalSecretsManager, localSecretsManager } from "../support/secrets-manager.ts";

const DATABASE_URL = "postgres://jobfence@127.0.0.1:5432/jobfence";
/** The queue URL of each consumer in `targets`, as JOBFENCE_OUTBOX_QUEUES carries them. */
const outboxQueues = (targets: readonly string[]) =>
  JSON.stringify(
    Object.fromEntries(targets.map((t) => [t, `https://sqs.eu-west-1.amazonaws.com/123456789012/${t}`])),
  );
const ENTRY_POINTS: Array<{
  module: string;
  env: Record<string, string>;
  required: string[];
  consumer?: string;
}> = [
  // Every registered consumer's generated entry point, which must build that consumer; one that
  // sends follow-ups is given its targets' queues, as the deployment gives them.
  ...CONSUMERS.map(({ definition }) => {
    const targets = Object.keys(definition.sends ?? {});
    return {
      module: `../../functions/${definition.name}/handler.ts`,
      env: {
        DATABASE_URL,
        JOBFENCE_OPS_BUS_NAME: "ops",
        ...(targets.length > 0 ? { JOBFENCE_OUTBOX_QUEUES: outboxQueues(targets) } : {}),
      },
      required: ["DATABASE_URL", "JOBFENCE_OPS_BUS_NAME"],
      consumer: definition.name,
    };
  }),
  {
    module: "../../functions/dead-letters-api/handler.ts",
    env: {
      DATABASE_URL,
      JOBFENCE_JWT_ISSUER: "https://issuer.example",
      JOBFENCE_JWT_AUDIENCE: "jobfence",
      JOBFENCE_JWKS_URL: "https://issuer.example/.well-known/jwks.json",
      JOBFENCE_SIGNING_KEY_SECRET_ARN:
        "arn:aws:secretsmanager:eu-west-1:123456789012:secret:jobfence-api-key-AbCdEf",
    },
    required: [
      "DATABASE_URL",
      "JOBFENCE_JWT_ISSUER",
      "JOBFENCE_JWT_AUDIENCE",
      "JOBFENCE_SIGNING_KEY_SECRET_ARN",
    ],
  },
  {
    module: "../../functions/backstop-drain/handler.ts",
    env: {
      DATABASE_URL,
      JOBFENCE_OPS_BUS_NAME: "ops",
      JOBFENCE_CONSUMER: "award-points",
      JOBFENCE_SOURCE_QUEUE_URL: "https://sqs.eu-west-1.amazonaws.com/123456789012/award-points",
      JOBFENCE_SOURCE_MAX_RECEIVE_COUNT: "8",
    },
    required: ["JOBFENCE_CONSUMER", "JOBFENCE_SOURCE_QUEUE_URL", "JOBFENCE_SOURCE_MAX_RECEIVE_COUNT"],
  },
  {
    module: "../../functions/backstop-drain/reference-handler.ts",
    env: {
      DATABASE_URL,
      JOBFENCE_OPS_BUS_NAME: "ops",
      JOBFENCE_CONSUMER: "award-points",
      JOBFENCE_SOURCE_QUEUE_URL: "https://sqs.eu-west-1.amazonaws.com/123456789012/award-points",
      JOBFENCE_SOURCE_MAX_RECEIVE_COUNT: "8",
    },
    required: ["JOBFENCE_CONSUMER", "JOBFENCE_SOURCE_QUEUE_URL", "JOBFENCE_SOURCE_MAX_RECEIVE_COUNT"],
  },
  {
    module: "../../functions/outbox-relay/handler.ts",
    env: {
      DATABASE_URL,
      JOBFENCE_OPS_BUS_NAME: "ops",
      JOBFENCE_CONSUMER: "award-points",
      JOBFENCE_OUTBOX_QUEUES: outboxQueues(["notify-user"]),
    },
    required: ["DATABASE_URL", "JOBFENCE_OPS_BUS_NAME", "JOBFENCE_CONSUMER", "JOBFENCE_OUTBOX_QUEUES"],
  },
  { module: "../../functions/fence-cleanup/handler.ts", env: { DATABASE_URL }, required: ["DATABASE_URL"] },
  { module: "../../functions/bulk-operations/handler.ts", env: { DATABASE_URL }, required: ["DATABASE_URL"] },
  {
    module: "../../functions/escalation/handler.ts",
    env: { DATABASE_URL, JOBFENCE_OPS_BUS_NAME: "ops" },
    required: ["DATABASE_URL", "JOBFENCE_OPS_BUS_NAME"],
  },
  {
    module: "../../functions/doctor/handler.ts",
    env: {
      DATABASE_URL,
      JOBFENCE_DOCTOR_QUEUES: JSON.stringify([
        {
          consumer: "award-points",
          source: {
            name: "award-points",
            retentionSeconds: 345600,
            visibilityTimeoutSeconds: 180,
            maxReceiveCount: 19,
          },
          backstop: { name: "award-points-backstop", retentionSeconds: 1209600 },
        },
      ]),
    },
    required: ["DATABASE_URL", "JOBFENCE_DOCTOR_QUEUES"],
  },
  {
    module: "../../functions/doctor/reference-handler.ts",
    env: {
      DATABASE_URL,
      JOBFENCE_DOCTOR_QUEUES: JSON.stringify([
        {
          consumer: "award-points",
          source: {
            name: "award-points",
            retentionSeconds: 345600,
            visibilityTimeoutSeconds: 180,
            maxReceiveCount: 19,
          },
          backstop: { name: "award-points-backstop", retentionSeconds: 1209600 },
        },
      ]),
    },
    required: ["DATABASE_URL", "JOBFENCE_DOCTOR_QUEUES"],
  },
];

const DB_SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:jobfence/db/ops-AbCdEf";
/** The database by secret, as the CDK constructs set it. */
const BY_SECRET = {
  JOBFENCE_DB_SECRET_ARN: DB_SECRET_ARN,
  JOBFENCE_DB_HOST: "jobfence.proxy-abc.eu-west-1.rds.amazonaws.com",
  JOBFENCE_DB_PORT: "5432",
  JOBFENCE_DB_NAME: "jobfence",
  JOBFENCE_DB_SSLMODE: "verify-full",
};
const AWS_VARIABLES = [
  "AWS_ENDPOINT_URL_SECRETS_MANAGER",
  "AWS_REGION",
  "AWS_ACCESS_KEY_ID",
  "AWS_SECRET_ACCESS_KEY",
];
const ALL_VARIABLES = [
  ...new Set([
    ...ENTRY_POINTS.flatMap((e) => [...Object.keys(e.env), ...e.required]),
    ...Object.keys(BY_SECRET),
    ...AWS_VARIABLES,
  ]),
];

/** The entry point's variables with the database given by secret instead of DATABASE_URL. */
function bySecret(env: Record<string, string>): Record<string, string> {
  const { DATABASE_URL: _url, ...rest } = env;
  return { ...rest, ...BY_SECRET };
}

let secretsManager: LocalSecretsManager;
/** Variables that point the SDK at the local Secrets Manager. */
let awsEnv: Record<string, string>;
beforeAll(async () => {
  secretsManager = await localSecretsManager({
    [DB_SECRET_ARN]: JSON.stringify({ username: "jobfence_ops_login", password: "not-used-here" }),
  });
  const endpoint = await secretsManager.client.config.endpoint?.();
  awsEnv = {
    AWS_ENDPOINT_URL_SECRETS_MANAGER: `${endpoint?.protocol}//${endpoint?.hostname}:${endpoint?.port}`,
    AWS_REGION: "eu-west-1",
    AWS_ACCESS_KEY_ID: "local",
    AWS_SECRET_ACCESS_KEY: "local",
  };
});
afterAll(async () => {
  await secretsManager?.close();
});

afterEach(() => {
  vi.unstubAllEnvs();
  vi.resetModules();
});

function environment(values: Record<string, string>): void {
  for (const name of ALL_VARIABLES) vi.stubEnv(name, values[name] ?? "");
}

describe.each(ENTRY_POINTS)("$module", ({ module, env, required, consumer }) => {
  it("refuses to start without its configuration, naming every missing variable", async () => {
    environment({});
    const error = await import(module).then(
      () => undefined,
      (e: unknown) => e,
    );
    // resetModules gives each import its own copy of shared/errors.ts: compare by name, not class.
    expect(error).toMatchObject({ name: "ConfigurationError" });
    for (const variable of required) expect((error as ConfigurationError).message).toContain(variable);
  });

  it("refuses a malformed database URL", async () => {
    environment({ ...env, DATABASE_URL: "mysql://nope" });
    await expect(import(module)).rejects.toThrow(/DATABASE_URL: must be a postgres:\/\/ connection string/);
  });

  it("loads with a complete configuration", async () => {
    environment(env);
    const loaded = (await import(module)) as { handler: { consumer?: string } };
    expect(typeof loaded.handler).toBe("function");
    if (consumer !== undefined) expect(loaded.handler.consumer).toBe(consumer);
  });

  it("loads with the database given by secret and endpoint, and reads the secret at init", async () => {
    secretsManager.requests.length = 0;
    environment({ ...bySecret(env), ...awsEnv });
    const loaded = (await import(module)) as { handler: unknown };
    expect(typeof loaded.handler).toBe("function");
    await expect.poll(() => secretsManager.requests).toContain(DB_SECRET_ARN);
  });

  it("refuses the database given both ways, naming the variables", async () => {
    environment({ ...env, ...BY_SECRET });
    await expect(import(module)).rejects.toThrow(
      /DATABASE_URL: give the database one way, not both: .*also set: JOBFENCE_DB_SECRET_ARN, JOBFENCE_DB_HOST, JOBFENCE_DB_PORT, JOBFENCE_DB_NAME, JOBFENCE_DB_SSLMODE/,
    );
  });

  it("refuses an incomplete secret way, naming what is missing", async () => {
    const { DATABASE_URL: _url, ...rest } = env;
    environment({ ...rest, JOBFENCE_DB_HOST: BY_SECRET.JOBFENCE_DB_HOST });
    const error = await import(module).then(
      () => undefined,
      (e: unknown) => e as ConfigurationError,
    );
    expect(error?.message).toMatch(/JOBFENCE_DB_SECRET_ARN: required with JOBFENCE_DB_HOST/);
    expect(error?.message).toMatch(/JOBFENCE_DB_NAME: required with JOBFENCE_DB_HOST/);
  });
});

describe("the backstop drain's entry points", () => {
  const unknownConsumer = {
    DATABASE_URL,
    JOBFENCE_OPS_BUS_NAME: "ops",
    JOBFENCE_CONSUMER: "no-such-consumer",
    JOBFENCE_SOURCE_QUEUE_URL: "https://sqs.eu-west-1.amazonaws.com/123456789012/x",
    JOBFENCE_SOURCE_MAX_RECEIVE_COUNT: "8",
  };

  it("the package's serves any consumer: it knows no registry, and needs no definition", async () => {
    environment(unknownConsumer);
    const loaded = (await import("../../functions/backstop-drain/handler.ts")) as { handler: unknown };
    expect(typeof loaded.handler).toBe("function");
  });

  it("the reference deployment's refuses a consumer its registry does not know: it could not fingerprint its jobs as the consumer does", async () => {
    environment(unknownConsumer);
    const error = await import("../../functions/backstop-drain/reference-handler.ts").then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toMatchObject({ name: "ConfigurationError" });
    expect((error as Error).message).toContain("no-such-consumer");
  });
});
