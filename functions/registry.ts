/**
 * The consumer registry's rules: what a consumer registered in `functions/consumers.ts` must have
 * on disk, and what is derived from it. A consumer is declared once, by its entry in CONSUMERS;
 * its folder is named after it and holds its definition (`consumer.ts`), optionally its migrations
 * (`migrations/NNNN_*.sql`, a set that creates tables of its own schema and grants them to its role;
 * a consumer may have none and work on the service's tables its definition's `data` declares) and its
 * Lambda entry point (`handler.ts`), which is generated text: the one file CDK bundles is then the
 * definition the local stack runs, and cannot export the wrong name or build another consumer.
 *
 * The checks read files, so they run where the repository is (the CDK app at synth, the local
 * stack at start, the conformance test), never in a deployed function.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { consumerNameCollision } from "../shared/config/fields.ts";
import { loadMigrations, type MigrationSet } from "../shared/db/migrations.ts";
import { consumerRoleName } from "../shared/db/queries/provision-login.ts";
import { dataDeclarationProblems } from "../shared/doctor/declared-data.ts";
import { ConfigurationError } from "../shared/errors/configuration.ts";
import { MigrationFileError } from "../shared/errors/migration.ts";
import type { ConsumerDeployment } from "./consumers.ts";

/** The repository root: `functions/` is beside this module's folder's parent. */
export const REPOSITORY_ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");

/** What the registry checks and the scaffold write read and write, relative to the root. */
export const consumerPaths = (name: string) =>
  Object.freeze({
    folder: `functions/${name}`,
    definition: `functions/${name}/consumer.ts`,
    entry: `functions/${name}/handler.ts`,
    migrations: `functions/${name}/migrations`,
    /** The committed description of its schemas (shared/db/consumer-catalog.ts), written by `npm run schema:snapshot`. */
    schema: `functions/${name}/schema.txt`,
  });

/**
 * The name a consumer's definition is exported under from its `consumer.ts`: the camel-cased
 * consumer name and `Consumer` (`record-payment` → `recordPaymentConsumer`).
 */
export function definitionExportName(name: string): string {
  return `${name.replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase())}Consumer`;
}

/** The generated Lambda entry point of consumer `name`, byte for byte. */
export function entryPointSource(name: string): string {
  const exported = definitionExportName(name);
  return `/**
 * Lambda entry point of the ${name} consumer, configured from the environment at init. Generated
 * from the consumer registry (functions/consumers.ts): the synth and the local stack refuse any
 * other text here. Rewrite it with \`npm run new-consumer -- --entries\`.
 */
import { createConsumer } from "../../shared/index.ts";
import { ${exported} } from "./consumer.ts";

export const handler = createConsumer(${exported});
`;
}

/** Whether consumer `name` has migrations of its own (a `functions/<name>/migrations/` folder). */
export function hasConsumerMigrations(name: string, root: string = REPOSITORY_ROOT): boolean {
  return existsSync(join(root, consumerPaths(name).migrations));
}

/**
 * The migration set of consumer `name`: `functions/<name>/migrations/`, applied after the core
 * set, with the consumer's group role ensured first (its migrations grant to it).
 */
export function consumerMigrationSet(name: string, root: string = REPOSITORY_ROOT): MigrationSet {
  return {
    name,
    consumer: name,
    migrations: loadMigrations(join(root, consumerPaths(name).migrations)),
  };
}

/**
 * The committed description of consumer `name`'s schemas, by absolute path: what the doctor
 * compares them with (the doctor function's bundle ships it at the same relative place).
 */
export function consumerSchemaFile(name: string, root: string = REPOSITORY_ROOT): string {
  return join(root, consumerPaths(name).schema);
}

/** Options of {@link consumerRegistryProblems}. */
export interface RegistryCheckOptions {
  /** Where `functions/` is. @default the repository this module is in */
  readonly root?: string;
}

const SCAFFOLD_HINT = "npm run new-consumer -- <name> writes a consumer with all of it";

