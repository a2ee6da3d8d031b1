/**
 * The conformance test, over every consumer in the registry (functions/consumers.ts): its files
 * are what the registry requires (a generated entry point, a definition module exporting the very
 * definition registered, migrations), its migration set is among the deployment's and applies on
 * its own after the core set, and its synthesized bundle — the asset CDK uploads, not the source —
 * loads in a process of its own as Lambda would run it and applies the registered example once,
 * from a real message of the SQS emulator. Also reports each bundle's size and cold import time.
 *
 * And the registry refuses what is caught nowhere else: an entry point that exports another name
 * (HandlerNotFound in Lambda), one that builds a copied consumer's definition (every message a
 * poison dead letter filed under the other consumer), a consumer without migrations (every message
 * retried on a missing relation until exhausted), at synth and before the local stack starts.
 */
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { cpSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { App } from "aws-cdk-lib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { CONSUMERS, type ConsumerDeployment, EXAMPLE_TENANT } from "../../functions/consumers.ts";
import { deploymentMigrationSets } from "../../functions/migrate/sets.ts";
import {
  consumerMigrationSet,
  consumerModuleProblems,
  consumerRegistryProblems,
  entryPointSource,
  REPOSITORY_ROOT,
  registryImportProblem,
  unregisteredFolderProblems,
  verifyConsumerRegistry,
} from "../../functions/registry.ts";
import { JobfenceStack } from "../../infra/reference-stack.ts";
import { LOCAL_REGION } from "../../local/aws-clients.ts";
import { deliver, receiveRecords } from "../../local/event-source.ts";
import { runMigrations } from "../../shared/db/migrate.ts";
import { coreMigrationSet } from "../../shared/db/migrations.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { type ConsumerTestBed, consumerTestBed, OPS_BUS } from "../support/consumer-harness.ts";
import { createTestDatabase } from "../support/database.ts";
import { messagesIn, sendMessage } from "../support/sqs.ts";
import { type SynthesizedStack, synthesizedReferenceStack } from "../support/synthesized-stack.ts";

const run = promisify(execFile);
const NAMES = CONSUMERS.map((c) => c.definition.name);

describe("the registry", () => {
  it("holds every registered consumer's files as the registry requires them", async () => {
    expect(consumerRegistryProblems(CONSUMERS)).toEqual([]);
    expect(await consumerModuleProblems(CONSUMERS)).toEqual([]);
  });

  it("derives the deployment's migration sets from it: core first, then each consumer's own", () => {
    expect(deploymentMigrationSets().map((s) => [s.name, s.consumer])).toEqual([
      ["core", undefined],
      ...NAMES.map((name) => [name, name]),
    ]);
  });
});

describe("follow-up targets", () => {
  const deployment = (name: string) =>
    CONSUMERS.find((c) => c.definition.name === name) as ConsumerDeployment;
  const award = deployment("award-points");
  const notify = deployment("notify-user");
  const sending = (sends: Record<string, unknown>, target = notify) => [
    { ...award, definition: { ...award.definition, sends } },
    target,
  ];

  it("refuses a target that is not registered, and one named by anything but its definition or payload schema", () => {
    expect(consumerRegistryProblems(sending({ "record-payment": z.object({}) }))).toEqual([
      expect.stringMatching(/sends follow-ups to record-payment, which is not a registered consumer/),
    ]);
    expect(consumerRegistryProblems(sending({ "notify-user": z.object({ user_id: z.string() }) }))).toEqual([
      expect.stringMatching(
        /names notify-user with something other than notify-user's definition or payload schema/,
      ),
    ]);
    expect(consumerRegistryProblems(sending({ "notify-user": notify.definition.payload }))).toEqual([]);
  });

  it("requires the definition of a target that narrows its fingerprint, whose follow-ups its schema alone would fingerprint otherwise", () => {
    const narrowing = {
      ...notify,
      definition: { ...notify.definition, fingerprint: (p: { user_id: string }) => p.user_id },
    };
    expect(
      consumerRegistryProblems(sending({ "notify-user": narrowing.definition.payload }, narrowing)),
    ).toEqual([expect.stringMatching(/by its payload schema, but notify-user narrows its fingerprint/)]);
    expect(consumerRegistryProblems(sending({ "notify-user": narrowing.definition }, narrowing))).toEqual([]);
  });
});

describe.each(NAMES)("consumer %s", (name) => {
  it("has its migration set apply on its own after the core set, creating its role", async () => {
    const db = await createTestDatabase({ empty: true });
    try {
      const report = await runMigrations({
        connectionString: db.url,
        sets: [coreMigrationSet(), consumerMigrationSet(name)],
      });
      expect(report.applied.filter((m) => m.set === name).length).toBe(
        consumerMigrationSet(name).migrations.length,
      );
      const { rows } = await db.withClient((c) =>
        c.query("SELECT consumer FROM core.consumer_roles WHERE role_name = $1", [consumerRoleName(name)]),
      );
      expect(rows).toEqual([{ consumer: name }]);
    } finally {
      await db.drop();
    }
  });
});

describe("the synthesized bundles", () => {
  let bed: ConsumerTestBed;
  let synthesized: SynthesizedStack;

  beforeAll(async () => {
    bed = await consumerTestBed();
    // The reference stack, as the run synthesizes it once with real bundling; the test takes each consumer's asset.
    synthesized = await synthesizedReferenceStack();
  }, 300_000);

  afterAll(async () => {
    await bed?.close();
  });

  it.each(CONSUMERS.map((c) => [c.definition.name, c] as const))(
    "%s: the bundle applies the registered example from the emulator, once",
    { timeout: 120_000 },
    async (name, deployment: ConsumerDeployment) => {
      const description = `jobfence consumer ${name}`;
      const fn = Object.values(
        synthesized.template.findResources("AWS::Lambda::Function", {
          Properties: { Description: description },
        }),
      )[0];
      expect(fn?.Properties.Handler).toBe("index.handler");
      const bundle = join(synthesized.bundleOf(description), "index.mjs");

      const targets = Object.keys(deployment.definition.sends ?? {});
      const queueName = `conformance-${name}${deployment.fifo ? ".fifo" : ""}`;
      const queue = await bed.queue(queueName, deployment.fifo ? { FifoQueue: "true" } : {});
      const jobId = `conformance-${randomUUID()}`;
      if (deployment.exampleSeed) await bed.db.withClient((c) => c.query(deployment.exampleSeed as string));
      await sendMessage(
        bed.sqs,
        queue.url,
        { job_id: jobId, tenant_id: EXAMPLE_TENANT, payload: deployment.example },
        deployment.fifo ? { groupId: EXAMPLE_TENANT, dedupId: jobId } : {},
      );
      const records = await receiveRecords({
        sqs: bed.sqs,
        queueUrl: queue.url,
        queueArn: queue.arn,
        waitSeconds: 1,
      });
      expect(records).toHaveLength(1);

      // The child imports the bundle as Lambda's runtime would, times the import, and invokes it once.
      const script = `
        const started = performance.now();
        const { handler } = await import(${JSON.stringify(bundle)});
        const importMs = performance.now() - started;
        const event = JSON.parse(process.env.SMOKE_EVENT);
        const context = { functionName: ${JSON.stringify(name)}, awsRequestId: "smoke", getRemainingTimeInMillis: () => 30000 };
        const response = await handler(event, context);
        console.log(JSON.stringify({ importMs, consumer: handler.consumer, response }));
        process.exit(0);`;
      const { stdout } = await run(process.execPath, ["--input-type=module", "-e", script], {
        env: {
          PATH: process.env.PATH,
          DATABASE_URL: bed.db.url,
          // The consumer's own role, set on each connection: the migration's grants must suffice.
          JOBFENCE_DB_ROLE: consumerRoleName(name),
          JOBFENCE_OPS_BUS_NAME: OPS_BUS,
          JOBFENCE_QUEUE_URL: queue.url,
          // Each target's queue, as the deployment gives it (a consumer that sends nothing gets none).
          ...(targets.length > 0
            ? {
                JOBFENCE_OUTBOX_QUEUES: JSON.stringify(
                  Object.fromEntries(targets.map((t) => [t, bed.followUpQueues[t]])),
                ),
              }
            : {}),
          // notify-user's own setting: the bed's fake email provider.
          EMAIL_PROVIDER_URL: bed.emailProvider.url,
          AWS_REGION: LOCAL_REGION,
          AWS_ACCESS_KEY_ID: "local",
          AWS_SECRET_ACCESS_KEY: "local",
          AWS_ENDPOINT_URL_SQS: bed.emulator.endpoint,
          AWS_ENDPOINT_URL_EVENTBRIDGE: bed.sink.endpoint,
          POWERTOOLS_METRICS_DISABLED: "true",
          POWERTOOLS_LOG_LEVEL: "SILENT",
          SMOKE_EVENT: JSON.stringify({ Records: records }),
        },
        timeout: 60_000,
      });
      const result = JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}") as {
        importMs: number;
        consumer: string;
        response: { batchItemFailures: unknown[] };
      };
      expect(result.consumer).toBe(name);
      const attempts = await bed.db.withClient((c) =>
        c.query("SELECT history FROM core.message_attempts WHERE job_id = $1", [jobId]),
      );
      expect(
        result.response,
        `the bundle of ${name} left its example in the queue to retry (a grant its migration lacks, say): ${JSON.stringify(attempts.rows[0]?.history ?? null)}`,
      ).toEqual({ batchItemFailures: [] });
      const { rows } = await bed.db.withClient((c) =>
        c.query(
          `SELECT (SELECT count(*)::int FROM core.processed_jobs WHERE job_id = $1 AND consumer_id = core.consumer_id($2)) AS fences,
                  (SELECT count(*)::int FROM core.dead_letters WHERE job_id = $1) AS "deadLetters",
                  (SELECT error_kind || ': ' || (last_error->>'class') || ': ' || (last_error->>'message')
                     FROM core.dead_letters WHERE job_id = $1 LIMIT 1) AS error`,
          [jobId, name],
        ),
      );
      const { error, ...counts } = rows[0] as { fences: number; deadLetters: number; error: string | null };
      expect(
        counts,
        `the example of ${name} must apply on a migrated database (its exampleSeed runs first): ${error ?? "no dead letter"}`,
      ).toEqual({ fences: 1, deadLetters: 0 });
      // What its example sent was relayed right after the COMMIT: nothing waits in the outbox.
      const waiting = await bed.db.withClient(
        async (c) =>
          (await c.query("SELECT target, job_id FROM core.outbox WHERE parent_job_id = $1", [jobId])).rows,
      );
      expect(waiting, `the follow-ups of ${name}'s example that the bundle could not send`).toEqual([]);

      // Delete what the bundle acked, as the event source mapping would; the queue is then empty.
      await deliver(
        { sqs: bed.sqs, queueUrl: queue.url, queueArn: queue.arn },
        records,
        async () => result.response as never,
        {} as never,
      );
      expect(messagesIn(bed.emulator, queueName)).toBe(0);

      const size = statSync(bundle).size;
      console.log(
        `${name} bundle: ${(size / 1024).toFixed(0)} KiB (index.mjs), cold import ${result.importMs.toFixed(0)} ms`,
      );
    },
  );
});

