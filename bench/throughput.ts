/**
 * `npm run bench -- --only throughput`: effects per second of the reference consumer's effect (one
 * ledger row + the user's balance, functions/award-points) applied by
 *
 * - `bare`: each job its own transaction with no fence (BEGIN; effect; COMMIT): the baseline;
 * - `minimal fenced`: the same with the fence written by hand, no harness: BEGIN and the fence
 *   insert in one message (the shipped statement, `beginWithFences`), the effect, the checked
 *   COMMIT (`fenceCommit`). The fence row is the database's cost; harness ÷ minimal fenced is what
 *   the harness itself adds;
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
import type pg from "pg";
import { z } from "zod";
import { createPool } from "../shared/db/pool.ts";
import { beginWithFences, fenceCommit } from "../shared/db/queries/begin-with-fences.ts";
import { consumerRoleName } from "../shared/db/queries/provision-login.ts";
import { FINGERPRINT_BYTES } from "../shared/envelope/fingerprint.ts";
import { defineBenchmark } from "./lib/define.ts";
import {
  bareVariant,
  compareVariants,
  harnessVariant,
  transactionVariant,
  type Variant,
  type VariantRates,
} from "./lib/harness-driver.ts";
import { startLatencyProxy } from "./lib/latency-proxy.ts";
import { int, rateRows, ratio, ratioSpread, type Spread, showSpread, spread } from "./lib/report.ts";

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

/** A fingerprint's worth of bytes: the row the harness writes, without hashing in the client. */
const FINGERPRINT = Buffer.alloc(FINGERPRINT_BYTES, 0xab);
const FENCE_TTL_SECONDS = 7 * 24 * 3600;

/** The fence written by hand: the shipped BEGIN + fence message, the effect, the checked COMMIT; no harness. */
function minimalFencedVariant(pool: pg.Pool, concurrency: number): Variant {
  return transactionVariant("minimal fenced", pool, concurrency, async (client, job) =>
    fenceCommit(
      await beginWithFences(client, {
        consumer: "award-points",
        ttlSeconds: FENCE_TTL_SECONDS,
        jobs: [{ ...job, fingerprint: FINGERPRINT }],
      }),
    ),
  );
}

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
    minimalFencedVariant(pool, o.concurrency),
    harness("per-record", "per-record", 10),
    harness("batch 10", "batch", 10),
    harness("batch 50", "batch", 50),
    harness("batch 10 + 1 failing", "batch", 10, true),
    harness("batch 50 + 1 failing", "batch", 50, true),
  ];
}

/** Per variant: its rate, and its ratio to another variant in the same round. */
type Summary = Record<string, { rate: Spread; vsBare: Spread; vsMinimal: Spread }>;

function summarize(rates: VariantRates): Summary {
  return Object.fromEntries(
    Object.entries(rates).map(([label, values]) => [
      label,
      {
        rate: spread(values),
        vsBare: ratioSpread(values, rates.bare ?? []),
        vsMinimal: ratioSpread(values, rates["minimal fenced"] ?? []),
      },
    ]),
  );
}

