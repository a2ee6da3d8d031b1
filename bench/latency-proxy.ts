/**
 * A TCP proxy that adds network latency between a client and PostgreSQL, to emulate Lambda →
 * RDS Proxy → Aurora on one machine (no tc/netem needed): every chunk read from either side is
 * written to the other `oneWayDelayMs` later, so one request/response round trip costs
 * 2 × oneWayDelayMs more (`--rtt 0.5` ⇒ oneWayDelayMs 0.25).
 *
 * How: the proxy runs in a worker thread of its own, so its timing does not depend on what the
 * caller's event loop is doing. Chunks go into one FIFO with their due time from
 * `process.hrtime.bigint()` (one delay for both directions, so due times are in arrival order and
 * byte order per connection is kept). Node timers have millisecond granularity, so a wait longer
 * than ~1.5 ms uses setTimeout for the bulk, and the sub-millisecond remainder sleeps in the kernel
 * with `Atomics.wait` on a SharedArrayBuffer in slices of at most 0.1 ms, yielding to the event loop
 * (setImmediate) after each slice so socket reads and writes go on. A kernel sleep overshoots by
 * ~65 µs (timer slack), so each sleep asks for that much less (a running estimate), and a chunk due
 * within half an overshoot is written at once: each chunk goes within about ±35 µs of its due time,
 * and the worker never spins. Nothing pending: nothing scheduled, no CPU. A chunk read while the
 * worker sleeps is stamped when it is read, so under concurrent traffic its delay can exceed the
 * configured one by up to a slice.
 * Backpressure: a side whose peer's write buffer is full is paused until the peer drains. A FIN is
 * forwarded in order after the delay (half-close is kept); an error or reset on either side
 * destroys both.
 *
 * As a library: `startLatencyProxy({ target, oneWayDelayMs })`. As a script, `node
 * bench/latency-proxy.ts [--quick] [--rtt 0,0.25,0.5,1,2] [--samples N] [--connections N]`
 * measures what it adds: the median `SELECT 1` round trip through the proxy minus direct, for each
 * configured RTT (interleaved samples after a warm-up), and the worker's CPU idle and under load
 * from `--connections` clients; database as the benchmarks choose it (DATABASE_URL: a fresh
 * database beside it, dropped at the end; else embedded). Writes bench/results/latency-proxy.json.
 */
import { createServer, connect as netConnect, type Socket } from "node:net";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";

/** Options of {@link startLatencyProxy}. */
export interface LatencyProxyOptions {
  /** Where connections are forwarded (PostgreSQL). */
  readonly target: { readonly host: string; readonly port: number };
  /** Added to each direction; a round trip gains twice this. 0 forwards at once. */
  readonly oneWayDelayMs: number;
  /**
   * Held back, on top of the one-way delay, before a client's `COMMIT` reaches the server: a commit
   * that costs milliseconds, as an Aurora commit (a quorum write across zones) does, while the
   * transaction keeps its locks. Recognised as pg sends it, one simple-query message alone in its
   * chunk; held with a timer (millisecond granularity). The client waits for COMMIT's answer before
   * it sends anything else, so nothing of that connection can overtake it. @default 0
   */
  readonly commitDelayMs?: number;
  /** Interface to listen on. @default "127.0.0.1" */
  readonly host?: string;
}

/** What the proxy worker has done, and its own CPU time. */
export interface LatencyProxyStats {
  readonly connections: number;
  readonly open: number;
  readonly chunks: number;
  readonly bytes: number;
  /** Chunks and FINs that waited in the queue, and how late after their due time they went, in total (µs; early is negative). */
  readonly delayed: number;
  readonly lateUsTotal: number;
  /** CPU time of the proxy's thread (process.threadCpuUsage), microseconds. */
  readonly cpuUserUs: number;
  readonly cpuSystemUs: number;
}

/** A running proxy. */
export interface LatencyProxy {
  /** The port it listens on. */
  readonly port: number;
  /** `databaseUrl` with its host and port replaced by the proxy's. */
  url(databaseUrl: string): string;
  stats(): Promise<LatencyProxyStats>;
  /** Closes the listener and every connection, and ends the worker. */
  stop(): Promise<void>;
}

interface WorkerInput {
  readonly jobfenceLatencyProxy: true;
  readonly host: string;
  readonly targetHost: string;
  readonly targetPort: number;
  readonly oneWayDelayMs: number;
  readonly commitDelayMs: number;
}