describe("misregistration is refused, saying what to do", () => {
  const awardPoints = CONSUMERS.find((c) => c.definition.name === "award-points") as ConsumerDeployment;
  const payload = z.object({ reference: z.string() });
  const recordPayment: ConsumerDeployment = {
    ...awardPoints,
    definition: { name: "record-payment", payload, work: async () => {} },
    example: { reference: "r-1" },
  };
  let root: string;

  /** A scratch repository root holding record-payment's folder: a correct one, then broken. */
  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), "jobfence-registry-"));
    mkdirSync(join(root, "functions/record-payment/migrations"), { recursive: true });
    writeFileSync(
      join(root, "functions/record-payment/consumer.ts"),
      "export const recordPaymentConsumer = {};\n",
    );
    writeFileSync(join(root, "functions/record-payment/handler.ts"), entryPointSource("record-payment"));
    cpSync(
      join(REPOSITORY_ROOT, "functions/award-points/migrations/0001_ledger.sql"),
      join(root, "functions/record-payment/migrations/0001_ledger.sql"),
    );
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  const problems = (edit: () => void) => {
    edit();
    return consumerRegistryProblems([recordPayment], { root });
  };
  const entry = (text: string) => () =>
    writeFileSync(join(root, "functions/record-payment/handler.ts"), text);

  it("accepts the scratch consumer as written", () => {
    expect(problems(() => {})).toEqual([]);
  });

  it("refuses an entry point that exports main instead of handler", () => {
    expect(
      problems(
        entry(entryPointSource("record-payment").replace("export const handler", "export const main")),
      ),
    ).toEqual([
      expect.stringMatching(
        /^functions\/record-payment\/handler\.ts is not the generated entry point of record-payment .*Lambda calls index\.handler\): rewrite it with npm run new-consumer -- --entries$/,
      ),
    ]);
  });

  it("refuses an entry point that builds a copied consumer's definition", () => {
    const copied = entryPointSource("award-points");
    expect(problems(entry(copied))).toEqual([
      expect.stringContaining(
        "functions/record-payment/handler.ts is not the generated entry point of record-payment",
      ),
    ]);
    entry(entryPointSource("record-payment"))();
  });

  it("accepts a consumer without migrations (its tables are the service's), refuses a folder that holds none", () => {
    rmSync(join(root, "functions/record-payment/migrations/0001_ledger.sql"));
    expect(consumerRegistryProblems([recordPayment], { root })).toEqual([
      "consumer record-payment has no migrations (functions/record-payment/migrations/ holds no .sql file): create functions/record-payment/migrations/0001_<description>.sql that creates its tables and grants them to jobfence_consumer_record_payment, or remove the folder (its tables then come from the service's own migrations)",
    ]);
    rmSync(join(root, "functions/record-payment/migrations"), { recursive: true });
    expect(consumerRegistryProblems([recordPayment], { root })).toEqual([]);
    mkdirSync(join(root, "functions/record-payment/migrations"));
    cpSync(
      join(REPOSITORY_ROOT, "functions/award-points/migrations/0001_ledger.sql"),
      join(root, "functions/record-payment/migrations/0001_ledger.sql"),
    );
  });

  it("refuses a definition whose data declaration is malformed, at synth", () => {
    const declaring: ConsumerDeployment = {
      ...recordPayment,
      definition: {
        ...recordPayment.definition,
        data: { tables: { "billing.invoices": { privileges: ["SELECT"], shared: ["record-payment"] } } },
      },
    };
    expect(consumerRegistryProblems([declaring], { root })).toEqual([
      "consumer record-payment's data shares billing.invoices with itself: name the other consumers",
    ]);
  });

  it("refuses a registered definition that is not the one its folder exports", async () => {
    await expect(verifyConsumerRegistry([recordPayment], "local stack", { root })).rejects.toThrow(
      /the definition registered as record-payment in functions\/consumers\.ts is not the recordPaymentConsumer of functions\/record-payment\/consumer\.ts: import it from there/,
    );
  });

  it("refuses an example its own schema refuses, a duplicate, and a consumer with no folder", () => {
    const noFolder: ConsumerDeployment = {
      ...recordPayment,
      definition: { ...recordPayment.definition, name: "record-refund" },
    };
    expect(
      consumerRegistryProblems([{ ...recordPayment, example: { amount: 1 } }, recordPayment, noFolder], {
        root,
      }),
    ).toEqual([
      expect.stringMatching(
        /^consumer record-payment's example payload in functions\/consumers\.ts is refused by its own schema \(reference: /,
      ),
      "consumer record-payment is registered twice in functions/consumers.ts: remove one entry",
      expect.stringMatching(
        /^consumer record-refund has no folder functions\/record-refund\/: .*npm run new-consumer -- <name>/,
      ),
    ]);
  });

  it("refuses names it derives no valid identifier from, and the reserved ones", () => {
    const named = (name: string) => ({ ...recordPayment, definition: { ...recordPayment.definition, name } });
    expect(
      consumerRegistryProblems([named("a-"), named("b--c"), named("core"), named("create")], { root }),
    ).toEqual([
      expect.stringMatching(
        /^consumer name "a-" must be words of lowercase letters and digits joined by single dashes/,
      ),
      expect.stringMatching(/^consumer name "b--c" must be words/),
      expect.stringMatching(
        /^consumer name "core" is reserved: its migration set would be the library's own \(core\)$/,
      ),
      expect.stringMatching(/^consumer name "create" is reserved: .*createConsumer/),
    ]);
  });

  it("refuses a copied definition that kept its original's name, saying which name to change", () => {
    const copy = { ...recordPayment, definition: { ...recordPayment.definition } };
    expect(consumerRegistryProblems([recordPayment, copy], { root })).toEqual([
      expect.stringMatching(
        /^two registered definitions are both named record-payment: .*give the copy its own folder's name/,
      ),
    ]);
  });

  it("before the local stack or the app starts: refuses a consumer folder that nothing registers", () => {
    expect(unregisteredFolderProblems([], { root })).toEqual([
      'functions/record-payment/ holds a consumer that functions/consumers.ts does not register: add its entry to CONSUMERS (import recordPaymentConsumer from "./record-payment/consumer.ts"), or remove the folder',
    ]);
    expect(unregisteredFolderProblems([recordPayment], { root })).toEqual([]);
  });

  it("explains a registry that imports a consumer's module that is not there (a folder renamed)", async () => {
    writeFileSync(join(root, "functions/consumers.ts"), 'import "./record-payments/consumer.ts";\n');
    const error = await import(join(root, "functions/consumers.ts")).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(registryImportProblem(error)).toMatch(
      /^functions\/consumers\.ts imports .*functions\/record-payments\/consumer\.ts, which does not exist: .*restore .*record-payments\/ or correct the registry's import and entry$/,
    );
    expect(registryImportProblem(new Error("something else"))).toBeUndefined();
  });

  it("at synth: the reference stack refuses a consumer whose files are not there", () => {
    const synth = () =>
      new JobfenceStack(new App({ context: { "aws:cdk:bundling-stacks": [] } }), "Misregistered", {
        jwtIssuer: "https://auth.example.com",
        jwtAudience: "jobfence-ops",
        betterStackEndpoint: "https://in.logs.betterstack.com",
        betterStackSecretName: "jobfence/betterstack",
        consumers: [
          awardPoints,
          { ...recordPayment, definition: { ...recordPayment.definition, name: "not-on-disk" } },
        ],
      });
    expect(synth).toThrow(ConfigurationError);
    expect(synth).toThrow(/JobfenceStack.*consumer not-on-disk has no folder functions\/not-on-disk\//s);
  });
});
