/**
 * `npm run bench [-- --quick] [--only a,b]`: the suite, one benchmark after another, each in its
 * own process (its own database, its own memory), against DATABASE_URL or an embedded PostgreSQL.
 * Each prints its figures and its targets as measured / bound / met, a VERDICT line, and writes
 * bench/results/<name>.json (bench/lib/define.ts). A benchmark exits 0 whatever its figures; this
 * command fails only when one of them crashed.
 *
 * The suite is what a regression would show in, and `--quick` runs it small for CI (figures
 * printed, no threshold asserted). Experiments (bench/experiments/) answered a question once —
 * which fence layout, how the peers compare, what the proxy adds, where the harness's CPU goes —
 * and run only when named with `--only`.
 */
import { spawn } from "node:child_process";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { secs, table } from "./lib/report.ts";

interface Entry {
  readonly name: string;
  readonly script: string;
}

/** The suite, in the order it runs. */
const SUITE: readonly Entry[] = [
  { name: "throughput", script: "bench/throughput.ts" },
  { name: "round-trips", script: "bench/round-trips.ts" },
  { name: "powertools", script: "bench/powertools.ts" },
  { name: "external-steps", script: "bench/external-steps.ts" },
  { name: "fence-storage", script: "bench/fence-storage.ts" },
  { name: "local-e2e", script: "bench/local-e2e.ts" },
  { name: "api", script: "bench/api.ts" },
  { name: "cleanup", script: "bench/cleanup.ts" },
  { name: "managed-instances", script: "bench/managed-instances.ts" },
];

/** Run only when named. */
const EXPERIMENTS: readonly Entry[] = [
  { name: "peers", script: "bench/experiments/peers.ts" },
  { name: "fence-layouts", script: "bench/experiments/fence-layouts.ts" },
  { name: "fence-anatomy", script: "bench/experiments/fence-anatomy.ts" },
  { name: "latency-proxy", script: "bench/experiments/latency-proxy.ts" },
  { name: "harness-cpu", script: "bench/experiments/harness-cpu.ts" },
];

let argv: { quick: boolean; only?: string | undefined };
try {
  argv = parseArgs({
    options: { quick: { type: "boolean", default: false }, only: { type: "string" } },
  }).values;
} catch (error) {
  console.error(`${(error as Error).message}\nusage: npm run bench [-- --quick] [--only name,name]`);
  process.exit(2);
}
const known = [...SUITE, ...EXPERIMENTS];
const only = argv.only?.split(",").map((s) => s.trim());
const unknown = (only ?? []).filter((name) => !known.some((b) => b.name === name));
if (unknown.length > 0) {
  console.error(
    `unknown benchmark(s): ${unknown.join(", ")}; the suite: ${SUITE.map((b) => b.name).join(", ")}; experiments: ${EXPERIMENTS.map((b) => b.name).join(", ")}`,
  );
  process.exit(2);
}
const selected = only ? known.filter((b) => only.includes(b.name)) : SUITE;

function run(script: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...(argv.quick ? ["--quick"] : [])], { stdio: "inherit" });
    child.once("error", reject);
    child.once("exit", (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

const started = performance.now();
const rows: string[][] = [];
let failed = 0;
for (const benchmark of selected) {
  console.log(`\n==== ${benchmark.name}${argv.quick ? " (quick)" : ""}`);
  const t0 = performance.now();
  const code = await run(benchmark.script);
  rows.push([benchmark.name, code === 0 ? "done" : `FAILED (exit ${code})`, secs(performance.now() - t0)]);
  if (code !== 0) failed += 1;
}
console.log(`\n${table(["benchmark", "result", "time"], rows)}`);
console.log(`total ${secs(performance.now() - started)}; figures in bench/results/*.json`);
process.exit(failed > 0 ? 1 : 0);
