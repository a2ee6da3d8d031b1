/**
 * The repository's own files, for tests that read the tree as text: `git ls-files` (tracked and
 * untracked, minus what .gitignore ignores), or a walk of the tree that skips dependencies and
 * build output when git is not available.
 */
import { execFileSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository's root folder, absolute. */
export const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));

/** Folders the tree walk skips: dependencies, VCS data, local state and build or test output. */
const SKIPPED_DIRS = new Set([
  "node_modules",
  ".git",
  ".local",
  "cdk.out",
  "dist",
  "coverage",
  "bench/results",
  "test/reliability/results",
]);

/** The repository's files, relative to ROOT with `/` separators. */
export function repositoryFiles(): string[] {
  try {
    const listed = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], {
      cwd: ROOT,
      encoding: "utf8",
      maxBuffer: 64 * 1024 * 1024,
      stdio: ["ignore", "pipe", "ignore"],
    });
    // A tracked file deleted in the working tree is still listed.
    return listed.split("\0").filter((file) => file !== "" && isFile(join(ROOT, file)));
  } catch {
    return walk("");
  }
}

function walk(dir: string): string[] {
  const files: string[] = [];
  for (const entry of readdirSync(join(ROOT, dir), { withFileTypes: true })) {
    const path = dir === "" ? entry.name : `${dir}/${entry.name}`;
    if (entry.isDirectory()) {
      if (!SKIPPED_DIRS.has(entry.name) && !SKIPPED_DIRS.has(path)) files.push(...walk(path));
    } else if (entry.isFile()) {
      files.push(path);
    }
  }
  return files;
}

/** Whether `path` (absolute) names a regular file. */
export function isFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}
