/**
 * The test tier a run is in, from JOBFENCE_TEST_TIER, and the sizes that depend on it. Sizes grow
 * with the tier and each is a named constant where it is used:
 *
 * - `everyday`: `npm test` (the default). Minutes: what every change runs.
 * - `full`: `npm run test:full`, and CI. The everyday files plus the full tier's (see
 *   test/support/test-files.ts), every size at its full value.
 * - `reliability`: `npm run test:reliability`. The reliability scenarios at their largest (a
 *   10-minute soak), their figures written for docs/reliability.md; any other size as in `full`.
 */

/** The tiers, smallest first. */
export const TEST_TIERS = ["everyday", "full", "reliability"] as const;

/** A test tier. */
export type TestTier = (typeof TEST_TIERS)[number];

/** The variable that chooses the tier. */
export const TEST_TIER_VARIABLE = "JOBFENCE_TEST_TIER";

/** Reads the tier from `env`; unset or empty is `everyday`, anything not a tier is refused. */
export function testTierFrom(env: NodeJS.ProcessEnv = process.env): TestTier {
  const value = env[TEST_TIER_VARIABLE] || "everyday";
  if (!(TEST_TIERS as readonly string[]).includes(value)) {
    throw new Error(
      `${TEST_TIER_VARIABLE} must be one of ${TEST_TIERS.join(", ")}; got ${JSON.stringify(value)}`,
    );
  }
  return value as TestTier;
}

/** This run's tier. */
export const TEST_TIER: TestTier = testTierFrom();

/**
 * A size by tier: `full` defaults to `everyday` and `reliability` to `full`, so a size that does
 * not change names only the tier where it grows.
 */
export function byTier<T>(sizes: { everyday: T; full?: T; reliability?: T }, tier: TestTier = TEST_TIER): T {
  const full = "full" in sizes ? (sizes.full as T) : sizes.everyday;
  if (tier === "everyday") return sizes.everyday;
  if (tier === "full") return full;
  return "reliability" in sizes ? (sizes.reliability as T) : full;
}
