/**
 * `node bench/batch-commit.ts`: batch-commit mode against the bare per-record transaction. The
 * reference consumer's effect (functions/award-points) applied by:
 *
 * - `bare`: each job its own transaction with no fence (BEGIN; effect; COMMIT): the baseline;
 * - `per-record`: the harness in per-record mode (SQS batches of 10);
 * - `batch 10`, `batch 50`: the harness in batch-commit mode, SQS batches of that size;
 * - `batch 10 + 1 failing`, `batch 50 + 1 failing`: the same with one job per batch whose work
 *   throws, so every batch rolls back once and is redone without it (rate = applied effects/s).
 *
 * on one pool per network (award-points's role, max = concurrency), at the same concurrency, fresh
 * jobs each round, variants rotated round to round. Twice: on loopback, and through a latency proxy
 * adding `--rtt` ms per round trip (bench/latency-proxy.ts), closer to Lambda → RDS Proxy → Aurora
 * where every round trip and commit costs more. Targets at batch 10: ≥ 1.8 × bare on loopback and
 * ≥ 3 × bare with 0.5 ms of round-trip latency. A third run adds `--commit-ms` (default 2) to every
 * COMMIT on top of that latency (the proxy holds the COMMIT back while the transaction keeps its
 * locks), as a commit that is a quorum write across zones costs: no target, the figure shows where
 * the commits batch mode saves start to dominate.
 *
 * Options: `--jobs N` per variant per round (default 3,000; 300 with --quick), `--reps N`
 * (default 5), `--concurrency N` (default 8), `--rtt ms` (default 0.5), `--commit-ms ms` (default
 * 2; 0 skips that run), `--durability
 * durable|fast` (embedded only; default durable).
 */
import { parseArgs } from "node:util";
import pg from "pg";
import { createPool } from "../shared/db/pool.ts";
import { consumerRoleName } from "../shared/db/queries/provision-login.ts";
import {
  bareVariant,
  compareVariants,
  harnessVariant,
  type Variant,
  type VariantRates,
} from "./harness-driver.ts";
import { startLatencyProxy } from "./latency-proxy.ts";
import { describeEnvironment, int, median, ratio, showSpread, spread, table, writeResult } from "./report.ts";
import { benchDatabase, createCleanups, positiveInt, runBenchmark } from "./support.ts";

const { values: argv } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    jobs: { type: "string" },
    reps: { type: "string" },
    concurrency: { type: "string" },
    rtt: { type: "string", default: "0.5" },
    "commit-ms": { type: "string", default: "2" },
    durability: { type: "string", default: "durable" },
  },
});
const QUICK = argv.quick;
const JOBS = positiveInt(argv.jobs, QUICK ? 300 : 3000, "jobs");
const REPS = positiveInt(argv.reps, 5, "reps");
const CONCURRENCY = positiveInt(argv.concurrency, 8, "concurrency");
const RTT = Number(argv.rtt);
if (!Number.isFinite(RTT) || RTT <= 0) {
  console.error(`--rtt must be a positive number of milliseconds, got ${argv.rtt}`);
  process.exit(2);
}
const COMMIT_MS = Number(argv["commit-ms"]);
if (!Number.isFinite(COMMIT_MS) || COMMIT_MS < 0) {
  console.error(`--commit-ms must be a number of milliseconds ≥ 0, got ${argv["commit-ms"]}`);
  process.exit(2);
}
const DURABILITY = argv.durability === "fast" ? "fast" : "durable";
const TARGETS = { loopback: 1.8, latency: 3 } as const;

function variants(pool: pg.Pool, url: string): Variant[] {
  const harness = (
    label: string,
    batchSize: number,
    failing: boolean,
    commitMode: "batch" | "per-record" = "batch",
  ) =>
    harnessVariant(label, pool, url, {
      commitMode,
      batchSize,
      concurrency: CONCURRENCY,
      ...(failing ? { failEvery: batchSize } : {}),
    });
  return [
    bareVariant("bare", pool, CONCURRENCY),
    harness("per-record", 10, false, "per-record"),
    harness("batch 10", 10, false),
    harness("batch 50", 50, false),
    harness("batch 10 + 1 failing", 10, true),
    harness("batch 50 + 1 failing", 50, true),
  ];
}

