/**
 * `jobfence/cdk` in a user's own CDK app, outside this repository: a service in a temporary folder,
 * with its own package.json, lock file and two consumers of its own (not in `functions/`, not in
 * the registry), builds the whole deployment from the constructs — consumers with their queues,
 * backstops, drains and alarms, alerting with no vendor, the dead-letter API, cleanup, the bulk
 * worker, migrations and the doctor — cdk-nag clean, one consumer on Node 22 and one on Node 24.
 *
 * Twice: from this repository's sources (`infra/cdk.ts`, construct tree only), and from the package
 * as it is installed, `node_modules/jobfence/dist/` with the sources compiled to `.js` in the same
 * layout, built by the release's own build (scripts/build.ts), synthesized
 * with real bundling: jobfence's own functions are found beside the compiled constructs, bundled
 * from `.js`, and the migrate and doctor bundles ship the files their modules read.
 */
import { execFileSync } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { App, Stack, Validations } from "aws-cdk-lib";
import { Template } from "aws-cdk-lib/assertions";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as eventsTargets from "aws-cdk-lib/aws-events-targets";
import * as lambda from "aws-cdk-lib/aws-lambda";
import * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import * as sns from "aws-cdk-lib/aws-sns";
import { AwsSolutionsChecks } from "cdk-nag";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type * as Cdk from "../../infra/cdk.ts";
import { logicalId } from "./support.ts";

const REPOSITORY = fileURLToPath(new URL("../..", import.meta.url));

/** The user's two consumers: invoices on Node 22, receipts on the default runtime (Node 24). */
const CONSUMER_SOURCE = (name: string) => `
import { z } from "zod";

export const payload = z.object({ invoice_id: z.string().min(1) });

export const definition = {
  name: "${name}",
  payload,
  work: async (job, tx) => {
    await tx.query("INSERT INTO billing.${name.replace("-", "_")} (job_id) VALUES ($1)", [job.jobId]);
  },
};
`;
const HANDLER_SOURCE = (jobfenceIndex: string) => `
import { createConsumer } from ${JSON.stringify(jobfenceIndex)};
import { definition } from "./consumer.js";

export const handler = createConsumer(definition);
`;

/** A service folder outside the repository: package.json, a lock file and the repository's packages. */
function serviceFolder(): string {
  const root = mkdtempSync(join(tmpdir(), "jobfence-user-service-"));
  writeFileSync(
    join(root, "package.json"),
    JSON.stringify({ name: "billing", private: true, type: "module" }),
  );
  writeFileSync(
    join(root, "package-lock.json"),
    JSON.stringify({ name: "billing", lockfileVersion: 3, requires: true, packages: {} }),
  );
  mkdirSync(join(root, "node_modules"));
  // Each dependency is the repository's (linked, so installing nothing): aws-cdk-lib, esbuild, zod, pg…
  for (const entry of readdirSync(join(REPOSITORY, "node_modules"))) {
    symlinkSync(join(REPOSITORY, "node_modules", entry), join(root, "node_modules", entry));
  }
  return root;
}

/** The service's consumers, importing jobfence from `jobfenceIndex`. */
function writeConsumers(root: string, jobfenceIndex: string): Record<string, string> {
  const entries: Record<string, string> = {};
  for (const name of ["invoices", "receipts"]) {
    const folder = join(root, "src", name);
    mkdirSync(folder, { recursive: true });
    writeFileSync(join(folder, "consumer.js"), CONSUMER_SOURCE(name));
    writeFileSync(join(folder, "handler.js"), HANDLER_SOURCE(jobfenceIndex));
    entries[name] = join(folder, "handler.js");
  }
  return entries;
}

/**
 * The package as installed: `node_modules/jobfence/` with the package's manifest and `dist/` as the
 * release's build makes it (scripts/build.ts: only what the entry points reach, compiled, with the
 * files its modules read beside them).
 */
