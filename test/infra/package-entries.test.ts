/**
 * jobfence's own functions as a user's CDK app deploys them, with no registry: the constructs carry
 * in the functions' environment what the package's entries used to read from this repository's
 * registry (the consumers' follow-up targets for the migrate function, their declared data for the
 * doctor), the backstop drain needs the user's own entry for a definition with a custom
 * `fingerprint` (refused at synth without one), and the reference stack gives its own reference
 * entries, which keep what only its registry knows.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Template } from "aws-cdk-lib/assertions";
import * as sqs from "aws-cdk-lib/aws-sqs";
import { beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { CONSUMERS, type ConsumerDeployment } from "../../functions/consumers.ts";
import { notifyUserConsumer } from "../../functions/notify-user/consumer.ts";
import { DatabaseMigrations, Doctor, JobConsumer } from "../../infra/cdk.ts";
import { jobConsumerProps, REFERENCE_ENTRIES } from "../../infra/reference-stack.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { synthesizedReferenceStack } from "../support/synthesized-stack.ts";
import { logicalId, type TestEnvironment, testEnvironment } from "./support.ts";

const deploymentOf = (name: string) =>
  CONSUMERS.find((c) => c.definition.name === name) as ConsumerDeployment;
/** A consumer's entry, as a user's app gives it (the drain's is the user's choice, not the registry's). */
const entryOf = (name: string) => jobConsumerProps(deploymentOf(name)).entry;

/** The environment of the function `fn` in `template`. */
function variablesOf(env: TestEnvironment, template: Template, fn: JobConsumer["drainFunction"]) {
  return template.toJSON().Resources[logicalId(env.stack, fn.function)].Properties.Environment.Variables;
}

describe("JobConsumer's backstop drain", () => {
  const build = (props: { fingerprint?: boolean; drainEntry?: string }) => () => {
    const env = testEnvironment();
    return new JobConsumer(env.stack, "NotifyUser", {
      entry: entryOf("notify-user"),
      definition: {
        ...notifyUserConsumer,
        ...(props.fingerprint ? { fingerprint: (p: { user_id: string }) => p.user_id } : {}),
      },
      ...(props.drainEntry ? { drainEntry: props.drainEntry } : {}),
      database: env.database,
      opsBus: env.opsBus,
    });
  };

  it("refuses a definition with a custom fingerprint and no drainEntry, naming the fix", () => {
    expect(build({ fingerprint: true })).toThrow(ConfigurationError);
    expect(build({ fingerprint: true })).toThrow(/custom fingerprint.*give drainEntry/);
    expect(build({ fingerprint: true })).toThrow(
      /createBackstopDrain\(drainConfigFromEnv\(\), \{ definition \}\)/,
    );
  });

  it("takes it with a drainEntry of the user's own, and a definition without one with jobfence's drain", () => {
    expect(build({ fingerprint: true, drainEntry: entryOf("notify-user") })).not.toThrow();
    expect(build({})).not.toThrow();
  });

  it("refuses a drainEntry that is not a file there, naming the drain", () => {
    expect(build({ fingerprint: true, drainEntry: "/nowhere/drain.ts" })).toThrow(/nowhere\/drain\.ts/);
  });
});