/** Each variant's rate and its ratio to bare in the same round. */
function summarize(rates: VariantRates) {
  const bare = rates.bare ?? [];
  return Object.fromEntries(
    Object.entries(rates).map(([label, values]) => [
      label,
      { rate: spread(values), vs_bare: spread(values.map((v, i) => v / (bare[i] ?? Number.NaN))) },
    ]),
  );
}

const cleanups = createCleanups();
await runBenchmark(async () => {
  const database = await benchDatabase(DURABILITY, cleanups);
  const admin = new pg.Client({ connectionString: database.url });
  await admin.connect();
  cleanups.push(() => admin.end());
  const environment = await describeEnvironment(admin, database.serverKind, ["fsync", "synchronous_commit"]);
  const target = new URL(database.url);
  const proxy = await startLatencyProxy({
    target: { host: target.hostname, port: Number(target.port || 5432) },
    oneWayDelayMs: RTT / 2,
  });
  cleanups.push(() => proxy.stop());

  const slowCommit = await startLatencyProxy({
    target: { host: target.hostname, port: Number(target.port || 5432) },
    oneWayDelayMs: RTT / 2,
    commitDelayMs: COMMIT_MS,
  });
  cleanups.push(() => slowCommit.stop());

  const networks = [
    { name: "loopback", url: database.url },
    { name: `+${RTT} ms RTT`, url: proxy.url(database.url) },
    ...(COMMIT_MS > 0
      ? [{ name: `+${RTT} ms RTT, ${COMMIT_MS} ms commit`, url: slowCommit.url(database.url) }]
      : []),
  ];
  const results: Record<string, ReturnType<typeof summarize>> = {};
  const raw: Record<string, VariantRates> = {};
  for (const network of networks) {
    console.log(
      `\n${network.name}: ${JOBS} jobs per variant per round, ${REPS} rounds, concurrency ${CONCURRENCY}`,
    );
    const pool = createPool({
      connectionString: network.url,
      role: consumerRoleName("award-points"),
      max: CONCURRENCY,
    });
    try {
      raw[network.name] = await compareVariants(variants(pool, network.url), {
        reps: REPS,
        jobs: JOBS,
        log: (line) => console.log(`  ${line}`),
      });
    } finally {
      await pool.end();
    }
    results[network.name] = summarize(raw[network.name] ?? {});
  }

  const labels = Object.keys(results.loopback ?? {});
  console.log(
    `\n${table(
      ["variant", ...networks.flatMap((n) => [`${n.name} effects/s`, "× bare"])],
      labels.map((label) => [
        label,
        ...networks.flatMap((n) => {
          const r = results[n.name]?.[label];
          return r ? [showSpread(r.rate, int), showSpread(r.vs_bare, ratio)] : ["–", "–"];
        }),
      ]),
    )}`,
  );
  const batch10 = (network: string) =>
    median(
      results[network]?.["batch 10"]?.vs_bare
        ? [results[network]?.["batch 10"]?.vs_bare.median ?? Number.NaN]
        : [],
    );
  const loopback = batch10("loopback");
  const latency = batch10(`+${RTT} ms RTT`);
  const met = { loopback: loopback >= TARGETS.loopback, latency: latency >= TARGETS.latency };
  const verdict =
    `batch 10: ${ratio(loopback)} bare on loopback (target ≥ ${TARGETS.loopback}×: ${met.loopback ? "met" : "MISSED"}), ` +
    `${ratio(latency)} with ${RTT} ms RTT (target ≥ ${TARGETS.latency}×: ${met.latency ? "met" : "MISSED"})`;
  console.log(`\nVERDICT: ${verdict}`);
  const path = await writeResult("batch-commit", {
    benchmark: "batch-commit mode vs bare per-record transactions",
    options: {
      jobs: JOBS,
      reps: REPS,
      concurrency: CONCURRENCY,
      rtt_ms: RTT,
      durability: DURABILITY,
      quick: QUICK,
    },
    method:
      "per network one pool (award-points's role, max = concurrency) shared by every variant; per round fresh jobs, variant order rotated; effects/s = applied jobs / wall time; ratios per round against bare",
    environment: {
      ...environment,
      durability: database.embedded ? DURABILITY : "server's own",
      proxy: await proxy.stats(),
    },
    targets: TARGETS,
    results,
    rates: raw,
    met,
    verdict,
  });
  console.log(`wrote ${path}`);
}, cleanups);
