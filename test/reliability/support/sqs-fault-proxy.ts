/**
 * A fault-injecting HTTP proxy in front of the SQS emulator. The SDK speaks SQS's JSON protocol,
 * which names the action in the `X-Amz-Target` header (`AmazonSQS.DeleteMessageBatch`, …); the
 * proxy forwards every request unchanged and fails the ones its rules pick, the way a network or
 * the service fails:
 *
 * - `http-500`: answers InternalError without forwarding (the action did not happen);
 * - `drop`: closes the connection without forwarding (the action did not happen);
 * - `drop-after-forward`: forwards, lets the emulator act, then closes the connection instead of
 *   answering (the action happened; the caller cannot know).
 *
 * With no target (the emulator stopped) every request's connection is closed. The proxy counts
 * what it forwarded and what it injected, per action, for the figures.
 */
import { once } from "node:events";
import {
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from "node:http";
import type { AddressInfo, Socket } from "node:net";

/** How a picked request fails. */
export type FaultMode = "http-500" | "drop" | "drop-after-forward";

/** Which requests fail, and how. */
export interface FaultRule {
  /** Actions without the `AmazonSQS.` prefix, e.g. `DeleteMessageBatch`. */
  readonly actions: readonly string[];
  /**
   * The first `first` matching requests fail whatever the rate, with the first of `modes`, so even
   * a short run injects that fault for sure.
   */
  readonly first?: number;
  /** The share of later matching requests that fail, 0–1. */
  readonly rate: number;
  /** Modes to choose from, uniformly. */
  readonly modes: readonly FaultMode[];
}

/** What went through the proxy. */
export interface ProxyCounts {
  /** Requests per action that reached the emulator (including drop-after-forward). */
  readonly forwarded: Record<string, number>;
  /** Injected faults per action and mode (`emulator-down` when there was no target). */
  readonly injected: Record<string, Record<string, number>>;
}

export interface SqsFaultProxy {
  /** The endpoint for SDK clients. */
  readonly endpoint: string;
  readonly counts: ProxyCounts;
  /** Replaces the rules (an empty list: pass everything through). */
  setRules(rules: readonly FaultRule[]): void;
  /** Points the proxy at an emulator endpoint, or at none (every connection is then closed). */
  setTarget(endpoint: string | undefined): void;
  /** Total injected faults. */
  injectedTotal(): number;
  close(): Promise<void>;
}

const ACTION_PREFIX = "AmazonSQS.";

/** Starts a proxy for `target` on a free port of 127.0.0.1; `random` decides rates and modes. */
export async function startSqsFaultProxy(target: string, random: () => number): Promise<SqsFaultProxy> {
  let upstream: URL | undefined = new URL(target);
  let rules: readonly FaultRule[] = [];
  const seen = new Map<FaultRule, number>();
  const counts: ProxyCounts = { forwarded: {}, injected: {} };
  const sockets = new Set<Socket>();

  const inject = (action: string, mode: string) => {
    counts.injected[action] ??= {};
    const perMode = counts.injected[action];
    perMode[mode] = (perMode[mode] ?? 0) + 1;
  };

  /** The mode this request fails with, or undefined to pass it through. */
  const decide = (action: string): FaultMode | undefined => {
    for (const rule of rules) {
      if (!rule.actions.includes(action)) continue;
      const n = seen.get(rule) ?? 0;
      seen.set(rule, n + 1);
      if (n < (rule.first ?? 0)) return rule.modes[0];
      if (random() < rule.rate) {
        return rule.modes[Math.floor(random() * rule.modes.length)] ?? rule.modes[0];
      }
      return undefined;
    }
    return undefined;
  };

  const forward = (
    to: URL,
    req: IncomingMessage,
    body: Buffer,
  ): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }> =>
    new Promise((resolve, reject) => {
      const outgoing = httpRequest(
        {
          host: to.hostname,
          port: to.port,
          method: req.method,
          path: req.url,
          headers: { ...req.headers, host: to.host },
        },
        (response) => {
          const chunks: Buffer[] = [];
          response.on("data", (chunk: Buffer) => chunks.push(chunk));
          response.on("end", () =>
            resolve({
              status: response.statusCode ?? 502,
              headers: response.headers,
              body: Buffer.concat(chunks),
            }),
          );
          response.on("error", reject);
        },
      );
      outgoing.on("error", reject);
      outgoing.end(body);
    });

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const header = req.headers["x-amz-target"];
    const action = typeof header === "string" ? header.replace(ACTION_PREFIX, "") : "unknown";
    const to = upstream;
    if (!to) {
      inject(action, "emulator-down");
      req.socket.destroy();
      return;
    }
    const mode = decide(action);
    if (mode === "http-500") {
      inject(action, mode);
      res.writeHead(500, { "content-type": "application/x-amz-json-1.0" });
      res.end(
        JSON.stringify({ __type: "com.amazonaws.sqs#InternalError", message: "injected by the proxy" }),
      );
      return;
    }
    if (mode === "drop") {
      inject(action, mode);
      req.socket.destroy();
      return;
    }
    let answer: Awaited<ReturnType<typeof forward>>;
    try {
      answer = await forward(to, req, body);
    } catch {
      // The emulator went away under the request: the caller sees what a stopped service gives.
      inject(action, "emulator-down");
      req.socket.destroy();
      return;
    }
    counts.forwarded[action] = (counts.forwarded[action] ?? 0) + 1;
    if (mode === "drop-after-forward") {
      inject(action, mode);
      req.socket.destroy();
      return;
    }
    const headers = { ...answer.headers };
    delete headers["transfer-encoding"];
    delete headers.connection;
    res.writeHead(answer.status, { ...headers, "content-length": String(answer.body.length) });
    res.end(answer.body);
  };

  const server = createServer((req, res) => {
    handle(req, res).catch(() => req.socket.destroy());
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;

  return {
    endpoint: `http://127.0.0.1:${port}`,
    counts,
    setRules(next) {
      rules = next;
      seen.clear();
    },
    setTarget(endpoint) {
      upstream = endpoint === undefined ? undefined : new URL(endpoint);
    },
    injectedTotal() {
      let total = 0;
      for (const perMode of Object.values(counts.injected))
        for (const n of Object.values(perMode)) total += n;
      return total;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      server.close();
      await once(server, "close");
    },
  };
}
