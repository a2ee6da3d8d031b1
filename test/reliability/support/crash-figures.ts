/**
 * Sizes, seeds and figures of the crash-matrix and duplicate-storm scenarios. (The name only marks
 * these files as theirs: the other reliability scenarios keep helpers of their own.)
 *
 * `npm test` runs the bounded sizes; `npm run test:reliability` sets JOBFENCE_RELIABILITY=full for
 * the full ones, and only then are the figures also written to test/reliability/results/.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** Whether this is the full run. */
export const FULL_RUN = process.env.JOBFENCE_RELIABILITY === "full";

/** The bounded value under `npm test`, the full one under `npm run test:reliability`. */
export function bySize<T>(bounded: T, full: T): T {
  return FULL_RUN ? full : bounded;
}

const RESULTS_DIR = fileURLToPath(new URL("../results/", import.meta.url));

/**
 * Prints a scenario's figures on one line (so a CI log shows them in either size) and, in the full
 * run, writes them with the run's context to results/<scenario>.json.
 */
export async function publishFigures(scenario: string, figures: Record<string, unknown>): Promise<void> {
  const context = {
    scenario,
    size: FULL_RUN ? "full" : "bounded",
    node: process.version,
    postgres: process.env.DATABASE_URL ? "DATABASE_URL" : "embedded",
    at: new Date().toISOString(),
  };
  console.log(`[reliability] ${scenario} (${context.size}) ${JSON.stringify(figures)}`);
  if (!FULL_RUN) return;
  await mkdir(RESULTS_DIR, { recursive: true });
  await writeFile(
    join(RESULTS_DIR, `${scenario}.json`),
    `${JSON.stringify({ ...context, figures }, null, 2)}\n`,
  );
}

/** mulberry32: a small seeded PRNG, so a failing interleaving can be replayed from its seed. */
export function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/**
 * The seeds of a run: JOBFENCE_RELIABILITY_SEED (comma-separated) replays given ones; otherwise
 * `count` fresh ones, printed with the figures so a failure can be reproduced.
 */
export function runSeeds(count: number): number[] {
  const given = process.env.JOBFENCE_RELIABILITY_SEED;
  if (given) return given.split(",").map((s) => Number.parseInt(s.trim(), 10) >>> 0);
  const base = (Date.now() ^ (process.pid << 16)) >>> 0;
  return Array.from({ length: count }, (_, i) => (base + Math.imul(i + 1, 0x9e3779b1)) >>> 0);
}
