/**
 * `node bench/experiments/latency-proxy.ts`: what the latency proxy (bench/lib/latency-proxy.ts)
 * adds, and what it costs: for each configured RTT, the median `SELECT 1` round trip through the
 * proxy minus direct, and the worker's CPU idle and under load.
 *
 * Method, per configured RTT: a proxy worker with oneWayDelayMs = RTT / 2; one connection direct
 * and one through the proxy; 50 warm-up pairs, then `--samples` round trips alternating direct and
 * proxied. Added = median(proxied) − median(direct) (p90 likewise); the error per chunk is the mean
 * time from a queued chunk's due time to its write (the delay's own error; negative = early); the
 * worker's CPU is its process.threadCpuUsage over the samples. At RTT 0.5 ms (or the last RTT when
 * 0.5 is not among them) the worker's CPU is also read idle for 1 s, and under `--connections`
 * clients running `SELECT 1` in closed loops for `--load-ms`.
 */
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { z } from "zod";
import { defineBenchmark } from "../lib/define.ts";
import {
  type LatencyProxy,
  type LatencyProxyStats,
  startLatencyProxy,
  targetOf,
} from "../lib/latency-proxy.ts";
import { ascending, median, round2 } from "../lib/report.ts";
import { percentile } from "../lib/support.ts";

const options = z.object({
  rtt: z
    .array(z.coerce.number().nonnegative())
    .min(1)
    .default([0, 0.25, 0.5, 1, 2])
    .describe("configured round-trip times to measure, ms"),
  samples: z.coerce.number().int().positive().default(1000).describe("round trips per RTT, each way"),
  connections: z.coerce.number().int().positive().default(32).describe("closed-loop clients of the load"),
  loadMs: z.coerce.number().int().positive().default(3000).describe("how long the load runs, ms"),
});

const WARMUP_PAIRS = 50;
const IDLE_MS = 1000;

interface Row {
  readonly configured_rtt_ms: number;
  readonly direct_p50_ms: number;
  readonly proxied_p50_ms: number;
  readonly added_p50_ms: number;
  readonly added_p90_ms: number;
  readonly worker_cpu_pct: number;
  readonly mean_late_us: number;
}

interface Load {
  readonly configured_rtt_ms: number;
  readonly idle_cpu_pct: number;
  readonly load_connections: number;
  readonly load_queries_per_s: number;
  readonly load_cpu_pct: number;
}

const r3 = (value: number) => Math.round(value * 1000) / 1000;
const cpuMs = (a: LatencyProxyStats, b: LatencyProxyStats) =>
  (b.cpuUserUs + b.cpuSystemUs - a.cpuUserUs - a.cpuSystemUs) / 1000;

async function roundTrip(client: pg.Client): Promise<number> {
  const t0 = performance.now();
  await client.query("SELECT 1");
  return performance.now() - t0;
}