function installPackage(root: string): string {
  const installed = join(root, "node_modules", "jobfence");
  const dist = join(installed, "dist");
  execFileSync(process.execPath, [join(REPOSITORY, "scripts/build.ts"), "--out-dir", dist], {
    stdio: "pipe",
  });
  cpSync(join(REPOSITORY, "package.json"), join(installed, "package.json"));
  return dist;
}

/** What the user's app built, for the assertions. */
interface UserApp {
  readonly stack: Stack;
  readonly consumers: Record<"invoices" | "receipts", Cdk.JobConsumer>;
  readonly alerting: Cdk.OpsAlerting;
  readonly pager: sns.Topic;
  readonly migrations: Cdk.DatabaseMigrations;
  readonly doctor: Cdk.Doctor;
}

/** The user's stack, its VPC, database access (the service's own rotated logins) and alerting. */
function serviceStack(cdk: typeof Cdk, app: App, name: string) {
  const stack = new Stack(app, name, { env: { account: "123456789012", region: "eu-west-1" } });
  const vpc = new ec2.Vpc(stack, "Vpc", { natGateways: 1, maxAzs: 2, flowLogs: { all: {} } });
  // The service's own login secrets, rotated its own way: its acknowledgement, not jobfence's.
  const secret = (id: string) => {
    const login = new secretsmanager.Secret(stack, id);
    Validations.of(login).acknowledge({
      id: "AwsSolutions-SMG4",
      reason: "Rotated by the billing team's runbook.",
    });
    return login;
  };
  const database = cdk.DatabaseAccess.fromAttributes({
    vpc,
    securityGroup: new ec2.SecurityGroup(stack, "DbSg", { vpc }),
    endpoint: "db.billing.internal",
    secrets: {
      migrator: secret("MigratorLogin"),
      ops: secret("OpsLogin"),
      cleanup: secret("CleanupLogin"),
      consumers: { invoices: secret("InvoicesLogin"), receipts: secret("ReceiptsLogin") },
    },
  });
  // No vendor: the alerts go to the team's own SNS topic, the alarms to the alarm topic.
  const pager = new sns.Topic(stack, "Pager", { enforceSSL: true });
  const alerting = new cdk.OpsAlerting(stack, "Alerting", {
    targets: [new eventsTargets.SnsTopic(pager)],
    alarmEmails: ["billing-oncall@example.com"],
  });
  return { stack, database, pager, alerting };
}

/** The service's consumer `name`'s definition, as its own module exports it. */
async function definitionOf(
  root: string,
  name: string,
): Promise<Cdk.ConsumerDeploymentSettings["definition"]> {
  const module = await import(pathToFileURL(join(root, "src", name, "consumer.js")).href);
  return (module as { definition: Cdk.ConsumerDeploymentSettings["definition"] }).definition;
}

/** The user's CDK app: the whole deployment from `cdk` (the entry point), the user's own consumers. */
async function buildUserApp(
  cdk: typeof Cdk,
  app: App,
  root: string,
  entries: Record<string, string>,
): Promise<UserApp> {
  const { stack, database, pager, alerting } = serviceStack(cdk, app, "Billing");
  const consumers = {
    invoices: new cdk.JobConsumer(stack, "Invoices", {
      entry: entries.invoices as string,
      definition: await definitionOf(root, "invoices"),
      runtime: lambda.Runtime.NODEJS_22_X,
      functionTimeoutSeconds: 60,
      maxConcurrency: 5,
      database,
      opsBus: alerting.bus,
    }),
    receipts: new cdk.JobConsumer(stack, "Receipts", {
      entry: entries.receipts as string,
      definition: await definitionOf(root, "receipts"),
      fifo: true,
      database,
      opsBus: alerting.bus,
    }),
  };
  const queues = Object.values(consumers).map((c) => c.queue);
  const api = new cdk.DeadLetterApi(stack, "DeadLetters", {
    database,
    jwtIssuer: "https://auth.billing.example.com",
    jwtAudience: "billing-ops",
    consumerQueues: queues,
  });
  const bulk = new cdk.BulkOperationsWorker(stack, "Bulk", { database, consumerQueues: queues });
  const cleanup = new cdk.FenceCleanup(stack, "Cleanup", { database, opsBus: alerting.bus });
  const doctor = new cdk.Doctor(stack, "Doctor", { database, consumers: Object.values(consumers) });
  const migrations = new cdk.DatabaseMigrations(stack, "Migrations", {
    database,
    consumerQueues: Object.fromEntries(Object.values(consumers).map((c) => [c.consumerName, c.queue])),
  });
  alerting.notifyAlarmTopic([
    ...Object.values(consumers).flatMap((c) => c.allAlarms),
    ...Object.values(api.alarms),
    ...Object.values(bulk.alarms),
    ...Object.values(cleanup.alarms),
    ...Object.values(doctor.alarms),
  ]);
  return { stack, consumers, alerting, pager, migrations, doctor };
}

