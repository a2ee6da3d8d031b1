/**
 * The proxy's worker thread (started by bench/lib/latency-proxy.ts): it listens, opens a connection
 * to the target for each client, and forwards both directions through one delay line. A COMMIT
 * (bench/lib/proxy/protocol.ts finds it) may be held back by the commit delay, or may lose its
 * acknowledgement: it is forwarded, the server commits and answers, and the client's connection is
 * closed instead of the answer being passed on (at once, without the delay), so the transaction is
 * committed and the client cannot know it.
 *
 * Backpressure: a side whose peer's write buffer is full is paused until the peer drains. A FIN is
 * forwarded in order after the delay (half-close is kept); an error or reset on either side
 * destroys both.
 */
import { createServer, connect as netConnect, type Socket } from "node:net";
import { isMainThread, parentPort, workerData } from "node:worker_threads";
import { delayLine } from "./delay-line.ts";
import { frontendReader, readyForQueryWatcher } from "./protocol.ts";

/** Indexes into the shared counters: the main thread arms lost acks and reads the count without a message. */
export const ACKS_TO_LOSE = 0;
export const ACKS_LOST = 1;

export interface WorkerInput {
  readonly jobfenceLatencyProxy: true;
  readonly host: string;
  readonly targetHost: string;
  readonly targetPort: number;
  readonly oneWayDelayMs: number;
  readonly commitDelayMs: number;
  /** Int32 counters at ACKS_TO_LOSE and ACKS_LOST, shared with the main thread. */
  readonly acks: SharedArrayBuffer;
}

/** What the worker has done, and its own CPU time. */
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

export type ToWorker = { type: "stop" } | { type: "stats"; id: number };
export type FromWorker =
  | { type: "listening"; port: number }
  | { type: "failed"; message: string }
  | { type: "stats"; id: number; stats: LatencyProxyStats }
  | { type: "stopped" };

/** One direction of one connection. */
interface Direction {
  readonly from: Socket;
  readonly to: Socket;
  /** `from` paused because `to` has too much to write. */
  paused: boolean;
}

/** Takes one armed lost ack, if any is left (the main thread may re-arm at any time). */
function takeAckToLose(acks: Int32Array): boolean {
  for (;;) {
    const left = Atomics.load(acks, ACKS_TO_LOSE);
    if (left <= 0) return false;
    if (Atomics.compareExchange(acks, ACKS_TO_LOSE, left, left - 1) === left) return true;
  }
}

function runProxyWorker(input: WorkerInput): void {
  const port = parentPort;
  if (!port) return;
  const acks = new Int32Array(input.acks);
  const sockets = new Set<Socket>();
  const counts = { connections: 0, chunks: 0, bytes: 0 };

  /** Writes a chunk, or (null) forwards the FIN. */
  const line = delayLine(
    input.oneWayDelayMs,
    ({ direction, chunk }: { direction: Direction; chunk: Buffer | null }) => {
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
    },
  );

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
    const commitEnds = frontendReader();
    /** Set when the COMMIT in flight is to lose its answer: reads the server's answer, to drop it. */
    let answerToLose: ((chunk: Buffer) => boolean) | undefined;

    client.on("data", (chunk: Buffer) => {
      if (!commitEnds(chunk)) {
        line.push({ direction: up, chunk });
        return;
      }
      // The client sends nothing more until COMMIT's answer, so the server's stream is at a
      // message boundary: what it says next is the answer.
      if (takeAckToLose(acks)) answerToLose = readyForQueryWatcher();
      if (input.commitDelayMs > 0) setTimeout(() => line.push({ direction: up, chunk }), input.commitDelayMs);
      else line.push({ direction: up, chunk });
    });
    upstream.on("data", (chunk: Buffer) => {
      if (!answerToLose) {
        line.push({ direction: down, chunk });
        return;
      }
      if (answerToLose(chunk)) {
        Atomics.add(acks, ACKS_LOST, 1);
        destroyBoth();
      }
    });
    for (const [socket, direction] of [
      [client, up],
      [upstream, down],
    ] as const) {
      socket.on("end", () => line.push({ direction, chunk: null }));
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
        stats: {
          ...counts,
          ...line.counts,
          open: sockets.size,
          cpuUserUs: cpu.user,
          cpuSystemUs: cpu.system,
        },
      } satisfies FromWorker);
    } else if (message.type === "stop") {
      server.close();
      for (const socket of sockets) socket.destroy();
      line.clear();
      port.postMessage({ type: "stopped" } satisfies FromWorker);
    }
  });
}

if (!isMainThread && (workerData as Partial<WorkerInput> | null)?.jobfenceLatencyProxy === true) {
  runProxyWorker(workerData as WorkerInput);
}
