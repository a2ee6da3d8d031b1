/**
 * A pool whose busy waits the caller bounds (`busyWait: "caller"`, a consumer on Lambda Managed
 * Instances) still gives up opening a connection after connectionTimeoutMs: only the wait for a
 * connection in use is left to the caller's deadline, never a connect to a server that does not
 * answer.
 */
import { createServer, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createPool } from "../../shared/db/pool.ts";

/** A TCP server that accepts connections and never says a word: a stalled database. */
let silent: Server;
let port: number;
const sockets: Socket[] = [];

beforeAll(async () => {
  silent = createServer((socket) => sockets.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
  port = (silent.address() as { port: number }).port;
});

afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => silent.close(resolve));
});

it.each(["pool", "caller"] as const)(
  "busyWait %s: a connect to a silent server fails after connectionTimeoutMs",
  async (busyWait) => {
    const pool = createPool({
      connectionString: `postgres://nobody@127.0.0.1:${port}/none`,
      connectionTimeoutMs: 300,
      busyWait,
    });
    const started = Date.now();
    await expect(pool.connect()).rejects.toThrow(/timeout/i);
    expect(Date.now() - started).toBeLessThan(5000);
    await pool.end();
  },
);
