/**
 * `npm run release`: makes a release of the version in package.json. It refuses unless the working
 * tree is clean, the CHANGELOG has an entry for the version and no tag of it exists; then it
 * builds, proves the packed package in fresh services outside the repository on every supported
 * runtime (`npm run test:adoption`: install, type-check under TypeScript 5, the kit's test, a CDK
 * synth), and tags the commit `v<version>`. Publishing the tarball (`npm publish`) is left to the
 * person holding the registry's credentials; the command to run is printed.
 *
 * Options: --dry-run (check and prove, do not tag).
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { releaseProblems } from "./release-checks.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const dryRun = process.argv.includes("--dry-run");

function git(...args: string[]): string {
  return execFileSync("git", args, { cwd: ROOT, encoding: "utf8" }).trim();
}

const { version } = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string };
const problems = releaseProblems(
  version,
  readFileSync(join(ROOT, "CHANGELOG.md"), "utf8"),
  git("status", "--porcelain"),
  git("tag", "--list").split("\n"),
);
if (problems.length > 0) {
  console.error(`release ${version} refused:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  process.exit(1);
}
execFileSync("npm", ["run", "test:adoption"], { cwd: ROOT, stdio: "inherit" });
if (dryRun) {
  console.log(`release ${version}: proven; not tagged (--dry-run)`);
} else {
  git("tag", "-a", `v${version}`, "-m", `jobfence ${version}`);
  console.log(
    `release ${version}: proven and tagged v${version}. Publish with: npm publish (from this commit)`,
  );
}