type ToWorker = { type: "stop" } | { type: "stats"; id: number };
type FromWorker =
  | { type: "listening"; port: number }
  | { type: "failed"; message: string }
  | { type: "stats"; id: number; stats: LatencyProxyStats }
  | { type: "stopped" };

export async function startLatencyProxy(options: LatencyProxyOptions): Promise<LatencyProxy> {
  if (!Number.isFinite(options.oneWayDelayMs) || options.oneWayDelayMs < 0) {
    throw new RangeError(`oneWayDelayMs must be a finite number ≥ 0, got ${options.oneWayDelayMs}`);
  }
  const commitDelayMs = options.commitDelayMs ?? 0;
  if (!Number.isFinite(commitDelayMs) || commitDelayMs < 0) {
    throw new RangeError(`commitDelayMs must be a finite number ≥ 0, got ${commitDelayMs}`);
  }
  const host = options.host ?? "127.0.0.1";
  const input: WorkerInput = {
    jobfenceLatencyProxy: true,
    host,
    targetHost: options.target.host,
    targetPort: options.target.port,
    oneWayDelayMs: options.oneWayDelayMs,
    commitDelayMs: options.commitDelayMs ?? 0,
  };
  const worker = new Worker(new URL(import.meta.url), { workerData: input });
  const statsWaiters = new Map<number, (stats: LatencyProxyStats) => void>();
  let nextId = 0;
  let stopped: Promise<void> | undefined;
  const exited = new Promise<void>((done) => worker.once("exit", () => done()));

  const port = await new Promise<number>((ready, fail) => {
    const onMessage = (message: FromWorker) => {
      if (message.type === "listening") ready(message.port);
      else if (message.type === "failed") fail(new Error(`latency proxy: ${message.message}`));
    };
    worker.on("message", onMessage);
    worker.once("error", fail);
    worker.once("exit", (code) => fail(new Error(`latency proxy worker exited (${code}) before listening`)));
  });
  worker.on("message", (message: FromWorker) => {
    if (message.type === "stats") statsWaiters.get(message.id)?.(message.stats);
  });
  worker.on("error", (error) => console.error(`latency proxy worker failed: ${error.message}`));

  const send = (message: ToWorker) => worker.postMessage(message);
  return {
    port,
    url(databaseUrl: string): string {
      const url = new URL(databaseUrl);
      url.hostname = host;
      url.port = String(port);
      return url.toString();
    },
    stats() {
      const id = nextId++;
      return new Promise<LatencyProxyStats>((done, fail) => {
        statsWaiters.set(id, (stats) => {
          statsWaiters.delete(id);
          done(stats);
        });
        exited.then(() => fail(new Error("latency proxy stopped")));
        send({ type: "stats", id });
      });
    },
    stop() {
      stopped ??= (async () => {
        const acknowledged = new Promise<void>((done) => {
          worker.on("message", (message: FromWorker) => message.type === "stopped" && done());
        });
        send({ type: "stop" });
        await Promise.race([acknowledged, exited]);
        await worker.terminate();
      })();
      return stopped;
    },
  };
}

// ---------------------------------------------------------------------------------------------
// The worker

/**
 * Whether a frontend message is a simple query ('Q', its length, the text and its terminator)
 * whose last statement is COMMIT: the harness sends its COMMIT behind the fence check, in one
 * message, and a plain `COMMIT` is the same with nothing before it.
 */
export function isCommitQuery(message: Buffer): boolean {
  if (message.length < 6 || message[0] !== 0x51 || message.readInt32BE(1) + 1 !== message.length)
    return false;
  return /(^|;)\s*COMMIT\s*;?\s*$/i.test(message.subarray(5, message.length - 1).toString("utf8"));
}

/** Longest kernel sleep before the worker looks at its sockets again. */
const MAX_SLICE_NS = 100_000;
/**
 * A kernel sleep overshoots what was asked (Linux timer slack, 50 µs by default, plus the wake-up:
 * ~65 µs measured here); the worker keeps a running estimate of it.
 */
const INITIAL_OVERSHOOT_NS = 60_000;
const MIN_SLEEP_NS = 1_000;
const MAX_OVERSHOOT_NS = 200_000;
/** Waits longer than this use a timer for all but the last millisecond. */
const TIMER_ABOVE_NS = 1_500_000n;

/** One direction of one connection. */
interface Direction {
  readonly from: Socket;
  readonly to: Socket;
  /** `from` paused because `to` has too much to write. */
  paused: boolean;
}

