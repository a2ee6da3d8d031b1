/**
 * Vitest global setup of every run: says which Node and which tier ran it, and makes a scratch
 * directory the run's files share (the synthesized reference stack lives there, see
 * synthesized-stack.ts), removed when the run ends. The database project's own global setup,
 * global-setup.ts, starts PostgreSQL.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { FULL_TIER_FILES } from "./test-files.ts";
import { TEST_TIER } from "./tier.ts";

declare module "vitest" {
  export interface ProvidedContext {
    /** A directory of this run's own, shared by its files; removed at the end of the run. */
    runDirectory: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const left = Object.keys(FULL_TIER_FILES);
  // One line in every log says what actually ran.
  console.log(
    `jobfence tests: Node ${process.version}, ${TEST_TIER} tier` +
      (TEST_TIER === "everyday" ? ` (npm run test:full adds ${left.join(", ")})` : ""),
  );
  const directory = await mkdtemp(join(tmpdir(), "jobfence-test-run-"));
  project.provide("runDirectory", directory);
  return () => rm(directory, { recursive: true, force: true });
}
