/**
 * Seeds of the crash-matrix and duplicate-storm scenarios, which run several seeds each; sizes and
 * figures come from figures.ts, shared by every scenario.
 *
 * `npm test` runs the bounded sizes; `npm run test:reliability` sets JOBFENCE_RELIABILITY=full for
 * the full ones, and only then are the figures also written to test/reliability/results/.
 */
import { FULL, reportFigures, seededRandom, sized } from "./figures.ts";

// One set of helpers for every scenario (figures.ts); the names these files use stay as they were.
export { FULL as FULL_RUN, reportFigures as publishFigures, seededRandom as prng, sized as bySize };

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