/** What the bundled app holds: the functions whose bundles the tests open. */
interface BundledApp {
  readonly stack: Stack;
  readonly invoices: Cdk.JobConsumer;
  readonly migrations: Cdk.DatabaseMigrations;
  readonly doctor: Cdk.Doctor;
}

/**
 * The part of the user's deployment whose bundles the tests open: a consumer (its function and its
 * drain), the migrations and the doctor. Bundled for real, each function by esbuild: the other
 * functions of the deployment bundle the same way, and the adoption proof (`npm run
 * test:adoption`) synthesizes all of them, bundled, from the packed package.
 */
async function buildBundledApp(
  cdk: typeof Cdk,
  app: App,
  root: string,
  entries: Record<string, string>,
): Promise<BundledApp> {
  const { stack, database, alerting } = serviceStack(cdk, app, "Billing");
  const invoices = new cdk.JobConsumer(stack, "Invoices", {
    entry: entries.invoices as string,
    definition: await definitionOf(root, "invoices"),
    runtime: lambda.Runtime.NODEJS_22_X,
    database,
    opsBus: alerting.bus,
  });
  const doctor = new cdk.Doctor(stack, "Doctor", { database, consumers: [invoices] });
  const migrations = new cdk.DatabaseMigrations(stack, "Migrations", {
    database,
    consumerQueues: { [invoices.consumerName]: invoices.queue },
  });
  return { stack, invoices, migrations, doctor };
}

/** Unacknowledged cdk-nag AwsSolutions findings of `stack`, by rule and resource. */
function nagFindings(stack: Stack): string[] {
  const report = new AwsSolutionsChecks().validateScope(stack);
  return report.violations.map(
    (v) => `${v.ruleName}: ${v.violatingResources.map((r) => r.constructPath).join(", ")}`,
  );
}

/** The checks both builds pass: nag clean, the runtimes chosen, dead letters alarmed, no vendor. */
function describeUserApp(built: () => UserApp): void {
  it("has zero unacknowledged cdk-nag AwsSolutions findings: the constructs acknowledge their own", () => {
    expect(nagFindings(built().stack)).toEqual([]);
  });

  it("runs invoices (and its drain) on Node 22 and receipts on Node 24, each bundled for its runtime", () => {
    const { stack, consumers } = built();
    const template = Template.fromStack(stack);
    const runtimeOf = (fn: Cdk.JobfenceFunction) =>
      template.toJSON().Resources[logicalId(stack, fn.function)].Properties.Runtime;
    expect(runtimeOf(consumers.invoices.consumerFunction)).toBe("nodejs22.x");
    expect(runtimeOf(consumers.invoices.drainFunction)).toBe("nodejs22.x");
    expect(consumers.invoices.consumerFunction.esbuildTarget).toBe("node22");
    expect(runtimeOf(consumers.receipts.consumerFunction)).toBe("nodejs24.x");
    expect(consumers.receipts.consumerFunction.esbuildTarget).toBe("node24");
  });

  it("alarms on each consumer's dead letters into the alarm topic, and routes alerts to the user's target, no vendor", () => {
    const { stack, consumers, alerting, pager } = built();
    const template = Template.fromStack(stack);
    const topic = { Ref: logicalId(stack, alerting.alarmTopic) };
    for (const consumer of Object.values(consumers)) {
      const alarm = template.toJSON().Resources[logicalId(stack, consumer.alarms.deadLettered)].Properties;
      expect(alarm.AlarmActions).toEqual([topic]);
    }
    const rule = template.toJSON().Resources[logicalId(stack, alerting.rule)].Properties;
    expect(rule.Targets.map((t: { Arn: unknown }) => t.Arn)).toEqual([{ Ref: logicalId(stack, pager) }]);
    template.resourceCountIs("AWS::Events::ApiDestination", 0);
  });
}