/**
 * A registered consumer's name: words of lowercase letters and digits joined by single dashes,
 * starting with a letter, at most 63 characters. Stricter than what the harness accepts
 * (CONSUMER_NAME), because the registry derives identifiers from it: `a-` or `b--c` would make no
 * valid export name.
 */
export const REGISTRY_NAME = /^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$/;

/** Names the registry derives something that already exists from. */
const RESERVED_NAMES: Readonly<Record<string, string>> = {
  // A consumer's migration set is named after it, beside the library's own set `core`.
  core: "its migration set would be the library's own (core)",
  // Its definition would be exported as createConsumer, the name its entry point imports.
  create: "its definition's export name would be createConsumer, which its entry point imports",
};

/** Why `name` cannot be a registered consumer's name, or undefined when it can. */
export function consumerNameProblem(name: unknown): string | undefined {
  if (typeof name !== "string" || name.length > 63 || !REGISTRY_NAME.test(name)) {
    return `consumer name ${JSON.stringify(name)} must be words of lowercase letters and digits joined by single dashes, starting with a letter, at most 63 characters (e.g. record-payment)`;
  }
  // Own keys only: `constructor` is a fine name, not Object.prototype's.
  return Object.hasOwn(RESERVED_NAMES, name)
    ? `consumer name "${name}" is reserved: ${RESERVED_NAMES[name]}`
    : consumerNameCollision(name);
}

/**
 * Every way the registered consumers do not match what is on disk, one readable line each, each
 * saying what to do. Empty when all is well.
 */
export function consumerRegistryProblems(
  consumers: readonly ConsumerDeployment[],
  options: RegistryCheckOptions = {},
): string[] {
  const root = options.root ?? REPOSITORY_ROOT;
  const problems: string[] = [];
  const seen = new Map<string, { readonly name: string; readonly definition: unknown }>();
  if (consumers.length === 0)
    problems.push(`no consumer is registered in functions/consumers.ts (${SCAFFOLD_HINT})`);
  for (const deployment of consumers) {
    const name = deployment.definition?.name;
    const refused = consumerNameProblem(name);
    if (refused !== undefined) {
      problems.push(refused);
      continue;
    }
    const clash = seen.get(consumerRoleName(name)) ?? seen.get(definitionExportName(name));
    if (clash !== undefined) {
      problems.push(
        clash.name !== name
          ? `consumers ${clash.name} and ${name} would share the database role ${consumerRoleName(name)} or the export name ${definitionExportName(name)}: rename one`
          : clash.definition === deployment.definition
            ? `consumer ${name} is registered twice in functions/consumers.ts: remove one entry`
            : `two registered definitions are both named ${name}: a definition copied from ${name} keeps its name until changed; give the copy its own folder's name (its consumer.ts), or remove the second entry`,
      );
      continue;
    }
    const entry = { name, definition: deployment.definition };
    seen.set(consumerRoleName(name), entry);
    seen.set(definitionExportName(name), entry);
    problems.push(...filesProblems(root, name));
    problems.push(...exampleProblems(deployment));
    if (deployment.definition.data !== undefined) {
      problems.push(...dataDeclarationProblems(name, deployment.definition.data));
    }
  }
  problems.push(...followUpTargetProblems(consumers));
  return problems;
}

/**
 * Every follow-up target a definition declares (`sends`) is a registered consumer, named by its
 * definition or its payload schema (the very object, so the follow-up is checked by the schema it
 * will be parsed with), and no consumer feeds the ops bus: targets are consumers' queues only.
 */