await defineBenchmark({
  name: "throughput",
  title:
    "effects/s: bare, minimal fenced, the harness per-record and in batch-commit mode; loopback, +RTT, +slow commit",
  method:
    "per network one pool (award-points' role, max = concurrency) shared by every variant; per round fresh jobs, variant order rotated; effects/s = applied jobs / wall time; ratios per round; client CPU per effect from process.cpuUsage on loopback",
  options,
  quick: { jobs: 300, reps: 3 },
  database: "durable",
  async setup({ database, options: o, cleanups }) {
    const target = new URL(database.url);
    const upstream = { host: target.hostname, port: Number(target.port || 5432) };
    const networks = [{ name: "loopback", url: database.url }];
    const latency = await startLatencyProxy({ target: upstream, oneWayDelayMs: o.rtt / 2 });
    cleanups.push(() => latency.stop());
    networks.push({ name: `+${o.rtt} ms RTT`, url: latency.url(database.url) });
    if (o.commitMs > 0) {
      const slow = await startLatencyProxy({
        target: upstream,
        oneWayDelayMs: o.rtt / 2,
        commitDelayMs: o.commitMs,
      });
      cleanups.push(() => slow.stop());
      networks.push({ name: `+${o.rtt} ms RTT, ${o.commitMs} ms commit`, url: slow.url(database.url) });
    }
    return networks;
  },
  async run({ options: o, table }, networks) {
    const rates: Record<string, VariantRates> = {};
    const clientCpu: VariantRates = {};
    for (const [index, network] of networks.entries()) {
      console.log(
        `\n${network.name}: ${o.jobs} jobs per variant per round, ${o.reps} rounds, concurrency ${o.concurrency}`,
      );
      const pool = createPool({
        connectionString: network.url,
        role: consumerRoleName("award-points"),
        max: o.concurrency,
      });
      try {
        rates[network.name] = await compareVariants(variants(pool, network.url, o), {
          reps: o.reps,
          jobs: o.jobs,
          log: (line) => console.log(`  ${line}`),
          ...(index === 0 ? { clientCpu } : {}),
        });
      } finally {
        await pool.end();
      }
    }
    const summaries = Object.fromEntries(Object.entries(rates).map(([name, r]) => [name, summarize(r)]));
    table(
      "effects/s, median (min–max) over rounds, and the ratio to bare in the same round",
      ["variant", ...networks.flatMap((n) => [n.name, "× bare"])],
      rateRows(
        networks.map((n) => n.name),
        summaries,
      ),
    );
    const cpu = Object.fromEntries(
      Object.entries(clientCpu).map(([label, values]) => [label, spread(values)]),
    );
    table(
      "client CPU per effect on loopback (µs, user + system, all threads)",
      ["variant", "µs per effect"],
      Object.entries(cpu).map(([label, s]) => [label, showSpread(s, int)]),
    );
    return { networks: networks.map((n) => n.name), rates, summaries, clientCpu, cpu };
  },
  verdict({ networks, summaries, cpu }) {
    const [loopback = "", latency = "", slowCommit] = networks;
    const on = (network: string | undefined, label: string) =>
      network ? summaries[network]?.[label] : undefined;
    const nan = Number.NaN;
    const cpuRatio = (cpu["per-record"]?.median ?? nan) / (cpu.bare?.median ?? nan);
    return {
      targets: [
        {
          name: "harness per-record ÷ minimal fenced, loopback",
          measured: on(loopback, "per-record")?.vsMinimal.median ?? nan,
          bound: "at least",
          target: 0.95,
          format: ratio,
          cause: `the client's CPU: ${ratio(cpuRatio)} bare's per effect on cores it shares with the server (table above)`,
        },
        {
          name: "client CPU per effect, harness per-record ÷ bare",
          measured: cpuRatio,
          bound: "at most",
          target: 1.3,
          format: ratio,
        },
        {
          name: "harness per-record ÷ bare, +RTT",
          measured: on(latency, "per-record")?.vsBare.median ?? nan,
          bound: "at least",
          target: 0.95,
          format: ratio,
        },
        ...(slowCommit
          ? [
              {
                name: "batch 10 ÷ bare, +RTT and slow commit",
                measured: on(slowCommit, "batch 10")?.vsBare.median ?? nan,
                bound: "at least" as const,
                target: 3,
                format: ratio,
              },
            ]
          : []),
      ],
      notes: [
        `per-record ÷ bare on loopback: ${ratio(on(loopback, "per-record")?.vsBare.median ?? nan)}; batch 10 ÷ bare: ${ratio(on(loopback, "batch 10")?.vsBare.median ?? nan)} on loopback, ${ratio(on(latency, "batch 10")?.vsBare.median ?? nan)} at +RTT`,
      ],
    };
  },
});
