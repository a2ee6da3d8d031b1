/**
 * bench/latency-proxy.ts: PostgreSQL works through it over many connections at once, the latency
 * it adds is real (median round trip through it minus direct ≥ 0.8 × the configured RTT; no tight
 * upper bound, the machine may be busy), its worker sleeps rather than spins, and a connection
 * closed or broken on either side closes the other.
 */
import { createServer } from "node:net";
import { performance } from "node:perf_hooks";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LatencyProxy, startLatencyProxy } from "../../bench/latency-proxy.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

/** A generous RTT, so the check holds on a busy machine. */
const RTT_MS = 2;

let db: TestDatabase;
let proxy: LatencyProxy;
let target: { host: string; port: number };

beforeAll(async () => {
  db = await createTestDatabase();
  const url = new URL(db.url);
  target = { host: url.hostname, port: Number(url.port || 5432) };
  proxy = await startLatencyProxy({ target, oneWayDelayMs: RTT_MS / 2 });
});

afterAll(async () => {
  await proxy?.stop();
  await db?.drop();
});

async function client(url: string, applicationName = "latency-proxy-test"): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url, application_name: applicationName });
  await c.connect();
  return c;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

async function eventually<T>(probe: () => Promise<T>, done: (value: T) => boolean, ms = 5000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("latency proxy", () => {
  it("gives the database URL with the proxy's host and port", () => {
    const url = new URL(proxy.url(db.url));
    expect(url.hostname).toBe("127.0.0.1");
    expect(url.port).toBe(String(proxy.port));
    expect(url.pathname).toBe(new URL(db.url).pathname);
  });

  it("carries queries over 32 concurrent connections, every result intact and in order", async () => {
    const clients = await Promise.all(Array.from({ length: 32 }, () => client(proxy.url(db.url))));
    try {
      await Promise.all(
        clients.map(async (c, n) => {
          expect((await c.query<{ n: number }>("SELECT $1::int AS n", [n])).rows).toEqual([{ n }]);
          // A result of many TCP chunks: byte order must survive the queue.
          const { rows } = await c.query<{ i: number; h: string }>(
            "SELECT i, md5(i::text || $1) AS h FROM generate_series(1, 5000) AS i",
            [String(n)],
          );
          expect(rows).toHaveLength(5000);
          const { rows: check } = await c.query<{ ok: boolean }>(
            `SELECT bool_and(h = md5(i::text || $2)) AS ok
               FROM unnest($1::text[]) WITH ORDINALITY AS t (h, i)`,
            [rows.map((r) => r.h), String(n)],
          );
          expect(check).toEqual([{ ok: true }]);
          expect(rows.every((r, i) => r.i === i + 1)).toBe(true);
          await c.query("BEGIN");
          await c.query("CREATE TEMP TABLE t (x int) ON COMMIT DROP");
          await c.query("INSERT INTO t SELECT generate_series(1, 10)");
          expect((await c.query<{ s: number }>("SELECT sum(x)::int AS s FROM t")).rows).toEqual([{ s: 55 }]);
          await c.query("COMMIT");
        }),
      );
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  });

  it("adds the configured round-trip time, sleeping rather than spinning", async () => {
    const direct = await client(db.url);
    const proxied = await client(proxy.url(db.url));
    try {
      const roundTrip = async (c: pg.Client) => {
        const t0 = performance.now();
        await c.query("SELECT 1");
        return performance.now() - t0;
      };
      for (let i = 0; i < 20; i++) await Promise.all([roundTrip(direct), roundTrip(proxied)]);
      const before = await proxy.stats();
      const t0 = performance.now();
      const d: number[] = [];
      const p: number[] = [];
      for (let i = 0; i < 100; i++) {
        d.push(await roundTrip(direct));
        p.push(await roundTrip(proxied));
      }
      const wall = performance.now() - t0;
      const after = await proxy.stats();
      const added = median(p) - median(d);
      expect(added, `added ${added.toFixed(3)} ms at the median`).toBeGreaterThanOrEqual(0.8 * RTT_MS);
      // Busy-spinning would use a whole core while chunks wait; sleeping uses a fraction.
      const cpuMs = (after.cpuUserUs + after.cpuSystemUs - before.cpuUserUs - before.cpuSystemUs) / 1000;
      expect(cpuMs / wall, `worker CPU ${cpuMs.toFixed(0)} ms in ${wall.toFixed(0)} ms`).toBeLessThan(0.6);
    } finally {
      await Promise.all([direct.end(), proxied.end()]);
    }
  });

  it("uses no CPU while idle", async () => {
    const before = await proxy.stats();
    await new Promise((r) => setTimeout(r, 500));
    const after = await proxy.stats();
    const cpuMs = (after.cpuUserUs + after.cpuSystemUs - before.cpuUserUs - before.cpuSystemUs) / 1000;
    expect(cpuMs).toBeLessThan(25);
  });

  it("closes the client's side when the server ends a connection, and goes on serving", async () => {
    const victim = await client(proxy.url(db.url), "latency-proxy-victim");
    const ended = new Promise<void>((resolve) => victim.once("end", () => resolve()));
    victim.on("error", () => {}); // the termination notice
    await db.withClient((admin) =>
      admin.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'latency-proxy-victim'",
      ),
    );
    await ended;
    const next = await client(proxy.url(db.url));
    expect((await next.query<{ one: number }>("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
    await next.end();
  });

  it("ends the server's session when a client disconnects abruptly or cleanly", async () => {
    const count = (name: string) =>
      db.withClient(
        async (admin) =>
          (
            await admin.query<{ n: number }>(
              "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1",
              [name],
            )
          ).rows[0]?.n ?? -1,
      );
    const abrupt = await client(proxy.url(db.url), "latency-proxy-abrupt");
    const clean = await client(proxy.url(db.url), "latency-proxy-clean");
    expect(await count("latency-proxy-abrupt")).toBe(1);
    abrupt.on("error", () => {});
    // pg's socket, reset without a Terminate message.
    (abrupt as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
    await clean.end();
    expect(
      await eventually(
        () => count("latency-proxy-abrupt"),
        (n) => n === 0,
      ),
    ).toBe(0);
    expect(
      await eventually(
        () => count("latency-proxy-clean"),
        (n) => n === 0,
      ),
    ).toBe(0);
    expect(
      (
        await eventually(
          () => proxy.stats(),
          (s) => s.open === 0,
        )
      ).open,
    ).toBe(0);
  });

  it("fails a connection promptly when the target refuses it", async () => {
    const closedPort = await new Promise<number>((resolve) => {
      const server = createServer();
      server.listen(0, "127.0.0.1", () => {
        const address = server.address();
        server.close(() => resolve(typeof address === "object" && address ? address.port : 0));
      });
    });
    const refused = await startLatencyProxy({
      target: { host: "127.0.0.1", port: closedPort },
      oneWayDelayMs: 0.5,
    });
    try {
      const c = new pg.Client({ connectionString: refused.url(db.url), connectionTimeoutMillis: 5000 });
      c.on("error", () => {});
      const t0 = performance.now();
      await expect(c.connect()).rejects.toThrow();
      expect(performance.now() - t0).toBeLessThan(2000);
    } finally {
      await refused.stop();
    }
  });

  it("refuses a negative or non-finite delay", async () => {
    await expect(startLatencyProxy({ target, oneWayDelayMs: -1 })).rejects.toThrow(RangeError);
    await expect(startLatencyProxy({ target, oneWayDelayMs: Number.NaN })).rejects.toThrow(RangeError);
  });

  it("holds a COMMIT back by the commit delay, and nothing else", async () => {
    const commitProxy = await startLatencyProxy({ target, oneWayDelayMs: 0, commitDelayMs: 25 });
    const c = await client(commitProxy.url(db.url));
    try {
      const timed = async (sql: string) => {
        const started = performance.now();
        await c.query(sql);
        return performance.now() - started;
      };
      const selects: number[] = [];
      const commits: number[] = [];
      for (let i = 0; i < 5; i++) {
        selects.push(await timed("SELECT 1"));
        await c.query("BEGIN");
        commits.push(await timed("COMMIT"));
      }
      expect(median(commits)).toBeGreaterThanOrEqual(24);
      expect(median(selects)).toBeLessThan(20);
      const { rows } = await c.query<{ outside: boolean }>("SELECT now() = statement_timestamp() AS outside");
      expect(rows[0]?.outside).toBe(true); // the held COMMIT did end the transaction
    } finally {
      await c.end();
      await commitProxy.stop();
    }
    await expect(startLatencyProxy({ target, oneWayDelayMs: 0, commitDelayMs: -1 })).rejects.toThrow(
      RangeError,
    );
  });
});
