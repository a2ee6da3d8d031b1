/**
 * What vitest.config.ts builds its projects from: which test files reach the run's PostgreSQL, which
 * synthesize CDK stacks, and which belong to the full tier. Only the full tier is a list; the rest
 * is read from each file's imports, so a new file lands in the right project without being listed:
 *
 * - a file **needs the database** when it imports test/support/database.ts, directly or through a
 *   helper: that module is the only way to the run's server (files that start a PostgreSQL of their
 *   own do not count), and it refuses to run in a project without one;
 * - a file **synthesizes CDK stacks** when it imports aws-cdk-lib, directly or through a helper.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

/**
 * The full tier (`npm run test:full`, and CI): files too slow for every run, each with why. The
 * everyday tier (`npm test`) leaves them out; nothing else is left out of it.
 */
export const FULL_TIER_FILES: Readonly<Record<string, string>> = Object.freeze({
  "test/e2e/new-consumer.test.ts":
    "scaffolds consumers in a scratch copy of the repository and runs its typecheck, lint, vitest and npm start",
  "test/e2e/bulk-operations.test.ts":
    "replays 20,000 dead letters through the local stack at the API's top rate, across a SIGKILL",
});

/** The module every test reaches the run's PostgreSQL through. */
export const DATABASE_MODULE = "test/support/database.ts";

/** How a test file is run. */
export interface TestFileKind {
  /** Reaches the run's PostgreSQL: runs in the database project (and again on a second server in CI). */
  readonly database: boolean;
  /** Synthesizes CDK stacks. */
  readonly cdk: boolean;
  /** In the full tier only. */
  readonly full: boolean;
}

// Static imports and re-exports (not `import type`, which is erased) and dynamic imports of a literal.
const IMPORT_PATTERNS = [
  /^\s*import\s+(?!type\s)[^;]*?["']([^"']+)["']/gm,
  /^\s*export\s+(?!type\s)[^;]*?\sfrom\s+["']([^"']+)["']/gm,
  /\bimport\(\s*["']([^"']+)["']\s*\)/g,
];

/** The specifiers a module imports at run time. */
export function importedSpecifiers(source: string): string[] {
  return IMPORT_PATTERNS.flatMap((pattern) => [...source.matchAll(pattern)].map((m) => m[1] as string));
}

/** Every `*.test.ts` under `test/`, as paths relative to the repository root, sorted. */
export function testFiles(root: string): string[] {
  return readdirSync(join(root, "test"), { recursive: true, encoding: "utf8" })
    .filter((file) => file.endsWith(".test.ts"))
    .map((file) => `test/${file.split("\\").join("/")}`)
    .sort();
}

/** Classifies every test file of the repository at `root`. */
export function classifyTestFiles(root: string): Map<string, TestFileKind> {
  const missing = Object.keys(FULL_TIER_FILES).filter((file) => !existsSync(join(root, file)));
  if (missing.length > 0) {
    throw new Error(`FULL_TIER_FILES names files that do not exist: ${missing.join(", ")}`);
  }
  return new Map(
    testFiles(root).map((file) => {
      const reached = reach(root, file);
      return [
        file,
        {
          database: reached.modules.has(DATABASE_MODULE),
          cdk: reached.packages.has("aws-cdk-lib"),
          full: Object.hasOwn(FULL_TIER_FILES, file),
        },
      ];
    }),
  );
}

/** The repository modules `file` reaches through its imports, itself included. */
export function reachedModules(root: string, file: string): Set<string> {
  return reach(root, file).modules;
}

/** What a file reaches through its imports: repository modules, and the packages they import. */
interface Reached {
  readonly modules: Set<string>;
  readonly packages: Set<string>;
}

/** Each module's own imports, per repository root: a module is read once however many files reach it. */
const directImports = new Map<string, Map<string, { modules: string[]; packages: string[] }>>();

function importsOf(root: string, file: string): { modules: string[]; packages: string[] } {
  const ofRoot = directImports.get(root) ?? new Map<string, { modules: string[]; packages: string[] }>();
  directImports.set(root, ofRoot);
  let known = ofRoot.get(file);
  if (!known) {
    known = { modules: [], packages: [] };
    for (const specifier of importedSpecifiers(readFileSync(join(root, file), "utf8"))) {
      if (specifier.startsWith(".")) {
        const target = relative(root, resolve(root, dirname(file), specifier))
          .split("\\")
          .join("/");
        if (target.endsWith(".ts") && existsSync(join(root, target))) known.modules.push(target);
      } else if (!specifier.startsWith("node:")) {
        const [scopeOrName = "", name] = specifier.split("/");
        known.packages.push(scopeOrName.startsWith("@") ? `${scopeOrName}/${name}` : scopeOrName);
      }
    }
    ofRoot.set(file, known);
  }
  return known;
}

function reach(root: string, file: string): Reached {
  const modules = new Set<string>([file]);
  const packages = new Set<string>();
  const pending = [file];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const imports = importsOf(root, next);
    for (const name of imports.packages) packages.add(name);
    for (const module of imports.modules) {
      if (!modules.has(module)) {
        modules.add(module);
        pending.push(module);
      }
    }
  }
  return { modules, packages };
}
