/**
 * Figures of the reliability scenarios. Their sizes are by test tier (test/support/tier.ts): bounded
 * in `npm test` and `npm run test:full`, at their largest in `npm run test:reliability`, and only
 * then are the figures also written to test/reliability/results/<scenario>.json for
 * docs/reliability.md (the folder is not meant to be committed).
 */
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { TEST_TIER } from "../../support/tier.ts";

const RESULTS_DIR = fileURLToPath(new URL("../results/", import.meta.url));

/**
 * Prints a scenario's figures (one line, so a CI log shows them in any tier) and, in the
 * reliability tier, writes them with the run's context to results/<scenario>.json.
 */
export async function reportFigures(scenario: string, figures: Record<string, unknown>): Promise<void> {
  const context = {
    scenario,
    tier: TEST_TIER,
    node: process.version,
    postgres: process.env.DATABASE_URL ? "DATABASE_URL" : "embedded",
    at: new Date().toISOString(),
  };
  console.log(`[reliability] ${scenario} (${context.tier} tier) ${JSON.stringify(figures)}`);
  if (TEST_TIER !== "reliability") return;
  await mkdir(RESULTS_DIR, { recursive: true });
  await writeFile(
    join(RESULTS_DIR, `${scenario}.json`),
    `${JSON.stringify({ ...context, figures }, null, 2)}\n`,
  );
}

/** Adds one to `key` of a tally. */
export function tally(counts: Record<string, number>, key: string, by = 1): void {
  counts[key] = (counts[key] ?? 0) + by;
}

/** A small seeded PRNG (mulberry32): fault decisions a run can reproduce from its printed seed. */
export { mulberry32 as seededRandom } from "../../../bench/lib/random.ts";

/** The run's seed: JOBFENCE_RELIABILITY_SEED when given (to replay a run), otherwise a fresh one. */
export function runSeed(): number {
  const given = Number(process.env.JOBFENCE_RELIABILITY_SEED);
  return Number.isInteger(given) && given > 0 ? given : Math.floor(Math.random() * 2 ** 31) + 1;
}

/**
 * The seeds of a run that takes several: JOBFENCE_RELIABILITY_SEED (comma-separated) replays given
 * ones; otherwise `count` fresh ones, printed with the figures so a failure can be reproduced.
 */
export function runSeeds(count: number): number[] {
  const given = process.env.JOBFENCE_RELIABILITY_SEED;
  if (given) return given.split(",").map((s) => Number.parseInt(s.trim(), 10) >>> 0);
  const base = (Date.now() ^ (process.pid << 16)) >>> 0;
  return Array.from({ length: count }, (_, i) => (base + Math.imul(i + 1, 0x9e3779b1)) >>> 0);
}