function followUpTargetProblems(consumers: readonly ConsumerDeployment[]): string[] {
  const problems: string[] = [];
  const byName = new Map(consumers.map((d) => [d.definition?.name, d.definition]));
  for (const deployment of consumers) {
    const { name, sends } = deployment.definition ?? {};
    if (sends === undefined || sends === null) continue;
    for (const [target, declared] of Object.entries(sends as Record<string, unknown>)) {
      const definition = byName.get(target);
      if (definition === undefined) {
        problems.push(
          `consumer ${name} sends follow-ups to ${target}, which is not a registered consumer: register it in functions/consumers.ts (${SCAFFOLD_HINT}), or remove it from ${name}'s sends`,
        );
      } else if (declared !== definition && declared !== definition.payload) {
        problems.push(
          `consumer ${name}'s sends names ${target} with something other than ${target}'s definition or payload schema: import ${definitionExportName(target)} from ${consumerPaths(target).definition}`,
        );
      } else if (declared !== definition && definition.fingerprint !== undefined) {
        // Its fingerprint narrows what defines the job: a follow-up's must be taken the same way, or
        // its undelivered dead letter would not match the fence of the follow-up that did arrive.
        problems.push(
          `consumer ${name}'s sends names ${target} by its payload schema, but ${target} narrows its fingerprint: name it by its definition, ${definitionExportName(target)}`,
        );
      }
    }
  }
  return problems;
}

function filesProblems(root: string, name: string): string[] {
  const paths = consumerPaths(name);
  const at = (path: string) => join(root, path);
  if (!existsSync(at(paths.folder))) {
    return [
      `consumer ${name} has no folder ${paths.folder}/: a consumer's folder is named after it and holds consumer.ts, handler.ts and, if it has tables of its own, migrations/; if its definition lives in another folder, rename that folder or the definition's name to match (a new consumer: ${SCAFFOLD_HINT})`,
    ];
  }
  const problems: string[] = [];
  if (!existsSync(at(paths.definition))) {
    problems.push(
      `consumer ${name} has no ${paths.definition}: it must export the definition as ${definitionExportName(name)}`,
    );
  }
  if (!existsSync(at(paths.entry))) {
    problems.push(
      `consumer ${name} has no entry point ${paths.entry}: write it with npm run new-consumer -- --entries`,
    );
  } else {
    const text = readFileSync(at(paths.entry), "utf8");
    if (text !== entryPointSource(name)) {
      // Same text but for line endings or a byte-order mark: a checkout that converted it.
      const converted = text.replace(/^\uFEFF/, "").replaceAll("\r\n", "\n") === entryPointSource(name);
      problems.push(
        `${paths.entry} is not the generated entry point of ${name} (${converted ? "its line endings or byte-order mark differ: the repository's files use LF without a BOM" : `it must export handler = createConsumer(${definitionExportName(name)}) and nothing else; Lambda calls index.handler`}): rewrite it with npm run new-consumer -- --entries`,
      );
    }
  }
  problems.push(...migrationProblems(root, name));
  return problems;
}

/** A consumer's migrations are optional; when its folder has some, they must be a sound set. */
function migrationProblems(root: string, name: string): string[] {
  const dir = consumerPaths(name).migrations;
  const hint = `create ${dir}/0001_<description>.sql that creates its tables and grants them to ${consumerRoleName(name)}, or remove the folder (its tables then come from the service's own migrations)`;
  if (!hasConsumerMigrations(name, root)) return [];
  try {
    if (consumerMigrationSet(name, root).migrations.length === 0) {
      return [`consumer ${name} has no migrations (${dir}/ holds no .sql file): ${hint}`];
    }
  } catch (error) {
    if (error instanceof MigrationFileError)
      return [`consumer ${name}'s migrations in ${dir}/: ${error.message}`];
    throw error;
  }
  return [];
}

/** The registered example must be a payload the consumer accepts: the conformance test sends it. */
function exampleProblems(deployment: ConsumerDeployment): string[] {
  const parsed = deployment.definition.payload.safeParse(deployment.example);
  if (parsed.success) return [];
  const issues = parsed.error.issues.map((i) => `${i.path.join(".") || "(payload)"}: ${i.message}`);
  return [
    `consumer ${deployment.definition.name}'s example payload in functions/consumers.ts is refused by its own schema (${issues.join("; ")}): give one it accepts`,
  ];
}

/** Throws one ConfigurationError with every registry problem; `where` names who refuses. */
export function assertConsumerRegistry(
  consumers: readonly ConsumerDeployment[],
  where: string,
  options: RegistryCheckOptions = {},
): void {
  const problems = consumerRegistryProblems(consumers, options);
  if (problems.length > 0) throw new ConfigurationError(where, problems);
}

