/**
 * `npm run new-consumer -- <name>`: writes a new consumer (functions/<name>/: definition, generated
 * entry point, first migration; its test in test/consumers/) and registers it in
 * functions/consumers.ts. `npm run new-consumer -- --entries` rewrites every registered consumer's
 * generated entry point instead.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { consumerPaths, entryPointSource, REPOSITORY_ROOT } from "../functions/registry.ts";
import { ScaffoldError, scaffoldConsumer, scaffoldExample, scaffoldTestPath } from "../functions/scaffold.ts";

const root = process.env.JOBFENCE_REPOSITORY_ROOT || REPOSITORY_ROOT;
const at = (path: string) => join(root, path);
const write = (path: string, text: string) => {
  mkdirSync(dirname(at(path)), { recursive: true });
  writeFileSync(at(path), text);
};

const args = process.argv.slice(2);
if (args.length !== 1 || args[0] === "--help" || args[0] === "-h") {
  console.error("usage: npm run new-consumer -- <name>      e.g. npm run new-consumer -- record-payment");
  console.error("       npm run new-consumer -- --entries   rewrites every registered consumer's handler.ts");
  process.exit(args[0] === "--help" || args[0] === "-h" ? 0 : 2);
}

if (args[0] === "--entries") {
  // Imported here only: writing a new consumer must work even while the registry does not load.
  const { CONSUMERS } = await import("../functions/consumers.ts");
  for (const { definition } of CONSUMERS) {
    const path = consumerPaths(definition.name).entry;
    const text = entryPointSource(definition.name);
    const before = existsSync(at(path)) ? readFileSync(at(path), "utf8") : undefined;
    if (before !== text) write(path, text);
    console.log(`${before === text ? "unchanged" : "wrote    "}  ${path}`);
  }
  process.exit(0);
}

const name = args[0] as string;
const registryPath = "functions/consumers.ts";
try {
  const scaffold = scaffoldConsumer(name, readFileSync(at(registryPath), "utf8"), (p) => existsSync(at(p)));
  for (const file of scaffold.files) {
    write(file.path, file.text);
    console.log(`wrote      ${file.path}`);
  }
  write(registryPath, scaffold.registry);
  console.log(`registered ${name} in ${registryPath}`);
  // The templates are written in the project's format; a long name can still push a line past
  // its width, and the import's place among the others is the linter's call (it orders numbers by
  // value), so the project's own formatter has the last word.
  const biome = at("node_modules/.bin/biome");
  if (existsSync(biome)) {
    const written = [...scaffold.files.map((f) => f.path), registryPath].filter((p) => p.endsWith(".ts"));
    // `check --write` also sorts the registry's imports as the linter wants them.
    try {
      execFileSync(biome, ["check", "--write", ...written], { cwd: root, stdio: "ignore" });
    } catch {
      console.error("new-consumer: biome left findings in the files written: npm run lint shows them");
    }
  }
  console.log(`
next:
  npx vitest run ${scaffoldTestPath(name)}     its own test (the testing kit, a real PostgreSQL)
  npm start                                  the local stack now runs ${name} with its queue
  npm run send -- ${name} '${JSON.stringify(scaffoldExample(name))}'
  npm run schema:snapshot                    writes functions/${name}/schema.txt, its schema's drift check; commit it
then make ${consumerPaths(name).definition} and its migration your own (docs/consumers.md).`);
} catch (error) {
  if (!(error instanceof ScaffoldError)) throw error;
  console.error(`new-consumer: ${error.message}`);
  process.exit(2);
}