/** A chunk to write, or (null) the FIN to forward, when `due` has come. */
interface Pending {
  readonly due: bigint;
  readonly direction: Direction;
  readonly chunk: Buffer | null;
}

function runProxyWorker(input: WorkerInput): void {
  const port = parentPort;
  if (!port) return;
  const delayNs = BigInt(Math.round(input.oneWayDelayMs * 1e6));
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  const sockets = new Set<Socket>();
  const counts = { connections: 0, chunks: 0, bytes: 0, delayed: 0, lateUsTotal: 0 };
  let queue: Pending[] = [];
  let head = 0;
  let scheduled = false;
  let overshootNs = INITIAL_OVERSHOOT_NS;

  const deliver = (direction: Direction, chunk: Buffer | null) => {
    const { from, to } = direction;
    if (to.destroyed) return;
    if (chunk === null) {
      to.end();
      return;
    }
    counts.chunks++;
    counts.bytes += chunk.length;
    if (!to.write(chunk) && !direction.paused && !from.destroyed) {
      direction.paused = true;
      from.pause();
      to.once("drain", () => {
        direction.paused = false;
        if (!from.destroyed) from.resume();
      });
    }
  };

  /** Writes everything due by `now` (plus half the sleep overshoot: see `tick`). */
  const flush = (now: bigint) => {
    const horizon = now + BigInt(Math.round(overshootNs / 2));
    while (head < queue.length) {
      const item = queue[head] as Pending;
      if (item.due > horizon) break;
      head++;
      counts.delayed++;
      counts.lateUsTotal += Number(now - item.due) / 1000;
      deliver(item.direction, item.chunk);
    }
    if (head === queue.length) {
      queue = [];
      head = 0;
    } else if (head > 4096 && head * 2 > queue.length) {
      queue = queue.slice(head);
      head = 0;
    }
  };

  /** A kernel sleep of `ns` (at least the overshoot, whatever is asked); updates the overshoot estimate. */
  const sleep = (ns: number): bigint => {
    const before = process.hrtime.bigint();
    Atomics.wait(sleeper, 0, 0, ns / 1e6);
    const after = process.hrtime.bigint();
    const overshoot = Math.min(MAX_OVERSHOOT_NS, Math.max(0, Number(after - before) - ns));
    overshootNs += (overshoot - overshootNs) / 8;
    return after;
  };

  /**
   * Writes what is due; then, while anything waits: a timer for a wait over ~1.5 ms, else one kernel
   * sleep (a slice at most) and a turn of the event loop for socket I/O. A sleep overshoots by
   * `overshootNs`, so one is asked for that much less; a chunk due within half an overshoot is written
   * at once, and one due later than that but within an overshoot gets the shortest sleep. Either way
   * it goes within ±overshoot/2 of its due time (~±35 µs here), and the worker never spins.
   */
  const tick = () => {
    scheduled = false;
    flush(process.hrtime.bigint());
    if (head === queue.length) return; // idle: nothing scheduled until the next chunk
    const remainingNs = (queue[head] as Pending).due - process.hrtime.bigint();
    scheduled = true;
    if (remainingNs > TIMER_ABOVE_NS) {
      setTimeout(tick, Number(remainingNs / 1_000_000n) - 1);
      return;
    }
    flush(sleep(Math.max(MIN_SLEEP_NS, Math.min(MAX_SLICE_NS, Number(remainingNs) - overshootNs))));
    setImmediate(tick); // let socket I/O run, then look again
  };

  const enqueue = (direction: Direction, chunk: Buffer | null) => {
    if (delayNs === 0n && head === queue.length) {
      deliver(direction, chunk);
      return;
    }
    queue.push({ due: process.hrtime.bigint() + delayNs, direction, chunk });
    if (!scheduled) {
      scheduled = true;
      setImmediate(tick);
    }
  };

  const server = createServer({ allowHalfOpen: true, noDelay: true }, (client) => {
    counts.connections++;
    const upstream = netConnect({
      host: input.targetHost,
      port: input.targetPort,
      allowHalfOpen: true,
      noDelay: true,
    });
    client.setNoDelay(true);
    sockets.add(client);
    sockets.add(upstream);
    const up: Direction = { from: client, to: upstream, paused: false };
    const down: Direction = { from: upstream, to: client, paused: false };
    const destroyBoth = () => {
      client.destroy();
      upstream.destroy();
    };
    for (const [socket, direction] of [
      [client, up],
      [upstream, down],
    ] as const) {
      socket.on("data", (chunk: Buffer) => {
        if (input.commitDelayMs > 0 && direction === up && isCommitQuery(chunk)) {
          setTimeout(() => enqueue(direction, chunk), input.commitDelayMs);
          return;
        }
        enqueue(direction, chunk);
      });
      socket.on("end", () => enqueue(direction, null));
      socket.on("error", destroyBoth);
      // A clean close follows both FINs, each forwarded in order; the peer closes on its own.
      socket.on("close", (hadError) => {
        sockets.delete(socket);
        if (hadError) destroyBoth();
      });
    }
  });
  server.on("error", (error) =>
    port.postMessage({ type: "failed", message: error.message } satisfies FromWorker),
  );
  server.listen(0, input.host, () => {
    const address = server.address();
    const listening = typeof address === "object" && address ? address.port : 0;
    port.postMessage({ type: "listening", port: listening } satisfies FromWorker);
  });

  port.on("message", (message: ToWorker) => {
    if (message.type === "stats") {
      const cpu = process.threadCpuUsage();
      port.postMessage({
        type: "stats",
        id: message.id,
        stats: { ...counts, open: sockets.size, cpuUserUs: cpu.user, cpuSystemUs: cpu.system },
      } satisfies FromWorker);
    } else if (message.type === "stop") {
      server.close();
      for (const socket of sockets) socket.destroy();
      queue = [];
      head = 0;
      port.postMessage({ type: "stopped" } satisfies FromWorker);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// The script: what the proxy adds, measured

async function measure(): Promise<void> {
  const { parseArgs } = await import("node:util");
  const { performance } = await import("node:perf_hooks");
  const { default: pg } = await import("pg");
  const { benchDatabase, createCleanups, percentile, positiveInt } = await import("./support.ts");
  const { ascending, describeEnvironment, median, round2, secs, table, writeResult } = await import(
    "./report.ts"
  );

  const { values: argv } = parseArgs({
    options: {
      quick: { type: "boolean", default: false },
      rtt: { type: "string" },
      samples: { type: "string" },
      connections: { type: "string" },
    },
  });
  const quick = argv.quick;
  const rtts = (argv.rtt ?? "0,0.25,0.5,1,2").split(",").map(Number);
  if (rtts.some((r) => !Number.isFinite(r) || r < 0)) {
    console.error(`--rtt must be a list of milliseconds ≥ 0, got ${argv.rtt}`);
    process.exit(2);
  }
  const samples = positiveInt(argv.samples, quick ? 200 : 1000, "samples");
  const connections = positiveInt(argv.connections, 32, "connections");
  const loadMs = quick ? 1000 : 3000;
  const r3 = (value: number) => Math.round(value * 1000) / 1000;
  const started = performance.now();
  const cleanups = createCleanups();
  try {
    const database = await benchDatabase("fast", cleanups);
    const target = new URL(database.url);
    const direct = new pg.Client({ connectionString: database.url });
    await direct.connect();
    cleanups.push(() => direct.end());
    const environment = await describeEnvironment(direct, database.serverKind, []);
    console.log(
      `latency proxy: ${samples} interleaved SELECT 1 round trips per RTT, direct vs proxied; ${database.serverKind}`,
    );

    const roundTrip = async (client: InstanceType<typeof pg.Client>) => {
      const t0 = performance.now();
      await client.query("SELECT 1");
      return performance.now() - t0;
    };
    const rows: Array<Record<string, number>> = [];
    let load: Record<string, number> | undefined;
    for (const rtt of rtts) {
      const proxy = await startLatencyProxy({
        target: { host: target.hostname, port: Number(target.port) },
        oneWayDelayMs: rtt / 2,
      });
      const proxied = new pg.Client({ connectionString: proxy.url(database.url) });
      await proxied.connect();
      for (let i = 0; i < 50; i++) await Promise.all([roundTrip(direct), roundTrip(proxied)]);
      const d: number[] = [];
      const p: number[] = [];
      const before = await proxy.stats();
      const t0 = performance.now();
      for (let i = 0; i < samples; i++) {
        d.push(await roundTrip(direct));
        p.push(await roundTrip(proxied));
      }
      const wall = performance.now() - t0;
      const after = await proxy.stats();
      const cpuMs = (after.cpuUserUs + after.cpuSystemUs - before.cpuUserUs - before.cpuSystemUs) / 1000;
      const [ds, ps] = [ascending(d), ascending(p)];
      rows.push({
        configured_rtt_ms: rtt,
        direct_p50_ms: r3(median(d)),
        proxied_p50_ms: r3(median(p)),
        added_p50_ms: r3(median(p) - median(d)),
        added_p90_ms: r3(percentile(ps, 90) - percentile(ds, 90)),
        worker_cpu_pct: round2((100 * cpuMs) / wall),
        mean_late_us:
          after.delayed > before.delayed
            ? round2((after.lateUsTotal - before.lateUsTotal) / (after.delayed - before.delayed))
            : 0,
      });
      await proxied.end();

      if (rtt === 0.5 || (load === undefined && rtt === rtts.at(-1))) {
        // The worker's CPU idle, then with `connections` clients in closed loops.
        const idle0 = await proxy.stats();
        const idleStart = performance.now();
        await new Promise((r) => setTimeout(r, 1000));
        const idle1 = await proxy.stats();
        const idleMs = performance.now() - idleStart;
        const clients = await Promise.all(
          Array.from({ length: connections }, async () => {
            const c = new pg.Client({ connectionString: proxy.url(database.url) });
            await c.connect();
            return c;
          }),
        );
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
        await Promise.all(clients.map((c) => c.end()));
        const cpu = (a: LatencyProxyStats, b: LatencyProxyStats) =>
          (b.cpuUserUs + b.cpuSystemUs - a.cpuUserUs - a.cpuSystemUs) / 1000;
        load = {
          configured_rtt_ms: rtt,
          idle_cpu_pct: round2((100 * cpu(idle0, idle1)) / idleMs),
          load_connections: connections,
          load_queries_per_s: Math.round(queries / (loadWall / 1000)),
          load_cpu_pct: round2((100 * cpu(l0, l1)) / loadWall),
        };
      }
      await proxy.stop();
    }

    console.log(
      table(
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
          (r.direct_p50_ms ?? Number.NaN).toFixed(3),
          (r.proxied_p50_ms ?? Number.NaN).toFixed(3),
          (r.added_p50_ms ?? Number.NaN).toFixed(3),
          (r.added_p90_ms ?? Number.NaN).toFixed(3),
          (r.mean_late_us ?? Number.NaN).toFixed(1),
          (r.worker_cpu_pct ?? Number.NaN).toFixed(1),
        ]),
      ),
    );
    if (load) {
      console.log(
        `worker CPU at RTT ${load.configured_rtt_ms} ms: idle ${load.idle_cpu_pct}% of a core; ` +
          `${load.load_connections} connections in closed loops (${load.load_queries_per_s} queries/s): ${load.load_cpu_pct}%`,
      );
    }
    const half = rows.find((r) => r.configured_rtt_ms === 0.5);
    const zero = rows.find((r) => r.configured_rtt_ms === 0);
    const verdict = half
      ? `configured RTT 0.5 ms adds ${half.added_p50_ms?.toFixed(3)} ms at the median` +
        (zero ? ` (the extra hop alone, RTT 0: ${zero.added_p50_ms?.toFixed(3)} ms)` : "")
      : "RTT 0.5 ms not measured";
    console.log(`\nVERDICT: ${verdict}`);
    const path = await writeResult("latency-proxy", {
      benchmark: "latency proxy: round-trip time added per configured RTT",
      options: { rtts, samples, connections, load_ms: loadMs, quick },
      method:
        "per configured RTT: a proxy worker with oneWayDelayMs = RTT / 2; 50 warm-up pairs, then `samples` SELECT 1 round trips " +
        "alternating direct and proxied on one connection each; added = median(proxied) − median(direct); error per chunk = " +
        "mean time from a queued chunk's due time to its write (the delay's own error; negative = early); worker CPU from " +
        "process.threadCpuUsage in the worker over the measurement, idle for 1 s, and under `connections` closed-loop clients",
      environment,
      rows,
      load,
      verdict,
      total_runtime_ms: Math.round(performance.now() - started),
    });
    console.log(`wrote ${path} (total ${secs(performance.now() - started)})`);
  } catch (error) {
    console.error("measurement failed:", error);
    process.exitCode = 1;
  } finally {
    await cleanups.run();
  }
}

if (!isMainThread && (workerData as Partial<WorkerInput> | null)?.jobfenceLatencyProxy === true) {
  runProxyWorker(workerData as WorkerInput);
} else if (isMainThread && process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await measure();
}
