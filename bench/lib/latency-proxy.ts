/**
 * A TCP proxy in front of PostgreSQL for benchmarks and fault tests, in a worker thread of its own
 * so its timing does not depend on what the caller's event loop is doing. It can:
 *
 * - add network latency, to emulate Lambda → RDS Proxy → Aurora on one machine (no tc/netem
 *   needed): every chunk read from either side is written to the other `oneWayDelayMs` later, so
 *   one request/response round trip costs 2 × oneWayDelayMs more (bench/lib/proxy/delay-line.ts:
 *   how, and how precisely);
 * - hold each COMMIT back by `commitDelayMs`, a commit that costs milliseconds;
 * - lose the acknowledgement of the next N COMMITs (`loseNextCommitAcks`): the COMMIT is
 *   forwarded, the server commits and answers, and the client's connection is closed instead, so
 *   the transaction is committed and the client cannot know whether it was.
 *
 * COMMITs are found by reading the protocol as it streams past (bench/lib/proxy/protocol.ts); the
 * worker is bench/lib/proxy/worker.ts. What the latency costs and how precise it is:
 * bench/experiments/latency-proxy.ts.
 */
import { Worker } from "node:worker_threads";
import {
  ACKS_LOST,
  ACKS_TO_LOSE,
  type FromWorker,
  type LatencyProxyStats,
  type ToWorker,
  type WorkerInput,
} from "./proxy/worker.ts";

export type { LatencyProxyStats } from "./proxy/worker.ts";

/** Options of {@link startLatencyProxy}. */
export interface LatencyProxyOptions {
  /** Where connections are forwarded (PostgreSQL). */
  readonly target: { readonly host: string; readonly port: number };
  /** Added to each direction; a round trip gains twice this. 0 forwards at once. */
  readonly oneWayDelayMs: number;
  /**
   * Held back, on top of the one-way delay, before a client's `COMMIT` reaches the server: a commit
   * that costs milliseconds, as an Aurora commit (a quorum write across zones) does, while the
   * transaction keeps its locks. Held with a timer (millisecond granularity). The client waits for
   * COMMIT's answer before it sends anything else, so nothing of that connection can overtake it.
   * @default 0
   */
  readonly commitDelayMs?: number;
  /** Interface to listen on. @default "127.0.0.1" */
  readonly host?: string;
}

/** A running proxy. */
export interface LatencyProxy {
  /** The port it listens on. */
  readonly port: number;
  /** `databaseUrl` with its host and port replaced by the proxy's. */
  url(databaseUrl: string): string;
  /**
   * The next `count` COMMITs through the proxy, on any connection, lose their acknowledgement
   * (replacing any count still armed; 0 disarms). Takes effect at once: the count is shared memory.
   */
  loseNextCommitAcks(count: number): void;
  /** COMMITs whose acknowledgement was lost so far (their connections closed after the server answered). */
  lostCommitAcks(): number;
  stats(): Promise<LatencyProxyStats>;
  /** Closes the listener and every connection, and ends the worker. */
  stop(): Promise<void>;
}

/** The `{ host, port }` a PostgreSQL URL points at: a proxy's target. */
export function targetOf(databaseUrl: string): { host: string; port: number } {
  const url = new URL(databaseUrl);
  return { host: url.hostname, port: Number(url.port || 5432) };
}

export async function startLatencyProxy(options: LatencyProxyOptions): Promise<LatencyProxy> {
  if (!Number.isFinite(options.oneWayDelayMs) || options.oneWayDelayMs < 0) {
    throw new RangeError(`oneWayDelayMs must be a finite number ≥ 0, got ${options.oneWayDelayMs}`);
  }
  const commitDelayMs = options.commitDelayMs ?? 0;
  if (!Number.isFinite(commitDelayMs) || commitDelayMs < 0) {
    throw new RangeError(`commitDelayMs must be a finite number ≥ 0, got ${commitDelayMs}`);
  }
  const host = options.host ?? "127.0.0.1";
  const acksBuffer = new SharedArrayBuffer(2 * Int32Array.BYTES_PER_ELEMENT);
  const acks = new Int32Array(acksBuffer);
  const input: WorkerInput = {
    jobfenceLatencyProxy: true,
    host,
    targetHost: options.target.host,
    targetPort: options.target.port,
    oneWayDelayMs: options.oneWayDelayMs,
    commitDelayMs,
    acks: acksBuffer,
  };
  const worker = new Worker(new URL("./proxy/worker.ts", import.meta.url), { workerData: input });
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
    loseNextCommitAcks(count: number): void {
      if (!Number.isInteger(count) || count < 0) {
        throw new RangeError(`loseNextCommitAcks takes an integer ≥ 0, got ${count}`);
      }
      Atomics.store(acks, ACKS_TO_LOSE, count);
    },
    lostCommitAcks: () => Atomics.load(acks, ACKS_LOST),
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
