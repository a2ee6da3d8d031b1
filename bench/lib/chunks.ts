/**
 * How the benchmarks seed: set-based SQL (INSERT … SELECT FROM generate_series) one chunk of rows
 * per statement, so a million rows are ten statements, each with its memory and WAL in bounds.
 */

/** Rows per seed statement. */
export const SEED_CHUNK = 100_000;

/** A range of row numbers: [lo, hi). */
export interface ChunkRange {
  readonly lo: number;
  readonly hi: number;
}

/** [0, total) in consecutive ranges of `size` rows (the last one shorter). */
export function* chunkRanges(total: number, size: number = SEED_CHUNK): Generator<ChunkRange> {
  for (let lo = 0; lo < total; lo += size) yield { lo, hi: Math.min(total, lo + size) };
}