describe("jobfence/cdk from the repository's sources, in an app outside it", () => {
  let root: string;
  let user: UserApp;
  beforeAll(async () => {
    root = serviceFolder();
    const cdk = await import("../../infra/cdk.ts");
    // Bundling skipped: the sources' bundles are the reference stack's (reference-stack.test.ts).
    const app = new App({ context: { "aws:cdk:bundling-stacks": [] } });
    user = await buildUserApp(cdk, app, root, writeConsumers(root, join(REPOSITORY, "shared/index.ts")));
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  describeUserApp(() => user);
});

describe("a consumer's bundling project", () => {
  it("is the nearest folder above the entry with a lock file; with none, refused unless given", async () => {
    const cdk = await import("../../infra/cdk.ts");
    const lone = mkdtempSync(join(tmpdir(), "jobfence-no-lock-"));
    try {
      const entries = writeConsumers(lone, join(REPOSITORY, "shared/index.ts"));
      const build = (extra: Partial<Cdk.JobConsumerProps>) => async () => {
        const stack = new Stack(new App({ context: { "aws:cdk:bundling-stacks": [] } }), "Lone");
        const vpc = new ec2.Vpc(stack, "Vpc");
        const secret = new secretsmanager.Secret(stack, "S");
        const database = cdk.DatabaseAccess.fromAttributes({
          vpc,
          securityGroup: new ec2.SecurityGroup(stack, "DbSg", { vpc }),
          endpoint: "db.internal",
          secrets: { migrator: secret, ops: secret, cleanup: secret, consumers: { invoices: secret } },
        });
        const { definition } = (await import(pathToFileURL(join(lone, "src/invoices/consumer.js")).href)) as {
          definition: Cdk.ConsumerDeploymentSettings["definition"];
        };
        return new cdk.JobConsumer(stack, "Invoices", {
          entry: entries.invoices as string,
          definition,
          database,
          opsBus: new (await import("aws-cdk-lib/aws-events")).EventBus(stack, "Bus"),
          ...extra,
        });
      };
      await expect(build({})()).rejects.toThrow(
        /no lock file \(package-lock\.json, pnpm-lock\.yaml, yarn\.lock, bun\.lock, bun\.lockb\) in its folder or any above it: give projectRoot and depsLockFilePath/,
      );
      const repositoryLock = join(REPOSITORY, "package-lock.json");
      await expect(build({ projectRoot: REPOSITORY, depsLockFilePath: repositoryLock })()).rejects.toThrow(
        /- it is outside projectRoot .*: give a projectRoot that holds both/,
      );
      await expect(build({ projectRoot: lone, depsLockFilePath: repositoryLock })()).rejects.toThrow(
        /- its lock file is outside projectRoot/,
      );
      mkdirSync(join(lone, "locks"));
      writeFileSync(join(lone, "locks", "package-lock.json"), "{}");
      const given = { projectRoot: lone, depsLockFilePath: join(lone, "locks", "package-lock.json") };
      await expect(build(given)()).resolves.toBeDefined();
      writeFileSync(join(lone, "yarn.lock"), "");
      await expect(build({})()).resolves.toBeDefined();
    } finally {
      rmSync(lone, { recursive: true, force: true });
    }
  });
});

describe("jobfence/cdk from the installed package (compiled .js under node_modules/jobfence/dist)", () => {
  let root: string;
  let dist: string;
  let user: UserApp;
  let bundled: BundledApp;
  let template: Template;
  let assembly: string;
  beforeAll(async () => {
    root = serviceFolder();
    dist = installPackage(root);
    const cdk = (await import(pathToFileURL(join(dist, "infra", "cdk.js")).href)) as typeof Cdk;
    const entries = writeConsumers(root, "jobfence");
    // The whole deployment's construct tree, and a part of it bundled for real.
    user = await buildUserApp(cdk, new App({ context: { "aws:cdk:bundling-stacks": [] } }), root, entries);
    assembly = join(root, "cdk.out");
    const app = new App({ outdir: assembly });
    bundled = await buildBundledApp(cdk, app, root, entries);
    app.synth();
    template = Template.fromStack(bundled.stack);
  }, 240_000);
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  describeUserApp(() => user);

  /** The bundle folder of `fn` in the cloud assembly. */
  const bundleOf = (fn: Cdk.JobfenceFunction) => {
    const key = String(
      template.toJSON().Resources[logicalId(bundled.stack, fn.function)].Properties.Code.S3Key,
    );
    return join(assembly, `asset.${key.replace(/\.zip$/, "")}`);
  };

  it("finds jobfence's own functions beside the compiled constructs, never in the repository", () => {
    const own = [
      bundled.invoices.drainFunction,
      bundled.migrations.migrateFunction,
      bundled.doctor.doctorFunction,
    ];
    for (const fn of [bundled.invoices.consumerFunction, ...own]) {
      expect(readdirSync(bundleOf(fn)), fn.node.path).toContain("index.mjs");
    }
    // The bundles' sources, from their source maps: the service's and the package's files only.
    const sources = JSON.parse(
      readFileSync(join(bundleOf(bundled.invoices.drainFunction), "index.mjs.map"), "utf8"),
    ).sources as string[];
    const drain = sources.find((s) => s.includes("functions/backstop-drain/handler"));
    expect(drain).toMatch(/node_modules\/jobfence\/dist\/functions\/backstop-drain\/handler\.js$/);
    const consumer = JSON.parse(
      readFileSync(join(bundleOf(bundled.invoices.consumerFunction), "index.mjs.map"), "utf8"),
    ).sources as string[];
    expect(consumer.some((s) => s.endsWith("src/invoices/handler.js"))).toBe(true);
    expect(consumer.some((s) => s.includes("jobfence/dist/shared/"))).toBe(true);
    // The service's dependencies are the repository's node_modules, linked (serviceFolder): only a
    // file of the repository's own sources would be a bundle reaching into the repository.
    const repositorySources = [...sources, ...consumer].filter(
      (s) => s.includes(relative("/", REPOSITORY)) && !s.includes("/node_modules/"),
    );
    expect(repositorySources).toEqual([]);
  });

  it("bundles the migrate and doctor functions from .js with the files their modules read beside them", () => {
    for (const fn of [bundled.migrations.migrateFunction, bundled.doctor.doctorFunction]) {
      const bundle = bundleOf(fn);
      expect(existsSync(join(bundle, "shared/db/migrations/0001_processed_jobs.sql")), fn.node.path).toBe(
        true,
      );
      expect(existsSync(join(bundle, "shared/db/core-catalog.txt")), fn.node.path).toBe(true);
      // Each module's import.meta.url is its own folder's inside the bundle, not the bundle's.
      const code = readFileSync(join(bundle, "index.mjs"), "utf8");
      expect(code).toContain('new URL("./shared/db/",import.meta.url)');
    }
  });
});
