/**
 * Every Lambda entry point reads its configuration at init: a missing or malformed variable stops
 * the function before it takes any work, with every problem named by its variable; a complete
 * configuration loads (connections open only when first used).
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import type { ConfigurationError } from "../../shared/errors.ts";

const DATABASE_URL = "postgres://jobfence@127.0.0.1:5432/jobfence";
const ENTRY_POINTS: Array<{ module: string; env: Record<string, string>; required: string[] }> = [
  {
    module: "../../functions/award-points/handler.ts",
    env: { DATABASE_URL, JOBFENCE_OPS_BUS_NAME: "ops" },
    required: ["DATABASE_URL", "JOBFENCE_OPS_BUS_NAME"],
  },
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
  { module: "../../functions/fence-cleanup/handler.ts", env: { DATABASE_URL }, required: ["DATABASE_URL"] },
  { module: "../../functions/bulk-operations/handler.ts", env: { DATABASE_URL }, required: ["DATABASE_URL"] },
  {
    module: "../../functions/escalation/handler.ts",
    env: { DATABASE_URL, JOBFENCE_OPS_BUS_NAME: "ops" },
    required: ["DATABASE_URL", "JOBFENCE_OPS_BUS_NAME"],
  },
];

const ALL_VARIABLES = [...new Set(ENTRY_POINTS.flatMap((e) => [...Object.keys(e.env), ...e.required]))];

afterEach(() => {
  vi.unstubAllEnvs();
  vi.resetModules();
});

function environment(values: Record<string, string>): void {
  for (const name of ALL_VARIABLES) vi.stubEnv(name, values[name] ?? "");
}

describe.each(ENTRY_POINTS)("$module", ({ module, env, required }) => {
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
    const loaded = (await import(module)) as { handler: unknown };
    expect(typeof loaded.handler).toBe("function");
  });
});

describe("the backstop drain's entry point", () => {
  it("refuses a consumer this deployment does not know: it could not fingerprint its jobs as the consumer does", async () => {
    environment({
      DATABASE_URL,
      JOBFENCE_OPS_BUS_NAME: "ops",
      JOBFENCE_CONSUMER: "no-such-consumer",
      JOBFENCE_SOURCE_QUEUE_URL: "https://sqs.eu-west-1.amazonaws.com/123456789012/x",
      JOBFENCE_SOURCE_MAX_RECEIVE_COUNT: "8",
    });
    const error = await import("../../functions/backstop-drain/handler.ts").then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toMatchObject({ name: "ConfigurationError" });
    expect((error as Error).message).toContain("no-such-consumer");
  });
});
