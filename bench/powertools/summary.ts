/**
 * The throughput samples as figures (median and range over rounds; ratios per round to Powertools
 * + DynamoDB) and as the benchmark's tables, and the crash matrix's table.
 */
import type { BenchContext } from "../lib/define.ts";
import { int, ms, ratio, type Spread, showSpread, spread } from "../lib/report.ts";
import type { CrashRow } from "./crash-matrix.ts";
import { LABELS, POINT_NAMES } from "./systems.ts";
import type { Sample } from "./throughput.ts";

export const SERVICES = ["postgres", "dynamodb", "redis"] as const;
export const SERVICE_NAMES = { postgres: "PostgreSQL", dynamodb: "DynamoDB", redis: "Redis" } as const;

type Figure =
  | "rate"
  | "vsDynamo"
  | "vsRedis"
  | (typeof SERVICES)[number]
  | "msPerRecord"
  | "clientCpuUs"
  | "storeCpuUs";
export type Figures = Record<Figure, Spread>;
/** By network, then by variant. */
export type Summary = Record<string, Record<string, Figures>>;
/** Samples by network, then by variant. */
export type Samples = Record<string, Record<string, Sample[]>>;

const FIELDS = ["rate", ...SERVICES, "msPerRecord", "clientCpuUs", "storeCpuUs"] as const;

export function summarize(samples: Samples): Summary {
  return Object.fromEntries(
    Object.entries(samples).map(([network, byLabel]) => {
      /** Per round, the rate ÷ that of `base` in the same round (NaN when `base` did not run). */
      const versus = (list: Sample[], base: string) =>
        spread(list.map((s, i) => s.rate / (byLabel[base]?.[i]?.rate ?? Number.NaN)));
      const figures = Object.entries(byLabel).map(([label, list]): [string, Figures] => [
        label,
        {
          ...(Object.fromEntries(FIELDS.map((k) => [k, spread(list.map((s) => s[k]))])) as Omit<
            Figures,
            "vsDynamo" | "vsRedis"
          >),
          vsDynamo: versus(list, LABELS.dynamodb),
          vsRedis: versus(list, LABELS.redis),
        },
      ]);
      return [network, Object.fromEntries(figures)];
    }),
  );
}

type Table = BenchContext<never>["table"];

/** A figure's median and range; "–" when nothing was measured (jobfence has no store). */
const show = (s: Spread, format: (value: number) => string) =>
  Number.isNaN(s.median) ? "–" : showSpread(s, format);

export function printThroughput(table: Table, samples: Samples, summary: Summary): void {
  const networks = Object.keys(summary);
  const labels = Object.values(LABELS).filter((label) => summary[networks[0] ?? ""]?.[label]);
  const figure = (network: string, label: string, key: Figure) =>
    summary[network]?.[label]?.[key] ?? spread([]);
  /** A row: the variant, then `cells` for each network. */
  const row = (label: string, cells: (network: string) => string[]) => [label, ...networks.flatMap(cells)];
  table(
    "effects/s, median (min–max) over rounds",
    ["variant", ...networks],
    labels.map((label) => row(label, (n) => [showSpread(figure(n, label, "rate"), int)])),
  );
  table(
    "effects/s ÷ Powertools' in the same round, median (min–max) over rounds",
    ["variant", ...networks.flatMap((n) => [`× PT+DynamoDB, ${n}`, `× PT+Redis, ${n}`])],
    labels.map((label) =>
      row(label, (n) => [
        show(figure(n, label, "vsDynamo"), ratio),
        show(figure(n, label, "vsRedis"), ratio),
      ]),
    ),
  );
  // Round trips do not depend on the network: every round of every network in one figure.
  const all = (label: string, key: (typeof SERVICES)[number]) =>
    spread(networks.flatMap((n) => (samples[n]?.[label] ?? []).map((s) => s[key])));
  const fixed2 = (v: number) => v.toFixed(2);
  table(
    "round trips per job, by service (every round of every network)",
    ["variant", ...SERVICES.map((k) => SERVICE_NAMES[k]), "total"],
    labels.map((label) => [
      label,
      ...SERVICES.map((k) => showSpread(all(label, k), fixed2)),
      fixed2(SERVICES.reduce((sum, k) => sum + all(label, k).median, 0)),
    ]),
  );
  table(
    "handler wall time per record, ms (invocation wall time ÷ records: what Lambda bills)",
    ["variant", ...networks],
    labels.map((label) => row(label, (n) => [showSpread(figure(n, label, "msPerRecord"), ms)])),
  );
  table(
    "CPU per job, µs: this process (client) and the store's server (dynalite's process, or Redis)",
    ["variant", ...networks.flatMap((n) => [`client, ${n}`, `store, ${n}`])],
    labels.map((label) =>
      row(label, (n) => [
        showSpread(figure(n, label, "clientCpuUs"), int),
        show(figure(n, label, "storeCpuUs"), int),
      ]),
    ),
  );
}

export function printCrashMatrix(table: Table, rows: readonly CrashRow[], redeliveries: number): void {
  table(
    `crash matrix: SIGKILL at the point, redelivered until acked (at most ${redeliveries} times); ledger rows per job after the last delivery (0: lost, 2+: doubled)`,
    [
      "system",
      "point",
      "killed at record",
      "trials",
      "jobs",
      "applied once",
      "doubled",
      "lost",
      "never acked",
    ],
    rows.map((r) => [
      r.system,
      `${r.point} ${POINT_NAMES[r.point]}`,
      r.killedRecords,
      ...[r.trials, r.jobs, r.once, r.doubled, r.lost, r.neverAcked].map(String),
    ]),
  );
}

/** The round trips and billed time per job of a variant, as a miss's cause quotes them. */
export function perJob(figures: Figures | undefined): string {
  if (!figures) return "not measured";
  const trips = SERVICES.filter((k) => figures[k].median > 0).map(
    (k) => `${figures[k].median.toFixed(1)} ${SERVICE_NAMES[k]}`,
  );
  return `${trips.join(" + ")} round trips, ${ms(figures.msPerRecord.median)} ms per record`;
}
