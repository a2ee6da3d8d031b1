/**
 * `npm run bench -- --only throughput`: effects per second of the reference consumer's effect (one
 * ledger row + the user's balance, functions/award-points) applied by
 *
 * - `bare`: each job its own transaction with no fence (BEGIN; effect; COMMIT): the baseline;
 * - `minimal fenced`: the same with the fence written by hand, no harness: BEGIN and the fence
 *   insert in one message (the shipped statement, `beginWithFences`), the effect, COMMIT. The fence
 *   row is the database's cost; harness ÷ minimal fenced is what the harness itself adds;
 * - `per-record`: the harness in per-record mode (SQS batches of 10, as Lambda delivers them);
 * - `batch 10`, `batch 50`: the harness in batch-commit mode, SQS batches of that size;
 * - `batch 10 + 1 failing`, `batch 50 + 1 failing`: the same with one job per batch whose work
 *   throws, so every batch rolls back once and is redone without it (rate = applied effects/s),
 *
 * on one pool per network (award-points' role, max = concurrency), at the same concurrency, fresh
 * jobs each round, the variants' order rotated round to round (bench/lib/harness-driver.ts). Three
 * networks: loopback; a latency proxy adding `--rtt` ms per round trip (bench/lib/latency-proxy.ts),
 * closer to Lambda → RDS Proxy → Aurora where round trips rather than this machine's CPU are the
 * cost; and the same with `--commit-ms` more on every COMMIT (the proxy holds the COMMIT back while
 * the transaction keeps its locks), as a commit that is a quorum write across zones costs.
 *
 * The client's CPU per effect (this process's user + system time per applied effect, all threads)
 * is recorded on loopback: client and server share this machine's cores, so CPU the client spends
 * is CPU the server does not get. The harness is invoked in process with stand-in SQS and
 * EventBridge clients that answer at once; nothing fails but the failing variants' jobs, whose
 * ChangeMessageVisibility costs no network time.
 */
import { availableParallelism } from "node:os";
import type pg from "pg";
import { z } from "zod";
import { createPool } from "../shared/db/pool.ts";
import { countQueries } from "./lib/counting-pool.ts";
import { defineBenchmark } from "./lib/define.ts";
import { BENCH_CONSUMER, FENCED_STEPS } from "./lib/fenced.ts";
import {
  bareVariant,
  compareVariants,
  harnessVariant,
  type PerEffectMeter,
  processCpuMeter,
  transactionVariant,
  type Variant,
  type VariantRates,
} from "./lib/harness-driver.ts";
import { startLatencyProxy } from "./lib/latency-proxy.ts";
import { int, rateRows, ratio, ratioSpread, type Spread, showSpread, spread } from "./lib/report.ts";
import { meterServerCpu } from "./lib/server-cpu.ts";
import { consumerLoginUrl } from "./lib/support.ts";

const options = z.object({
  jobs: z.coerce.number().int().positive().default(3000).describe("jobs per variant per round"),
  reps: z.coerce.number().int().positive().default(5).describe("measured rounds after a warm-up round"),
  concurrency: z.coerce
    .number()
    .int()
    .positive()
    .default(8)
    .describe("concurrent invocations (and pool size)"),
  rtt: z.coerce.number().positive().default(0.5).describe("round-trip time the latency proxy adds, ms"),
  commitMs: z.coerce
    .number()
    .nonnegative()
    .default(2)
    .describe("time held on every COMMIT on the third network, ms (0 skips it)"),
});
type Options = z.output<typeof options>;

function variants(pool: pg.Pool, url: string, o: Options): Variant[] {
  const harness = (label: string, commitMode: "batch" | "per-record", batchSize: number, failing = false) =>
    harnessVariant(label, pool, url, {
      commitMode,
      batchSize,
      concurrency: o.concurrency,
      ...(failing ? { failEvery: batchSize } : {}),
    });
  return [
    bareVariant("bare", pool, o.concurrency),
    transactionVariant("minimal fenced", pool, o.concurrency, FENCED_STEPS),
    harness("per-record", "per-record", 10),
    harness("batch 10", "batch", 10),
    harness("batch 50", "batch", 50),
    harness("batch 10 + 1 failing", "batch", 10, true),
    harness("batch 50 + 1 failing", "batch", 50, true),
  ];
}

