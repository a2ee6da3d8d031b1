/**
 * The database fields every function's configuration shares: the database is given exactly one
 * way — `DATABASE_URL`, or the login's secret with the endpoint — and both, neither or half of the
 * secret way is refused at start-up, with the variables named, together with every other problem.
 */
import { describe, expect, it } from "vitest";
import { apiConfigFromEnv } from "../../functions/dead-letters-api/config.ts";
import { migrateConfigFromEnv } from "../../functions/migrate/config.ts";
import { drainConfigFromEnv } from "../../shared/backstop/drain.ts";
import { consumerConfigFromEnv, parseConsumerConfig } from "../../shared/config/consumer-config.ts";
import { DATABASE_ENV, databaseConnection } from "../../shared/config/fields.ts";
import { CREDENTIALS_DEFAULTS, sslOption } from "../../shared/db/credentials.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";

const URL = "postgres://jobfence@127.0.0.1:5432/jobfence";
const ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:jobfence/db/ops-AbCdEf";
const BY_SECRET = {
  JOBFENCE_DB_SECRET_ARN: ARN,
  JOBFENCE_DB_HOST: "jobfence.proxy-abc.eu-west-1.rds.amazonaws.com",
  JOBFENCE_DB_NAME: "jobfence",
};

/** Each function's configuration reader, with the variables it needs besides the database. */
const READERS: Array<{
  name: string;
  read: (env: NodeJS.ProcessEnv) => unknown;
  env: Record<string, string>;
}> = [
  { name: "consumer", read: consumerConfigFromEnv, env: { JOBFENCE_OPS_BUS_NAME: "ops" } },
  {
    name: "backstop drain",
    read: drainConfigFromEnv,
    env: {
      JOBFENCE_OPS_BUS_NAME: "ops",
      JOBFENCE_CONSUMER: "award-points",
      JOBFENCE_SOURCE_QUEUE_URL: "https://sqs.eu-west-1.amazonaws.com/123456789012/award-points",
      JOBFENCE_SOURCE_MAX_RECEIVE_COUNT: "19",
    },
  },
  {
    name: "dead-letter API",
    read: apiConfigFromEnv,
    env: {
      JOBFENCE_JWT_ISSUER: "https://issuer.example",
      JOBFENCE_JWT_AUDIENCE: "jobfence",
      JOBFENCE_JWKS_URL: "https://issuer.example/.well-known/jwks.json",
      JOBFENCE_SIGNING_KEY_SECRET_ARN: ARN,
    },
  },
  { name: "migrate", read: migrateConfigFromEnv, env: {} },
];

function problemsOf(fn: () => unknown): readonly string[] {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigurationError);
    return (error as ConfigurationError).problems;
  }
  throw new Error("expected a ConfigurationError");
}

describe("DATABASE_ENV", () => {
  it("names the variables of both ways", () => {
    expect(DATABASE_ENV).toEqual({
      databaseUrl: "DATABASE_URL",
      dbSecretArn: "JOBFENCE_DB_SECRET_ARN",
      dbHost: "JOBFENCE_DB_HOST",
      dbPort: "JOBFENCE_DB_PORT",
      dbName: "JOBFENCE_DB_NAME",
      dbSslMode: "JOBFENCE_DB_SSLMODE",
    });
  });
});

describe("databaseConnection", () => {
  it("is the URL when given one", () => {
    expect(databaseConnection({ databaseUrl: URL })).toEqual({ connectionString: URL });
  });

  it("is the endpoint and secret otherwise, with port 5432 and verify-full by default", () => {
    expect(CREDENTIALS_DEFAULTS).toMatchObject({ port: 5432, sslMode: "verify-full", maxAgeSeconds: 300 });
    expect(databaseConnection({ dbSecretArn: ARN, dbHost: "db.internal", dbName: "orders" })).toEqual({
      secret: { secretArn: ARN, host: "db.internal", port: 5432, database: "orders", sslMode: "verify-full" },
    });
    expect(
      databaseConnection({
        dbSecretArn: ARN,
        dbHost: "db.internal",
        dbName: "orders",
        dbPort: 6432,
        dbSslMode: "require",
      }),
    ).toEqual({
      secret: { secretArn: ARN, host: "db.internal", port: 6432, database: "orders", sslMode: "require" },
    });
  });
});

