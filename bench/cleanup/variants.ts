/**
 * How a round of bench/cleanup.ts runs its cleanup (a batch size and a pause after each full
 * batch), and the schedule: the rounds at the shipped default interleaved with the side rounds of
 * the other variants, so that the slow drift of a growing table (the live fences pile up) favours
 * none of them.
 */
import { CLEANUP_DEFAULTS } from "../../shared/fence/cleanup.ts";

export interface Variant {
  readonly batchSize: number;
  /** Milliseconds after each full batch (runFenceCleanup's pauseMs; inside its elapsed time). */
  readonly pauseMs: number;
}

/** The shipped default: CLEANUP_DEFAULTS.batchSize and pauseMs. */
export const DEFAULT_VARIANT: Variant = {
  batchSize: CLEANUP_DEFAULTS.batchSize,
  pauseMs: CLEANUP_DEFAULTS.pauseMs,
};

export function variantLabel(v: Variant): string {
  return v.pauseMs > 0 ? `${v.batchSize} +${v.pauseMs}ms` : String(v.batchSize);
}

/** What `--variants` accepts, item by item: a batch size, optionally `/pause` in ms; or `none`. */
export const VARIANT_PATTERN = /^(none|[1-9]\d*(\/\d+)?)$/;
/** core.delete_expired_fences takes batches of 1–100000. */
export const MAX_BATCH = 100_000;

/** The side variants of `--variants` items (already checked against VARIANT_PATTERN), the default and repeats left out. */
export function sideVariants(items: readonly string[]): Variant[] {
  const seen = new Set([variantLabel(DEFAULT_VARIANT)]);
  return items
    .filter((item) => item !== "none" && item !== "")
    .map((item) => {
      const [batch, pause] = item.split("/");
      return { batchSize: Number(batch), pauseMs: Number(pause ?? 0) };
    })
    .filter((v) => !seen.has(variantLabel(v)) && seen.add(variantLabel(v)));
}

export interface ScheduledRound {
  readonly kind: "default" | "side";
  readonly variant: Variant;
}

/** `reps` default rounds, each followed by a side round while any is left; left-over side rounds at the end. */
export function schedule(reps: number, sides: readonly Variant[], sideReps: number): ScheduledRound[] {
  const rounds: ScheduledRound[] = [];
  const side = Array.from({ length: sideReps }, () => sides).flat();
  for (let rep = 0; rep < Math.max(reps, side.length); rep++) {
    if (rep < reps) rounds.push({ kind: "default", variant: DEFAULT_VARIANT });
    const next = side[rep];
    if (next !== undefined) rounds.push({ kind: "side", variant: next });
  }
  return rounds;
}