/** What is read per effect besides the rate: CPU (µs), round trips and COMMITs. */
type Measure = "client" | "server" | "roundTrips" | "commits";

/** Per variant: its rate, its ratio to another variant in the same round, and each measure per effect. */
type Summary = Record<string, { rate: Spread; vsBare: Spread; vsMinimal: Spread } & Record<Measure, Spread>>;

/** A meter of a running count. */
const counter = (read: () => number): PerEffectMeter => ({ read, perEffect: {} });

function summarize(rates: VariantRates, meters: Record<Measure, PerEffectMeter>): Summary {
  const per = (measure: Measure, label: string) => spread(meters[measure].perEffect[label] ?? []);
  return Object.fromEntries(
    Object.entries(rates).map(([label, values]) => [
      label,
      {
        rate: spread(values),
        vsBare: ratioSpread(values, rates.bare ?? []),
        vsMinimal: ratioSpread(values, rates["minimal fenced"] ?? []),
        client: per("client", label),
        server: per("server", label),
        roundTrips: per("roundTrips", label),
        commits: per("commits", label),
      },
    ]),
  );
}

await defineBenchmark({
  name: "throughput",
  title:
    "effects/s: bare, minimal fenced, the harness per-record and in batch-commit mode; loopback, +RTT, +slow commit",
  method:
    "per network one pool (an award-points login, max = concurrency) shared by every variant; per round fresh jobs, variant order rotated; effects/s = applied jobs / wall time; ratios per round; CPU per effect: this process (process.cpuUsage, all threads: the latency proxy's on the proxied networks) and the server (the pool's backends, /proc schedstat)",
  options,
  quick: { jobs: 300, reps: 3 },
  database: "durable",
  async setup({ database, options: o, cleanups }) {
    const target = new URL(database.url);
    const upstream = { host: target.hostname, port: Number(target.port || 5432) };
    const url = await consumerLoginUrl(database, BENCH_CONSUMER, cleanups);
    const networks = [{ name: "loopback", url }];
    const latency = await startLatencyProxy({ target: upstream, oneWayDelayMs: o.rtt / 2 });
    cleanups.push(() => latency.stop());
    networks.push({ name: `+${o.rtt} ms RTT`, url: latency.url(url) });
    if (o.commitMs > 0) {
      const slow = await startLatencyProxy({
        target: upstream,
        oneWayDelayMs: o.rtt / 2,
        commitDelayMs: o.commitMs,
      });
      cleanups.push(() => slow.stop());
      networks.push({ name: `+${o.rtt} ms RTT, ${o.commitMs} ms commit`, url: slow.url(url) });
    }
    return networks;
  },
  async run({ options: o, table }, networks) {
    const summaries: Record<string, Summary> = {};
    for (const network of networks) {
      console.log(
        `\n${network.name}: ${o.jobs} jobs per variant per round, ${o.reps} rounds, concurrency ${o.concurrency}`,
      );
      const pool = createPool({ connectionString: network.url, max: o.concurrency });
      const counts = countQueries(pool);
      const [client, server] = [processCpuMeter(), meterServerCpu(pool)];
      const [roundTrips, commits] = [counter(() => counts.roundTrips), counter(() => counts.commits)];
      try {
        const rates = await compareVariants(variants(pool, network.url, o), {
          reps: o.reps,
          jobs: o.jobs,
          log: (line) => console.log(`  ${line}`),
          meters: [client, server, roundTrips, commits],
        });
        summaries[network.name] = summarize(rates, { client, server, roundTrips, commits });
      } finally {
        await pool.end();
      }
    }
    const names = networks.map((n) => n.name);
    table(
      "effects/s, median (min–max) over rounds, and the ratio to bare in the same round",
      ["variant", ...names.flatMap((n) => [n, "× bare"])],
      rateRows(names, summaries),
    );
    table(
      "CPU per effect, µs, median (min–max) over rounds: this process (client; with the proxy's thread on the proxied networks) and the server",
      ["variant", ...names.flatMap((n) => [`client, ${n}`, "server"])],
      Object.keys(summaries[names[0] ?? ""] ?? {}).map((label) => [
        label,
        ...names.flatMap((n) => {
          const s = summaries[n]?.[label];
          return s ? [showSpread(s.client, int), showSpread(s.server, int)] : ["–", "–"];
        }),
      ]),
    );
    return { networks: names, summaries, cores: availableParallelism() };
  },
  verdict({ networks, summaries, cores }, { options: o }) {
    const [loopback = "", latency = "", slowCommit] = networks;
    const nan = Number.NaN;
    const on = (network: string | undefined, label: string) =>
      network ? summaries[network]?.[label] : undefined;
    const per = (network: string | undefined, label: string, measure: Measure) =>
      on(network, label)?.[measure].median ?? nan;
    const delta = (value: number) => `${value >= 0 ? "+" : "−"}${int(Math.abs(value))}`;
    const client = (label: string) => per(loopback, label, "client");
    const server = (label: string) => per(loopback, label, "server");
    const cpuRatio = client("per-record") / client("bare");
    /**
     * Where an effect's time goes on one connection of the slow-commit network, in ms: waiting on
     * round trips and held COMMITs, CPU (this process, the proxy's thread included, and the
     * server), and the rest, queued for the machine's cores.
     */
    const timeOf = (label: string) => {
      const waits =
        o.rtt * per(slowCommit, label, "roundTrips") + o.commitMs * per(slowCommit, label, "commits");
      const cpu = (per(slowCommit, label, "client") + per(slowCommit, label, "server")) / 1000;
      const wall = (o.concurrency * 1000) / (on(slowCommit, label)?.rate.median ?? nan);
      return { waits, cpu, queued: wall - waits - cpu, wall };
    };
    const [bare, batch] = [timeOf("bare"), timeOf("batch 10")];
    const ms = (value: number) => value.toFixed(2);
    const shown = (t: typeof bare) =>
      `${ms(t.wall)} = ${ms(t.waits)} waiting + ${ms(t.cpu)} CPU + ${ms(t.queued)} queued`;
    return {
      targets: [
        {
          name: "client CPU per effect, harness per-record ÷ bare, loopback",
          measured: cpuRatio,
          bound: "at most",
          target: 1.5,
          format: ratio,
          cause: `per effect: bare ${int(client("bare"))} µs; the fence by hand ${int(client("minimal fenced"))} (${delta(client("minimal fenced") - client("bare"))}: its SQL's text, results and COMMIT check); the harness ${int(client("per-record"))} (${delta(client("per-record") - client("minimal fenced"))}: the harness's own code, which bench/experiments/harness-cpu.ts breaks down)`,
        },
        {
          name: "harness per-record ÷ minimal fenced, loopback",
          measured: on(loopback, "per-record")?.vsMinimal.median ?? nan,
          bound: "at least",
          target: 0.95,
          format: ratio,
          cause: `per effect the harness takes client ${int(client("per-record"))} µs (${delta(client("per-record") - client("minimal fenced"))}) and server ${int(server("per-record"))} µs (${delta(server("per-record") - server("minimal fenced"))}) against the fence by hand; client and server share the machine's ${cores} cores, and their sums alone predict ${ratio((client("minimal fenced") + server("minimal fenced")) / (client("per-record") + server("per-record")))}`,
        },
        ...(slowCommit
          ? [
              {
                name: `batch 10 ÷ bare, ${slowCommit}`,
                measured: on(slowCommit, "batch 10")?.vsBare.median ?? nan,
                bound: "at least" as const,
                target: 3,
                format: ratio,
                cause: `an effect's time on one of ${o.concurrency} connections, ms: bare ${shown(bare)}; batch 10 ${shown(batch)} (CPU µs: client and proxy ${int(per(slowCommit, "batch 10", "client"))}, server ${int(per(slowCommit, "batch 10", "server"))}; bare's server ${int(per(slowCommit, "bare", "server"))}). Waiting and CPU alone give ${ratio((bare.waits + bare.cpu) / (batch.waits + batch.cpu))}; what is queued waits for the machine's ${cores} cores, which other processes share`,
              },
            ]
          : []),
      ],
      notes: [
        `per-record ÷ bare: ${ratio(on(loopback, "per-record")?.vsBare.median ?? nan)} on loopback, ${ratio(on(latency, "per-record")?.vsBare.median ?? nan)} at +RTT; batch 10 ÷ bare: ${ratio(on(loopback, "batch 10")?.vsBare.median ?? nan)} on loopback, ${ratio(on(latency, "batch 10")?.vsBare.median ?? nan)} at +RTT`,
      ],
    };
  },
});
