/**
 * How every benchmark reports: medians with their spread, plain-text tables, the machine and
 * server it ran on, and `bench/results/<name>.json`.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { availableParallelism, cpus, totalmem } from "node:os";
import type pg from "pg";
import { at } from "./support.ts";

export function ascending(values: readonly number[]): number[] {
  return [...values].sort((a, b) => a - b);
}

export function median(values: readonly number[]): number {
  const sorted = ascending(values);
  if (sorted.length === 0) return Number.NaN;
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? at(sorted, mid) : (at(sorted, mid - 1) + at(sorted, mid)) / 2;
}

export function mean(values: readonly number[]): number {
  return values.length === 0 ? Number.NaN : values.reduce((sum, v) => sum + v, 0) / values.length;
}

/** A median and the range it came from. */
export interface Spread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
}

export function spread(values: readonly number[]): Spread {
  // A loop, not Math.min(...values): a spread of a few hundred thousand samples overflows the stack.
  let min = Number.POSITIVE_INFINITY;
  let max = Number.NEGATIVE_INFINITY;
  for (const value of values) {
    if (value < min) min = value;
    if (value > max) max = value;
  }
  return values.length === 0
    ? { median: Number.NaN, min: Number.NaN, max: Number.NaN }
    : { median: median(values), min, max };
}

export const round2 = (value: number) => Math.round(value * 100) / 100;
export const int = (value: number) => (Number.isFinite(value) ? Math.round(value).toLocaleString("en") : "–");
export const ms = (value: number) => (Number.isFinite(value) ? value.toFixed(2) : "–");
export const ratio = (value: number) => (Number.isFinite(value) ? `${value.toFixed(2)}×` : "–");
export const secs = (valueMs: number) => `${(valueMs / 1000).toFixed(1)} s`;
export const mb = (bytes: number) => (bytes / 2 ** 20).toFixed(0);

/** "median (min–max)", or just the value when every repetition agreed. */
export function showSpread(s: Spread, format: (value: number) => string): string {
  return s.min === s.max ? format(s.median) : `${format(s.median)} (${format(s.min)}–${format(s.max)})`;
}

/** A plain-text table, the first column left-aligned and the rest right-aligned. */
export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (i === 0 ? cell.padEnd(at(widths, i)) : cell.padStart(at(widths, i))))
      .join("  ")
      .trimEnd();
  return [line(headers), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n");
}

/** The machine, the Node version and the server (with the named settings) a benchmark ran on. */
export async function describeEnvironment(
  db: pg.ClientBase,
  serverKind: string,
  settingNames: readonly string[],
): Promise<Record<string, unknown>> {
  const setting = async (name: string) =>
    at((await db.query<{ v: string }>("SELECT current_setting($1) AS v", [name])).rows, 0).v;
  const settings: Record<string, string> = {};
  for (const name of settingNames) settings[name] = await setting(name);
  return {
    node: process.version,
    postgres: await setting("server_version"),
    postgres_version: at((await db.query<{ v: string }>("SELECT version() AS v")).rows, 0).v,
    server: serverKind,
    settings,
    platform: `${process.platform} ${process.arch}`,
    cores: availableParallelism(),
    cpu: cpus()[0]?.model ?? "unknown",
    memory_gb: Math.round(totalmem() / 2 ** 30),
  };
}

/** Writes `bench/results/<name>.json` and returns its path. */
export async function writeResult(name: string, body: Record<string, unknown>): Promise<string> {
  const output = new URL(`../results/${name}.json`, import.meta.url);
  await mkdir(new URL("../results/", import.meta.url), { recursive: true });
  await writeFile(output, `${JSON.stringify({ at: new Date().toISOString(), ...body }, null, 2)}\n`);
  return output.pathname;
}

/** The spread of `values[i] / base[i]`: a ratio taken round by round, each against its own round. */
export function ratioSpread(values: readonly number[], base: readonly number[]): Spread {
  return spread(values.map((v, i) => v / (base[i] ?? Number.NaN)));
}

/** A variant's rate and its ratio to bare over rounds. */
export interface RateSummary {
  readonly rate: Spread;
  readonly vsBare: Spread;
}

/**
 * Table rows "variant, then rate and × bare on each network", variants in the first network's
 * order: the layout of every benchmark that runs one set of variants on several networks.
 */
export function rateRows(
  networks: readonly string[],
  summaries: Readonly<Record<string, Readonly<Record<string, RateSummary>>>>,
): string[][] {
  const labels = Object.keys(summaries[networks[0] ?? ""] ?? {});
  return labels.map((label) => [
    label,
    ...networks.flatMap((network) => {
      const s = summaries[network]?.[label];
      return s ? [showSpread(s.rate, int), showSpread(s.vsBare, ratio)] : ["–", "–"];
    }),
  ]);
}
