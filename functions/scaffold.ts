/**
 * What `npm run new-consumer -- <name>` writes: a consumer that works as written (a payload, an
 * effect in a table of its own, its migration, its generated entry point, a test that runs it
 * through the testing kit) and its entry in the registry. Pure: it returns the files and the new
 * registry text; scripts/new-consumer.ts writes them.
 */
import { consumerSchemaName } from "../shared/db/consumer-catalog.ts";
import { consumerRoleName } from "../shared/db/queries/provision-login.ts";
import { consumerNameProblem, consumerPaths, definitionExportName, entryPointSource } from "./registry.ts";

/** A file to create, relative to the repository root. */
export interface ScaffoldFile {
  readonly path: string;
  readonly text: string;
}

/** Everything the scaffold changes. */
export interface Scaffold {
  readonly files: readonly ScaffoldFile[];
  /** `functions/consumers.ts` with the consumer's import and registry entry added. */
  readonly registry: string;
}

/** A refusal, said to the user as is. */
export class ScaffoldError extends Error {
  override readonly name = "ScaffoldError";
}

/** The test the scaffold writes, relative to the root. */
export const scaffoldTestPath = (name: string) => `test/consumers/${name}.test.ts`;

const REGISTRY_LIST = "export const CONSUMERS: readonly ConsumerDeployment[] = [";
const DEFINITION_IMPORT = /^import \{ (\w+) \} from "\.\/([a-z0-9-]+)\/consumer\.ts";$/;

/** The example payload the scaffold registers (and the next steps send). */
export const scaffoldExample = (name: string) => ({ reference: `${name}-example-1`, amount: 1250 });

/**
 * The scaffold of consumer `name`, given the registry's current text and the paths that exist.
 * Refuses a bad name, a consumer already registered or a folder already there.
 */
export function scaffoldConsumer(
  name: string,
  registryText: string,
  exists: (path: string) => boolean,
): Scaffold {
  const refused = consumerNameProblem(name) ?? schemaNameProblem(name);
  if (refused !== undefined) throw new ScaffoldError(refused);
  const paths = consumerPaths(name);
  const exported = definitionExportName(name);
  if (registryText.includes(`from "./${name}/consumer.ts"`)) {
    throw new ScaffoldError(`consumer ${name} is already registered in functions/consumers.ts`);
  }
  if (registryText.includes(`import { ${exported} } from`)) {
    throw new ScaffoldError(
      `the registry already imports a consumer exported as ${exported}: ${name} would share its export name; choose another name`,
    );
  }
  for (const path of [paths.folder, scaffoldTestPath(name)]) {
    if (exists(path))
      throw new ScaffoldError(`${path} already exists: choose another name, or remove it first`);
  }
  return {
    files: [
      { path: paths.definition, text: definitionSource(name) },
      { path: paths.entry, text: entryPointSource(name) },
      { path: `${paths.migrations}/0001_${consumerSchemaName(name)}.sql`, text: migrationSource(name) },
      { path: scaffoldTestPath(name), text: testSource(name) },
    ],
    registry: registered(name, registryText),
  };
}

/** Schemas the scaffold's migration cannot create: PostgreSQL's own, and the library's. */
function schemaNameProblem(name: string): string | undefined {
  const schema = consumerSchemaName(name);
  if (schema.startsWith("pg_") || ["public", "information_schema", "core"].includes(schema)) {
    return `consumer name "${name}" would put its tables in schema ${schema}, which PostgreSQL or jobfence already uses: choose another name`;
  }
  return undefined;
}

/** The registry text with the consumer's import (in order among the others) and its entry last. */
function registered(name: string, text: string): string {
  const exported = definitionExportName(name);
  const lines = text.split("\n");
  const imports = lines.flatMap((line, i) => (DEFINITION_IMPORT.test(line) ? [i] : []));
  if (imports.length === 0) {
    throw new ScaffoldError(
      `functions/consumers.ts imports no consumer definition (import { … } from "./<name>/consumer.ts"): add the import of ${exported} and its entry by hand`,
    );
  }
  const line = `import { ${exported} } from "./${name}/consumer.ts";`;
  const before = imports.find((i) => (DEFINITION_IMPORT.exec(lines[i] as string)?.[2] ?? "") > name);
  lines.splice(before ?? (imports.at(-1) as number) + 1, 0, line);

  const start = lines.indexOf(REGISTRY_LIST);
  const end = start < 0 ? -1 : lines.indexOf("];", start);
  if (end < 0) {
    throw new ScaffoldError(
      `functions/consumers.ts has no "${REGISTRY_LIST} … ];": add the entry of ${name} by hand`,
    );
  }
  lines.splice(end, 0, ...registryEntry(name));
  return lines.join("\n");
}

function registryEntry(name: string): string[] {
  return [
    "  {",
    `    definition: ${definitionExportName(name)},`,
    `    example: { reference: "${scaffoldExample(name).reference}", amount: ${scaffoldExample(name).amount} },`,
    "    fifo: false,",
    "    functionTimeoutSeconds: 30,",
    "    queueRetentionSeconds: TTL_DEFAULTS.queueRetentionSeconds,",
    "    batchSize: 10,",
    "    maxConcurrency: 2,",
    "  },",
  ];
}

const camel = (name: string) => definitionExportName(name).replace(/Consumer$/, "");