describe("sslOption", () => {
  it("verifies the certificate for every mode but disable, and the host name except for verify-ca", () => {
    expect(sslOption("disable")).toBe(false);
    expect(sslOption("verify-full")).toEqual({});
    expect(sslOption("require")).toEqual({});
    const ca = sslOption("verify-ca") as { checkServerIdentity: () => unknown };
    expect(ca.checkServerIdentity()).toBeUndefined();
  });
});

describe.each(READERS)("the $name configuration", ({ read, env }) => {
  it("accepts DATABASE_URL alone", () => {
    expect(read({ ...env, DATABASE_URL: URL })).toMatchObject({ databaseUrl: URL });
  });

  it("accepts the secret and the endpoint alone, port and sslmode included", () => {
    expect(
      read({ ...env, ...BY_SECRET, JOBFENCE_DB_PORT: "6432", JOBFENCE_DB_SSLMODE: "verify-ca" }),
    ).toMatchObject({
      dbSecretArn: ARN,
      dbHost: BY_SECRET.JOBFENCE_DB_HOST,
      dbName: "jobfence",
      dbPort: 6432,
      dbSslMode: "verify-ca",
    });
  });

  it("refuses both ways at once", () => {
    expect(problemsOf(() => read({ ...env, DATABASE_URL: URL, ...BY_SECRET }))).toEqual([
      "DATABASE_URL: give the database one way, not both: DATABASE_URL or JOBFENCE_DB_SECRET_ARN with " +
        "JOBFENCE_DB_HOST and JOBFENCE_DB_NAME (also set: JOBFENCE_DB_SECRET_ARN, JOBFENCE_DB_HOST, JOBFENCE_DB_NAME)",
    ]);
  });

  it("refuses neither way", () => {
    expect(problemsOf(() => read(env))).toEqual([
      "DATABASE_URL: required, or instead JOBFENCE_DB_SECRET_ARN with JOBFENCE_DB_HOST and JOBFENCE_DB_NAME " +
        "(the secret of the function's login)",
    ]);
  });

  it("refuses half of the secret way, naming what is missing", () => {
    expect(problemsOf(() => read({ ...env, JOBFENCE_DB_PORT: "5432" }))).toEqual([
      "JOBFENCE_DB_SECRET_ARN: required with JOBFENCE_DB_PORT (the database by secret)",
      "JOBFENCE_DB_HOST: required with JOBFENCE_DB_PORT (the database by secret)",
      "JOBFENCE_DB_NAME: required with JOBFENCE_DB_PORT (the database by secret)",
    ]);
  });

  it("refuses malformed values of the secret way", () => {
    const problems = problemsOf(() =>
      read({
        ...env,
        JOBFENCE_DB_SECRET_ARN: "jobfence/db/ops",
        JOBFENCE_DB_HOST: "db internal",
        JOBFENCE_DB_NAME: "jobfence",
        JOBFENCE_DB_PORT: "70000",
        JOBFENCE_DB_SSLMODE: "prefer",
      }),
    );
    expect(problems.map((p) => p.slice(0, p.indexOf(":"))).sort()).toEqual([
      "JOBFENCE_DB_HOST",
      "JOBFENCE_DB_PORT",
      "JOBFENCE_DB_SECRET_ARN",
      "JOBFENCE_DB_SSLMODE",
    ]);
  });
});

describe("a missing database with other problems", () => {
  it("is reported together with them", () => {
    const problems = problemsOf(() => consumerConfigFromEnv({ JOBFENCE_POOL_MAX: "0" }));
    expect(problems.map((p) => p.slice(0, p.indexOf(":"))).sort()).toEqual([
      "DATABASE_URL",
      "JOBFENCE_OPS_BUS_NAME",
      "JOBFENCE_POOL_MAX",
    ]);
  });

  it("is named by key when the configuration is an object (the local stack, tests)", () => {
    expect(() => parseConsumerConfig({ opsBusName: "ops" })).toThrow(/databaseUrl: required, or instead/);
  });
});
