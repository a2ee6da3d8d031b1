/**
 * `npm run bench [-- --quick] [--only a,b]`: every benchmark, one after another, each in its own
 * process (its own database, its own memory), against DATABASE_URL or an embedded PostgreSQL.
 * Each prints its figures and a VERDICT line and writes bench/results/<name>.json. A benchmark
 * exits 0 whatever its figures; this command fails only when one of them crashed.
 *
 * `--quick` runs every benchmark small: the whole suite in under two minutes, for CI, where the
 * figures are printed and no threshold is asserted.
 */
import { spawn } from "node:child_process";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { secs, table } from "./report.ts";

/** The suite, in the order it runs. */
const BENCHMARKS: ReadonlyArray<{ readonly name: string; readonly script: string }> = [
  { name: "fence-overhead", script: "bench/fence-overhead.ts" },
  { name: "batch-commit", script: "bench/batch-commit.ts" },
  { name: "round-trips", script: "bench/round-trips.ts" },
  { name: "peers", script: "bench/peers.ts" },
  { name: "fence-storage", script: "bench/fence-storage.ts" },
  { name: "local-e2e", script: "bench/local-e2e.ts" },
  { name: "api", script: "bench/api.ts" },
  { name: "cleanup", script: "bench/cleanup.ts" },
];

const { values: argv } = parseArgs({
  options: { quick: { type: "boolean", default: false }, only: { type: "string" } },
});
const only = argv.only?.split(",").map((s) => s.trim());
const unknown = (only ?? []).filter((name) => !BENCHMARKS.some((b) => b.name === name));
if (unknown.length > 0) {
  console.error(
    `unknown benchmark(s): ${unknown.join(", ")}; known: ${BENCHMARKS.map((b) => b.name).join(", ")}`,
  );
  process.exit(2);
}
const selected = BENCHMARKS.filter((b) => !only || only.includes(b.name));

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