function definitionSource(name: string): string {
  const schema = consumerSchemaName(name);
  const payload = `${camel(name)}Payload`;
  return `/**
 * \`${name}\`: payload \`{ reference, amount }\`; effect: one row in ${schema}.entries, on the fence's
 * transaction. Everything else (fence, retries, dead letters, alerts, metrics) is the harness's.
 * Written by npm run new-consumer: make the payload and the effect your own.
 */
import { z } from "zod";
import { type ConsumerDefinition, storableText } from "../../shared/index.ts";

/** The payload a ${name} message carries. */
export const ${payload} = z.object({
  /** The business reference the entry is recorded under. */
  reference: storableText.pipe(z.string().min(1).max(128)),
  /** A positive whole amount in the currency's smallest unit, exact in JSON and in bigint. */
  amount: z.number().int().positive().max(Number.MAX_SAFE_INTEGER),
});

// One statement, one round trip; the consumer's role may only insert into its table.
const RECORD = \`INSERT INTO ${schema}.entries (job_id, tenant_id, reference, amount) VALUES ($1, $2, $3, $4)\`;

/** The consumer's definition; the generated \`handler.ts\` turns it into the Lambda handler. */
export const ${definitionExportName(name)} = {
  name: "${name}",
  payload: ${payload},
  work: async (job, tx) => {
    await tx.query(RECORD, [job.jobId, job.tenantId, job.payload.reference, job.payload.amount]);
  },
} satisfies ConsumerDefinition<typeof ${payload}>;
`;
}

function migrationSource(name: string): string {
  const schema = consumerSchemaName(name);
  const role = consumerRoleName(name);
  return `-- ${name}'s own tables, granted to its group role alone (${role}, created by the
-- migration runner before this set): no other consumer reaches them. job_id is the primary key:
-- the fence already applies each job once; the key makes a second entry an error, never a double.

CREATE SCHEMA ${schema};
REVOKE ALL ON SCHEMA ${schema} FROM PUBLIC;

CREATE TABLE ${schema}.entries (
  job_id     text        PRIMARY KEY,
  tenant_id  text        NOT NULL,
  reference  text        NOT NULL,
  amount     bigint      NOT NULL CHECK (amount > 0),
  created_at timestamptz NOT NULL DEFAULT now()
);

GRANT USAGE ON SCHEMA ${schema} TO ${role};
GRANT INSERT ON ${schema}.entries TO ${role};
`;
}

function testSource(name: string): string {
  const exported = definitionExportName(name);
  const schema = consumerSchemaName(name);
  return `/**
 * ${name}, tested alone with the testing kit: a database of this file's own (every registered
 * migration applied), the SQS emulator and the real harness, in the consumer's own role. Written by
 * npm run new-consumer: grow it with the consumer.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { ${exported} } from "../../functions/${name}/consumer.ts";
import { PermanentJobError } from "../../shared/index.ts";
import { type ConsumerTestKit, consumerTestKit } from "../../testing/index.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

let db: TestDatabase;
let kit: ConsumerTestKit<typeof ${exported}.payload>;
beforeAll(async () => {
  db = await createTestDatabase();
  kit = await consumerTestKit(${exported}, { databaseUrl: db.url });
});
afterAll(async () => {
  await kit?.close();
  await db?.drop();
});

/** The consumer's effect on one job, read from its own table. */
const entriesOf = (jobId: string) =>
  kit.query("SELECT reference, amount::int AS amount FROM ${schema}.entries WHERE job_id = $1", [jobId]);

it("applies a job once and absorbs its duplicate", async () => {
  const job = kit.job({ reference: "r-1", amount: 1250 });
  const delivery = await kit.deliver(job, job);
  expect(delivery.results.map((r) => r.status)).toEqual(["applied", "duplicate"]);
  expect(await kit.fence(job.job_id)).toMatchObject({ jobId: job.job_id, consumer: "${name}" });
  expect(await entriesOf(job.job_id)).toEqual([{ reference: "r-1", amount: 1250 }]);
});

it("dead-letters a conflict (the same job id, another payload) without applying it", async () => {
  const first = kit.job({ reference: "r-2", amount: 100 });
  const other = kit.job({ reference: "r-2", amount: 999 }, { jobId: first.job_id });
  const delivery = await kit.deliver(first, other);
  expect(delivery.deadLettered).toMatchObject([{ jobId: first.job_id, kind: "conflict" }]);
  expect(await entriesOf(first.job_id)).toEqual([{ reference: "r-2", amount: 100 }]);
});

it("dead-letters what it cannot read as poison, and a permanent error as hard, with no effect", async () => {
  const refused = kit.uncheckedJob({ reference: "r-3", amount: -5 });
  const failing = kit.failing(kit.job({ reference: "r-4", amount: 7 }), new PermanentJobError("refused"));
  const delivery = await kit.deliver(refused, "{ not json", failing);
  expect(delivery.results.map((r) => [r.status, r.kind])).toEqual([
    ["dead-lettered", "poison"],
    ["dead-lettered", "poison"],
    ["dead-lettered", "hard"],
  ]);
  expect(await kit.deadLetters({ jobId: failing.job_id })).toMatchObject([
    { kind: "hard", status: "pending_review" },
  ]);
  expect(await entriesOf(refused.job_id)).toEqual([]);
  expect(await entriesOf(failing.job_id)).toEqual([]);
});
`;
}
