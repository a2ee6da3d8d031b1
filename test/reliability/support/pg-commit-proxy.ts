/**
 * A TCP proxy in front of PostgreSQL that can lose a COMMIT's acknowledgement: it forwards the
 * client's COMMIT, lets the server commit and answer, then closes the client's connection instead
 * of passing the answer on. The transaction is committed; the client sees a broken connection and
 * cannot know whether it was. Everything else is passed through unchanged.
 *
 * It reads the client's side of the protocol (v3): an untyped startup message, then typed
 * messages (1-byte type, 4-byte length); node-postgres sends a parameterless `COMMIT` as a simple
 * Query ('Q').
 */
import { once } from "node:events";
import { type AddressInfo, connect, createServer, type Socket } from "node:net";
import { isCommitQuery } from "../../../bench/latency-proxy.ts";

export interface PgCommitProxy {
  /** `url` with its host and port replaced by the proxy's. */
  urlFor(url: string): string;
  /** The next `count` COMMITs through the proxy lose their acknowledgement. */
  loseNextCommitAcks(count: number): void;
  /** COMMITs whose acknowledgement was lost so far. */
  lost(): number;
  close(): Promise<void>;
}

export async function startPgCommitProxy(upstreamUrl: string): Promise<PgCommitProxy> {
  const upstream = new URL(upstreamUrl);
  let toLose = 0;
  let lost = 0;
  const sockets = new Set<Socket>();

  const server = createServer((client) => {
    const backend = connect(Number(upstream.port || 5432), upstream.hostname);
    sockets.add(client);
    sockets.add(backend);
    const close = () => {
      client.destroy();
      backend.destroy();
    };
    client.on("close", () => {
      sockets.delete(client);
      backend.destroy();
    });
    backend.on("close", () => {
      sockets.delete(backend);
      client.destroy();
    });
    client.on("error", close);
    backend.on("error", close);

    /** Set once a COMMIT is to lose its answer: what the server says next goes nowhere. */
    let swallowing = false;
    backend.on("data", (chunk: Buffer) => {
      if (!swallowing) {
        client.write(chunk);
        return;
      }
      // The server has answered the COMMIT (CommandComplete … ReadyForQuery 'Z'): it committed.
      if (chunk.includes(0x5a)) close();
    });

    let pending = Buffer.alloc(0);
    let started = false;
    client.on("data", (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      for (;;) {
        if (!started) {
          if (pending.length < 4) return;
          const length = pending.readInt32BE(0);
          if (pending.length < length) return;
          backend.write(pending.subarray(0, length));
          pending = pending.subarray(length);
          started = true;
          continue;
        }
        if (pending.length < 5) return;
        const length = pending.readInt32BE(1) + 1;
        if (pending.length < length) return;
        const message = pending.subarray(0, length);
        pending = pending.subarray(length);
        if (toLose > 0 && isCommitQuery(message)) {
          toLose--;
          lost++;
          swallowing = true;
        }
        backend.write(message);
      }
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;

  return {
    urlFor(url) {
      const proxied = new URL(url);
      proxied.hostname = "127.0.0.1";
      proxied.port = String(port);
      return proxied.toString();
    },
    loseNextCommitAcks(count) {
      toLose = count;
    },
    lost: () => lost,
    async close() {
      for (const socket of sockets) socket.destroy();
      server.close();
      await once(server, "close");
    },
  };
}
