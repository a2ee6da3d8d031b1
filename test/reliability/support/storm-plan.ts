/**
 * The duplicate storm's deliveries, decided up front from a seed so an interleaving that breaks
 * can be replayed: which job each delivery carries, in what order they arrive, and how they are
 * cut into SQS batches. Pure.
 */
import { seededRandom } from "./figures.ts";

/** How a job's deliveries are spread over the storm. */
export type StormOrdering =
  /** A uniform shuffle: a job's copies are spread over the whole storm. */
  | "uniform"
  /**
   * Each job's copies land close together (within `burstWindow` positions of a random spot), so
   * many of them are in flight at the same moment and meet on the fence's lock.
   */
  | "bursty";

export interface StormPlanOptions {
  readonly seed: number;
  readonly jobs: number;
  /** Deliveries in all, at least `jobs`: every job is delivered at least once. */
  readonly deliveries: number;
  readonly ordering: StormOrdering;
  /** @default 10 */
  readonly maxBatchSize?: number;
  /** @default 64 */
  readonly burstWindow?: number;
}

export interface StormPlan {
  /** Points each job awards (1–100); job i's user is the job's own. */
  readonly points: readonly number[];
  /**
   * Milliseconds (0–3) each job's work holds its transaction open after the effect: the window in
   * which a concurrent duplicate finds the fence row locked and must wait for the commit.
   */
  readonly holdMs: readonly number[];
  /** Batches of job indexes, in delivery order; sizes 1–maxBatchSize; a job may appear twice in one. */
  readonly batches: readonly (readonly number[])[];
  /** Batches that carry the same job more than once. */
  readonly batchesWithRepeats: number;
  /** The most deliveries any one job got. */
  readonly maxCopies: number;
}

export function stormPlan(options: StormPlanOptions): StormPlan {
  const random = seededRandom(options.seed);
  const below = (n: number) => Math.floor(random() * n);
  const maxBatchSize = options.maxBatchSize ?? 10;
  const window = options.burstWindow ?? 64;

  // Every job once, the rest drawn at random.
  const copies = Array.from({ length: options.jobs }, () => 1);
  for (let extra = options.deliveries - options.jobs; extra > 0; extra--) {
    const job = below(options.jobs);
    copies[job] = (copies[job] ?? 0) + 1;
  }

  let order: number[];
  if (options.ordering === "uniform") {
    order = copies.flatMap((n, job) => Array.from({ length: n }, () => job));
    for (let i = order.length - 1; i > 0; i--) {
      const j = below(i + 1);
      [order[i], order[j]] = [order[j] as number, order[i] as number];
    }
  } else {
    const keyed: Array<{ job: number; key: number }> = [];
    for (const [job, n] of copies.entries()) {
      const spot = random() * options.deliveries;
      for (let k = 0; k < n; k++) keyed.push({ job, key: spot + random() * window });
    }
    keyed.sort((a, b) => a.key - b.key);
    order = keyed.map((d) => d.job);
  }

  const batches: number[][] = [];
  for (let start = 0; start < order.length; ) {
    const size = 1 + below(maxBatchSize);
    batches.push(order.slice(start, start + size));
    start += size;
  }
  return {
    points: copies.map(() => 1 + below(100)),
    holdMs: copies.map(() => below(4)),
    batches,
    batchesWithRepeats: batches.filter((b) => new Set(b).size < b.length).length,
    maxCopies: Math.max(...copies),
  };
}