/**
 * The part of the check that needs the modules: each registered definition must be the very object
 * its folder's `consumer.ts` exports under {@link definitionExportName}, the one the generated entry
 * point builds. A registry entry that imports another folder's definition (a copied consumer) is
 * caught here. Run after {@link consumerRegistryProblems} has found the files.
 */
export async function consumerModuleProblems(
  consumers: readonly ConsumerDeployment[],
  options: RegistryCheckOptions = {},
): Promise<string[]> {
  const root = options.root ?? REPOSITORY_ROOT;
  const problems: string[] = [];
  for (const deployment of consumers) {
    const name = deployment.definition.name;
    const path = join(root, consumerPaths(name).definition);
    if (!existsSync(path)) continue;
    const module = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
    const exported = definitionExportName(name);
    if (module[exported] !== deployment.definition) {
      problems.push(
        module[exported] === undefined
          ? `${relative(root, path)} does not export ${exported}, the definition its entry point builds`
          : `the definition registered as ${name} in functions/consumers.ts is not the ${exported} of ${relative(root, path)}: import it from there`,
      );
    }
  }
  return problems;
}

/**
 * Folders of `functions/` that hold a consumer (a `consumer.ts` and a `handler.ts`) but that no
 * registry entry names: a consumer written and never registered would otherwise be silently left
 * out of the local stack and the deployment. Checked against the whole registry only (a stack
 * given a list of its own deploys a part of it on purpose).
 */
export function unregisteredFolderProblems(
  consumers: readonly ConsumerDeployment[],
  options: RegistryCheckOptions = {},
): string[] {
  const root = options.root ?? REPOSITORY_ROOT;
  const registered = new Set(consumers.map((c) => c.definition?.name));
  const functionsDir = join(root, "functions");
  if (!existsSync(functionsDir)) return [];
  return readdirSync(functionsDir, { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && !registered.has(entry.name))
    .filter((entry) =>
      ["consumer.ts", "handler.ts"].every((f) => existsSync(join(functionsDir, entry.name, f))),
    )
    .map(
      (entry) =>
        `functions/${entry.name}/ holds a consumer that functions/consumers.ts does not register: add its entry to CONSUMERS (import ${definitionExportName(entry.name)} from "./${entry.name}/consumer.ts"), or remove the folder`,
    );
}

/**
 * When the registry itself cannot be imported because it imports a consumer's module that is not
 * there (a folder renamed or removed), what to say instead of the module loader's stack trace.
 */
export function registryImportProblem(error: unknown): string | undefined {
  const e = error as { code?: unknown; message?: unknown };
  if (e?.code !== "ERR_MODULE_NOT_FOUND" || typeof e.message !== "string") return undefined;
  const missing = /Cannot find module '([^']+)' imported from (\S+)/.exec(e.message);
  if (!missing?.[1] || !missing[2]?.endsWith("functions/consumers.ts")) return undefined;
  // The loader names the module by path (Node) or by specifier (some test runners): resolved
  // against the registry's folder, then shown from the repository root, it reads the same either way.
  const registry = missing[2].replace(/^file:\/\//, "");
  const path = relative(dirname(dirname(registry)), resolve(dirname(registry), missing[1]));
  return `functions/consumers.ts imports ${path}, which does not exist: a registered consumer's folder is named after it; restore ${dirname(path)}/ or correct the registry's import and entry`;
}

/**
 * The whole check, files and modules, as the local stack and the CDK app run it before they start:
 * throws one ConfigurationError listing every problem.
 */
export async function verifyConsumerRegistry(
  consumers: readonly ConsumerDeployment[],
  where: string,
  options: RegistryCheckOptions = {},
): Promise<void> {
  const problems = consumerRegistryProblems(consumers, options);
  // Only once the entries themselves are sound: a copied definition that kept its original's
  // name would otherwise also make its own folder look unregistered.
  if (problems.length === 0) problems.push(...unregisteredFolderProblems(consumers, options));
  if (problems.length === 0) problems.push(...(await consumerModuleProblems(consumers, options)));
  if (problems.length > 0) throw new ConfigurationError(where, problems);
}
