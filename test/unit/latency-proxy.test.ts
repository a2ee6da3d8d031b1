/**
 * bench/lib/latency-proxy.ts: PostgreSQL works through it over many connections at once, the latency
 * it adds is real (median round trip through it minus direct ≥ 0.8 × the configured RTT; no tight
 * upper bound, the machine may be busy), its worker sleeps rather than spins, a connection closed
 * or broken on either side closes the other, it holds COMMITs back when asked, and it loses the
 * acknowledgement of the next N COMMITs when asked: committed, the client's connection closed. Its
 * protocol reader finds a COMMIT however the bytes are chunked, and nothing else.
 */
import { createServer } from "node:net";
import { performance } from "node:perf_hooks";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LatencyProxy, startLatencyProxy, targetOf } from "../../bench/lib/latency-proxy.ts";
import { frontendReader, readyForQueryWatcher } from "../../bench/lib/proxy/protocol.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

/** A generous RTT, so the check holds on a busy machine. */
const RTT_MS = 2;

let db: TestDatabase;
let proxy: LatencyProxy;
let target: { host: string; port: number };

beforeAll(async () => {
  db = await createTestDatabase();
  target = targetOf(db.url);
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

  it("loses the next COMMITs' acknowledgements: committed, the client's connection closed", async () => {
    const lossy = await startLatencyProxy({ target, oneWayDelayMs: 0.25 });
    await db.withClient((admin) => admin.query("CREATE TABLE IF NOT EXISTS lost_ack (n int)"));
    const committed = async (n: number) =>
      db.withClient(
        async (admin) =>
          (await admin.query<{ c: number }>("SELECT count(*)::int AS c FROM lost_ack WHERE n = $1", [n]))
            .rows[0]?.c,
      );
    /** One transaction through the proxy: whether COMMIT was answered, and whether the connection closed. */
    const transaction = async (n: number) => {
      const c = await client(lossy.url(db.url));
      let closed = false;
      c.on("end", () => {
        closed = true;
      });
      c.on("error", () => {});
      // Statements before the COMMIT are answered as usual.
      await c.query("BEGIN");
      await c.query("INSERT INTO lost_ack VALUES ($1)", [n]);
      const answered = await c.query("COMMIT").then(
        () => true,
        () => false,
      );
      if (answered) await c.end();
      else
        await eventually(
          async () => closed,
          (v) => v,
          2000,
        );
      return { answered, closed: !answered && closed };
    };
    try {
      expect(lossy.lostCommitAcks()).toBe(0);
      lossy.loseNextCommitAcks(2);
      expect(await transaction(1)).toEqual({ answered: false, closed: true });
      expect(await committed(1)).toBe(1);
      expect(await transaction(2)).toEqual({ answered: false, closed: true });
      expect(await committed(2)).toBe(1);
      expect(lossy.lostCommitAcks()).toBe(2);
      // Two armed, two lost: the next COMMIT is answered.
      expect(await transaction(3)).toEqual({ answered: true, closed: false });
      expect(await committed(3)).toBe(1);
      expect(lossy.lostCommitAcks()).toBe(2);
      expect(() => lossy.loseNextCommitAcks(-1)).toThrow(RangeError);
    } finally {
      await lossy.stop();
      await db.withClient((admin) => admin.query("DROP TABLE lost_ack"));
    }
  });
});

describe("the proxy's protocol reader", () => {
  const startup = (extra = Buffer.alloc(0)) => {
    const body = Buffer.concat([Buffer.from("user\0u\0database\0d\0"), extra, Buffer.from("\0")]);
    const message = Buffer.alloc(8 + body.length);
    message.writeInt32BE(message.length, 0);
    message.writeInt32BE(196608, 4); // protocol 3.0
    body.copy(message, 8);
    return message;
  };
  const query = (text: string) => {
    const body = Buffer.from(`${text}\0`);
    const message = Buffer.alloc(5 + body.length);
    message.write("Q", 0);
    message.writeInt32BE(4 + body.length, 1);
    body.copy(message, 5);
    return message;
  };
  const sslRequest = () => {
    const message = Buffer.alloc(8);
    message.writeInt32BE(8, 0);
    message.writeInt32BE(80877103, 4);
    return message;
  };

  it("finds a COMMIT however the stream is cut, and only a COMMIT", () => {
    const stream = Buffer.concat([
      startup(),
      query("BEGIN"),
      query("SELECT 'COMMIT'"),
      query("SELECT core.assert_fence_transaction('x');\nCOMMIT"),
      query("SELECT 1"),
      query("commit;"),
      query("SELECT core.fence_commit_check('1'::xid8, 'a', 'a');\nCOMMIT;\nRESET ALL;\nUNLISTEN *"),
      query("SELECT 1;\nRESET ALL"),
    ]);
    for (const size of [1, 3, 7, 11]) {
      const read = frontendReader();
      let commits = 0;
      for (let i = 0; i < stream.length; i += size) if (read(stream.subarray(i, i + size))) commits++;
      expect(commits, `chunks of ${size}`).toBe(3);
    }
    expect(frontendReader()(stream)).toBe(true);
    expect(frontendReader()(Buffer.concat([startup(), query("BEGIN"), query("SELECT 1")]))).toBe(false);
    // A startup message holding a COMMIT query's bytes is not a query.
    expect(frontendReader()(Buffer.concat([startup(query("COMMIT")), query("SELECT 1")]))).toBe(false);
  });

  it("reads past a refused SSLRequest, and passes an encrypted stream unread", () => {
    const refused = frontendReader();
    expect(refused(Buffer.concat([sslRequest(), startup(), query("COMMIT")]))).toBe(true);
    const encrypted = frontendReader();
    expect(encrypted(sslRequest())).toBe(false);
    // A TLS ClientHello's record header, then bytes that would frame as a COMMIT.
    expect(encrypted(Buffer.concat([Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00]), query("COMMIT")]))).toBe(
      false,
    );
  });

  it("sees the server's ReadyForQuery after the messages before it, however cut", () => {
    const complete = Buffer.from([0x43, 0, 0, 0, 11, ...Buffer.from("COMMIT\0")]);
    const ready = Buffer.from([0x5a, 0, 0, 0, 5, 0x49]);
    const answer = Buffer.concat([complete, ready]);
    const watch = readyForQueryWatcher();
    const seen = [...answer].map((byte) => watch(Buffer.from([byte])));
    expect(seen.indexOf(true)).toBe(complete.length + 4);
    // A 'Z' inside another message's body is not one.
    expect(readyForQueryWatcher()(Buffer.from([0x43, 0, 0, 0, 6, 0x5a, 0x5a]))).toBe(false);
  });
});
