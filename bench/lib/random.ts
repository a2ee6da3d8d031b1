/**
 * The repository's one seeded PRNG, so that what a benchmark samples (filters, ids, orders) and
 * what a reliability test decides (faults, shuffles) is the same run to run for the same seed.
 */

/** mulberry32: 32 bits of state, uniform in [0, 1); `seed` is taken as an unsigned 32-bit integer. */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** `items` in the order of a Fisher–Yates shuffle driven by `random` (the input is not changed). */
export function shuffled<T>(items: readonly T[], random: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    const a = out[i] as T;
    out[i] = out[j] as T;
    out[j] = a;
  }
  return out;
}
