/**
 * The external-steps crash matrix's trials as rows (variant × point), its table, and its targets.
 * Pure: the classification a test checks (test/unit/external-steps-matrix.test.ts).
 */
import type { Target } from "../lib/define.ts";
import type { TrialResult } from "./matrix.ts";
import { POINT_NAMES, POINTS, type Point, VARIANTS, type VariantKey } from "./systems.ts";

/** One variant at one point, its trials summed. */
export interface CrashRow {
  readonly variant: VariantKey;
  readonly point: Point;
  readonly trials: number;
  readonly jobs: number;
  /** The provider's effects (ledger entries) and calls (requests) over the row's jobs. */
  readonly effects: number;
  readonly calls: number;
  readonly once: number;
  readonly doubled: number;
  readonly lost: number;
  readonly neverAcked: number;
  /** The killed jobs' effects over the trials, as value×trials ("1×3, 2×2"). */
  readonly killedEffects: string;
  readonly killedCalls: string;
  /** Jobs whose database effect was not exactly once. */
  readonly databaseNotOnce: number;
  /** Requests no job could be told for. */
  readonly unattributed: number;
}

const sum = (results: readonly TrialResult[], of: (r: TrialResult) => number) =>
  results.reduce((n, r) => n + of(r), 0);
/** "1×3, 2×2": each value, ascending, with how many times it occurs. */
export function histogram(values: readonly number[]): string {
  const counts = new Map<number, number>();
  for (const value of values) counts.set(value, (counts.get(value) ?? 0) + 1);
  return [...counts]
    .sort(([a], [b]) => a - b)
    .map(([value, n]) => `${value}×${n}`)
    .join(", ");
}

/** The rows of `variants`, each point in order; a cell without trials has zeros. */
export function crashRows(results: readonly TrialResult[], variants: readonly VariantKey[]): CrashRow[] {
  return variants.flatMap((variant) =>
    POINTS.map((point) => {
      const of = results.filter((r) => r.variant === variant && r.point === point);
      return {
        variant,
        point,
        trials: of.length,
        jobs: sum(of, (r) => r.provider.jobs),
        effects: sum(of, (r) => r.effects),
        calls: sum(of, (r) => r.calls),
        once: sum(of, (r) => r.provider.once),
        doubled: sum(of, (r) => r.provider.doubled),
        lost: sum(of, (r) => r.provider.lost),
        neverAcked: sum(of, (r) => r.neverAcked),
        killedEffects: histogram(of.map((r) => r.killedEffects)),
        killedCalls: histogram(of.map((r) => r.killedCalls)),
        databaseNotOnce: sum(of, (r) => r.database.jobs - r.database.once),
        unattributed: sum(of, (r) => r.unattributed),
      };
    }),
  );
}

/** The table's headers and cells. */
export function crashTable(rows: readonly CrashRow[]): { headers: string[]; cells: string[][] } {
  return {
    headers: [
      "point",
      "variant",
      "trials",
      "jobs",
      "effects/job",
      "killed job: effects×trials",
      "killed job: calls×trials",
      "doubled",
      "lost",
      "never acked",
    ],
    cells: [...rows]
      .sort((a, b) => POINTS.indexOf(a.point) - POINTS.indexOf(b.point))
      .map((r) => [
        `${r.point} ${POINT_NAMES[r.point]}`,
        VARIANTS[r.variant],
        String(r.trials),
        String(r.jobs),
        r.jobs === 0 ? "–" : (r.effects / r.jobs).toFixed(2),
        r.killedEffects || "–",
        r.killedCalls || "–",
        String(r.doubled),
        String(r.lost),
        String(r.neverAcked),
      ]),
  };
}

/** "K2: 1 of 3; K3: 1 of 3", the points where `key` is not 0. */
export function where(rows: readonly CrashRow[], key: "doubled" | "lost" | "neverAcked" | "databaseNotOnce") {
  return rows
    .filter((r) => r[key] > 0)
    .map((r) => `${VARIANTS[r.variant]} ${r.point}: ${r[key]} of ${r.jobs}`)
    .join("; ");
}

/**
 * The targets: jobfence doubles and loses no job at any point (its worst point, 0); the bare
 * variant and Powertools are the matrix's controls, each expected to double at least one job
 * somewhere (bare at K2 and K3, Powertools at K2): a matrix in which they never double could not
 * see a double at all. A variant that did not run measures NaN, which never meets.
 */
export function crashTargets(rows: readonly CrashRow[]): Target[] {
  const of = (variant: VariantKey) => rows.filter((r) => r.variant === variant && r.trials > 0);
  const worst = (variant: VariantKey, key: "doubled" | "lost") => {
    const ran = of(variant);
    return ran.length === 0 ? Number.NaN : Math.max(...ran.map((r) => r[key]));
  };
  const total = (variant: VariantKey) => {
    const ran = of(variant);
    return ran.length === 0 ? Number.NaN : ran.reduce((n, r) => n + r.doubled, 0);
  };
  const count = (value: number) => (Number.isNaN(value) ? "–" : String(value));
  const cause = (variant: VariantKey, key: "doubled" | "lost") =>
    of(variant).length === 0 ? `${VARIANTS[variant]} did not run` : where(of(variant), key);
  return [
    {
      name: `${VARIANTS.jobfence}: jobs doubled, worst point`,
      measured: worst("jobfence", "doubled"),
      bound: "at most",
      target: 0,
      format: count,
      cause: cause("jobfence", "doubled"),
    },
    {
      name: `${VARIANTS.jobfence}: jobs lost, worst point`,
      measured: worst("jobfence", "lost"),
      bound: "at most",
      target: 0,
      format: count,
      cause: cause("jobfence", "lost"),
    },
    ...(["bare", "powertools"] as const).map(
      (variant): Target => ({
        name: `${VARIANTS[variant]}: jobs doubled, all points (control)`,
        measured: total(variant),
        bound: "at least",
        target: 1,
        format: count,
        cause:
          of(variant).length === 0
            ? `${VARIANTS[variant]} did not run`
            : "the control never doubled: the matrix cannot see a double",
      }),
    ),
  ];
}
