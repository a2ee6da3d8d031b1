/**
 * The npm project an entry point belongs to, for NodejsFunction's `projectRoot` and
 * `depsLockFilePath`: the nearest folder above the entry that holds a lock file. A user's consumer
 * finds the user's project; jobfence's own functions, installed under the user's `node_modules`,
 * find it too (a published package carries no lock file), and in this repository find its own.
 */
import { existsSync } from "node:fs";
import { dirname, isAbsolute, join, relative } from "node:path";
import { ConfigurationError } from "../../shared/errors/configuration.ts";

/** The lock files NodejsFunction knows, in the order they are looked for in one folder. */
export const LOCK_FILES = [
  "package-lock.json",
  "pnpm-lock.yaml",
  "yarn.lock",
  "bun.lock",
  "bun.lockb",
] as const;

/** The extensions an entry point may have: TypeScript or JavaScript, ESM. */
export const ENTRY_EXTENSIONS = [".ts", ".mts", ".js", ".mjs"] as const;

/** Why `entry` cannot be bundled: not an absolute path, not a file there, not TypeScript or JavaScript. */
export function entryProblems(entry: string): string[] {
  if (!isAbsolute(entry)) {
    return [
      `entry "${entry}" must be an absolute path (e.g. fileURLToPath(new URL("../src/handler.ts", import.meta.url)))`,
    ];
  }
  if (!ENTRY_EXTENSIONS.some((extension) => entry.endsWith(extension))) {
    return [`entry ${entry} must be a ${ENTRY_EXTENSIONS.join(", ")} file`];
  }
  if (!existsSync(entry)) return [`entry ${entry} does not exist`];
  return [];
}

/** Where NodejsFunction bundles an entry from. */
export interface BundlingProject {
  /** The folder holding the lock file (esbuild resolves the entry's packages from it). */
  readonly projectRoot: string;
  /** The lock file itself. */
  readonly depsLockFilePath: string;
}

/**
 * The project of `entry` (an absolute path): what is given, the rest found from the nearest folder
 * above `entry` with a lock file; refused when there is none, or when the entry is outside the
 * project root (NodejsFunction bundles only what is under it).
 */
export function bundlingProject(entry: string, given: Partial<BundlingProject> = {}): BundlingProject {
  const found =
    given.projectRoot !== undefined && given.depsLockFilePath !== undefined
      ? undefined
      : nearestLockFile(entry);
  const projectRoot = given.projectRoot ?? (found && dirname(found));
  const depsLockFilePath = given.depsLockFilePath ?? found;
  const problems: string[] = [];
  if (projectRoot === undefined || depsLockFilePath === undefined) {
    problems.push(
      `no lock file (${LOCK_FILES.join(", ")}) in its folder or any above it: give projectRoot and depsLockFilePath, or run the synth from an installed project`,
    );
  } else {
    for (const [what, path] of [
      ["it", entry],
      ["its lock file", depsLockFilePath],
    ] as const) {
      if (!isInside(projectRoot, path)) {
        problems.push(`${what} is outside projectRoot ${projectRoot}: give a projectRoot that holds both`);
      }
    }
  }
  if (problems.length > 0 || projectRoot === undefined || depsLockFilePath === undefined) {
    throw new ConfigurationError(`entry ${entry}`, problems);
  }
  return { projectRoot, depsLockFilePath };
}

/** Whether `path` is `folder` or below it. */
function isInside(folder: string, path: string): boolean {
  const inside = relative(folder, path);
  return !inside.startsWith("..") && !isAbsolute(inside);
}

/** The nearest lock file in `entry`'s folder or a folder above it. */
function nearestLockFile(entry: string): string | undefined {
  for (let folder = dirname(entry); ; folder = dirname(folder)) {
    const lock = LOCK_FILES.map((file) => join(folder, file)).find((file) => existsSync(file));
    if (lock) return lock;
    if (dirname(folder) === folder) return undefined;
  }
}