describe("DatabaseMigrations given the consumers", () => {
  let env: TestEnvironment;
  let consumers: JobConsumer[];
  let migrations: DatabaseMigrations;
  let template: Template;
  beforeAll(() => {
    env = testEnvironment();
    const notifyUser = new JobConsumer(env.stack, "NotifyUser", {
      entry: entryOf("notify-user"),
      definition: notifyUserConsumer,
      database: env.database,
      opsBus: env.opsBus,
    });
    const awardPoints = new JobConsumer(env.stack, "AwardPoints", {
      entry: entryOf("award-points"),
      definition: awardPointsConsumer,
      fenceTtlSeconds: 30 * 86_400,
      followUpTargets: { "notify-user": notifyUser.queue },
      database: env.database,
      opsBus: env.opsBus,
    });
    consumers = [awardPoints, notifyUser];
    migrations = new DatabaseMigrations(env.stack, "Migrations", { database: env.database, consumers });
    template = Template.fromStack(env.stack);
  });

  it("registers each one's follow-up targets, those sending nothing too (a dropped target is revoked)", () => {
    const variables = variablesOf(env, template, migrations.migrateFunction);
    expect(JSON.parse(variables.JOBFENCE_FOLLOW_UP_TARGETS)).toEqual({
      "award-points": ["notify-user"],
      "notify-user": [],
    });
    expect(JSON.parse(variables.JOBFENCE_CONSUMER_FENCE_TTLS)).toEqual({
      "award-points": 30 * 86_400,
      "notify-user": 21 * 86_400,
    });
    expect(variables.JOBFENCE_CONSUMER_QUEUES).toBeDefined();
  });

  it("refuses consumers and consumerQueues together, neither, and consumerQueues hiding a sender", () => {
    const queues = Object.fromEntries(consumers.map((c) => [c.consumerName, c.queue]));
    expect(
      () =>
        new DatabaseMigrations(env.stack, "Both", {
          database: env.database,
          consumers,
          consumerQueues: queues,
        }),
    ).toThrow(/consumers, or consumerQueues/);
    expect(() => new DatabaseMigrations(env.stack, "Neither", { database: env.database })).toThrow(
      /consumers is required/,
    );
    expect(
      () => new DatabaseMigrations(env.stack, "Older", { database: env.database, consumerQueues: queues }),
    ).toThrow(/"award-points" sends follow-ups \(to notify-user\).*give consumers/);
    // A deployment whose consumers send nothing may keep giving their queues.
    const other = testEnvironment();
    const queue = new sqs.Queue(other.stack, "Q");
    expect(
      () =>
        new DatabaseMigrations(other.stack, "Older", {
          database: other.database,
          consumerQueues: { "notify-user": queue },
        }),
    ).not.toThrow();
  });
});

describe("Doctor given the consumers", () => {
  it("carries each definition's declared data in JOBFENCE_DOCTOR_DECLARATIONS", () => {
    const env = testEnvironment();
    const data = {
      tables: { "billing.invoices": { privileges: ["SELECT" as const], shared: true as const } },
    };
    const notifyUser = new JobConsumer(env.stack, "NotifyUser", {
      entry: entryOf("notify-user"),
      definition: { ...notifyUserConsumer, data },
      database: env.database,
      opsBus: env.opsBus,
    });
    const doctor = new Doctor(env.stack, "Doctor", { database: env.database, consumers: [notifyUser] });
    const variables = variablesOf(env, Template.fromStack(env.stack), doctor.doctorFunction);
    expect(JSON.parse(variables.JOBFENCE_DOCTOR_DECLARATIONS)).toEqual([{ consumer: "notify-user", data }]);
  });
});

describe("the reference stack's own functions", () => {
  /** The repository files a bundle was built from, by its source map. */
  let sourcesOf: (description: string) => string[];
  beforeAll(async () => {
    const stack = await synthesizedReferenceStack();
    sourcesOf = (description) =>
      JSON.parse(readFileSync(join(stack.bundleOf(description), "index.mjs.map"), "utf8"))
        .sources as string[];
  });

  it("are bundled from its reference entries, which know its registry", () => {
    const cases = [
      ["jobfence database migrations (run on deploy)", REFERENCE_ENTRIES.migrate],
      ["jobfence doctor: the database and queues against what jobfence intends", REFERENCE_ENTRIES.doctor],
      ["jobfence backstop drain of award-points", REFERENCE_ENTRIES.backstopDrain],
    ] as const;
    for (const [description, entry] of cases) {
      const sources = sourcesOf(description);
      const relativeEntry = entry.split("/").slice(-3).join("/");
      expect(
        sources.some((s) => s.endsWith(relativeEntry)),
        description,
      ).toBe(true);
      expect(
        sources.some((s) => s.endsWith("functions/consumers.ts")),
        description,
      ).toBe(true);
    }
  });
});