await defineBenchmark({
  name: "latency-proxy",
  title: "latency proxy: round-trip time added per configured RTT, and the worker's CPU",
  method:
    "per configured RTT: a proxy worker with oneWayDelayMs = RTT / 2; 50 warm-up pairs, then `samples` SELECT 1 round trips " +
    "alternating direct and proxied on one connection each; added = median(proxied) − median(direct); error per chunk = " +
    "mean time from a queued chunk's due time to its write (the delay's own error; negative = early); worker CPU from " +
    "process.threadCpuUsage in the worker over the measurement, idle for 1 s, and under `connections` closed-loop clients",
  options,
  quick: { samples: 200, loadMs: 1000 },
  database: "fast",
  async setup({ database, cleanups }) {
    const direct = new pg.Client({ connectionString: database.url });
    await direct.connect();
    cleanups.push(() => direct.end());
    return direct;
  },
  async run({ options: o, database, table }, direct) {
    const rows: Row[] = [];
    let load: Load | undefined;
    for (const rtt of o.rtt) {
      const proxy = await startLatencyProxy({ target: targetOf(database.url), oneWayDelayMs: rtt / 2 });
      try {
        const proxied = new pg.Client({ connectionString: proxy.url(database.url) });
        await proxied.connect();
        for (let i = 0; i < WARMUP_PAIRS; i++) await Promise.all([roundTrip(direct), roundTrip(proxied)]);
        const d: number[] = [];
        const p: number[] = [];
        const before = await proxy.stats();
        const t0 = performance.now();
        for (let i = 0; i < o.samples; i++) {
          d.push(await roundTrip(direct));
          p.push(await roundTrip(proxied));
        }
        const wall = performance.now() - t0;
        const after = await proxy.stats();
        await proxied.end();
        const [ds, ps] = [ascending(d), ascending(p)];
        rows.push({
          configured_rtt_ms: rtt,
          direct_p50_ms: r3(median(d)),
          proxied_p50_ms: r3(median(p)),
          added_p50_ms: r3(median(p) - median(d)),
          added_p90_ms: r3(percentile(ps, 90) - percentile(ds, 90)),
          worker_cpu_pct: round2((100 * cpuMs(before, after)) / wall),
          mean_late_us:
            after.delayed > before.delayed
              ? round2((after.lateUsTotal - before.lateUsTotal) / (after.delayed - before.delayed))
              : 0,
        });
        if (rtt === 0.5 || (load === undefined && rtt === o.rtt.at(-1))) {
          load = await measureLoad(proxy, database.url, rtt, o.connections, o.loadMs);
        }
      } finally {
        await proxy.stop();
      }
    }
    table(
      "what the proxy adds, per configured RTT",
      [
        "configured RTT ms",
        "direct p50 ms",
        "proxied p50 ms",
        "added p50 ms",
        "added p90 ms",
        "error per chunk µs",
        "worker CPU %",
      ],
      rows.map((r) => [
        String(r.configured_rtt_ms),
        r.direct_p50_ms.toFixed(3),
        r.proxied_p50_ms.toFixed(3),
        r.added_p50_ms.toFixed(3),
        r.added_p90_ms.toFixed(3),
        r.mean_late_us.toFixed(1),
        r.worker_cpu_pct.toFixed(1),
      ]),
    );
    if (load) {
      table(
        `the worker's CPU at RTT ${load.configured_rtt_ms} ms, % of a core`,
        ["state", "queries/s", "worker CPU %"],
        [
          ["idle", "0", load.idle_cpu_pct.toFixed(1)],
          [
            `${load.load_connections} connections in closed loops`,
            String(load.load_queries_per_s),
            load.load_cpu_pct.toFixed(1),
          ],
        ],
      );
    }
    return { rows, load };
  },
  verdict({ rows }) {
    const half = rows.find((r) => r.configured_rtt_ms === 0.5);
    const zero = rows.find((r) => r.configured_rtt_ms === 0);
    return {
      targets: [],
      notes: [
        half
          ? `configured RTT 0.5 ms adds ${half.added_p50_ms.toFixed(3)} ms at the median` +
            (zero ? ` (the extra hop alone, RTT 0: ${zero.added_p50_ms.toFixed(3)} ms)` : "")
          : "RTT 0.5 ms not measured",
      ],
    };
  },
});

/** The worker's CPU idle, then with `connections` clients in closed loops for `loadMs`. */
async function measureLoad(
  proxy: LatencyProxy,
  url: string,
  rtt: number,
  connections: number,
  loadMs: number,
): Promise<Load> {
  const idle0 = await proxy.stats();
  const idleStart = performance.now();
  await sleep(IDLE_MS);
  const idle1 = await proxy.stats();
  const idleMs = performance.now() - idleStart;
  const clients = await Promise.all(
    Array.from({ length: connections }, async () => {
      const c = new pg.Client({ connectionString: proxy.url(url) });
      await c.connect();
      return c;
    }),
  );
  try {
    const l0 = await proxy.stats();
    const loadStart = performance.now();
    let queries = 0;
    await Promise.all(
      clients.map(async (c) => {
        while (performance.now() - loadStart < loadMs) {
          await c.query("SELECT 1");
          queries++;
        }
      }),
    );
    const l1 = await proxy.stats();
    const loadWall = performance.now() - loadStart;
    return {
      configured_rtt_ms: rtt,
      idle_cpu_pct: round2((100 * cpuMs(idle0, idle1)) / idleMs),
      load_connections: connections,
      load_queries_per_s: Math.round(queries / (loadWall / 1000)),
      load_cpu_pct: round2((100 * cpuMs(l0, l1)) / loadWall),
    };
  } finally {
    await Promise.all(clients.map((c) => c.end()));
  }
}
