/**
 * The fake provider (testing/fake-provider.ts) over real HTTP, as a step's call meets it: Stripe's
 * Idempotency-Key semantics (a repeat is replayed without a new effect, a key reused for another
 * request is refused, a key whose first request is still in flight gets 409), bodies checked, the
 * faults (fail, hang, late) and the ledger, in process and through its control endpoints.
 */
import { createConnection, createServer, type Server } from "node:net";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { type FakeProvider, startFakeProvider } from "../../testing/index.ts";

let provider: FakeProvider;
beforeEach(async () => {
  provider = await startFakeProvider();
});
afterEach(async () => {
  await provider.close();
});

const CHARGE = { amount: 1250, currency: "eur", customer: "cus_1", description: "order 7" };
const EMAIL = { to: "ada@example.com", subject: "Points", text: "You earned 5 points." };

interface Answer {
  status: number;
  body: Record<string, unknown>;
  headers: Headers;
}

/** POSTs `body` (an object, or text as is) to `path`, with `key` as its Idempotency-Key. */
async function post(path: string, body: unknown, key?: string, signal?: AbortSignal): Promise<Answer> {
  const response = await fetch(`${provider.url}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(key === undefined ? {} : { "idempotency-key": key }),
    },
    body: typeof body === "string" ? body : JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
  return {
    status: response.status,
    body: (await response.json()) as Record<string, unknown>,
    headers: response.headers,
  };
}

const errorOf = (answer: Answer) => answer.body.error as { type: string; code?: string; message: string };
const outcomes = () => provider.requests().map((r) => r.outcome);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("the endpoints", () => {
  it("makes a charge, answers it as Stripe shapes one, and writes it in the ledger", async () => {
    const answer = await post("/v1/charges", { ...CHARGE, currency: "EUR" }, "key-1");
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({
      id: expect.stringMatching(/^ch_[0-9a-f]{24}$/),
      object: "charge",
      amount: 1250,
      currency: "eur",
      customer: "cus_1",
      description: "order 7",
      status: "succeeded",
      created: expect.any(Number),
    });
    expect(answer.headers.get("idempotency-key")).toBe("key-1");
    expect(answer.headers.get("idempotent-replayed")).toBeNull();
    expect(provider.ledger()).toEqual([
      {
        seq: 1,
        id: answer.body.id,
        kind: "charge",
        key: "key-1",
        request: { ...CHARGE, currency: "EUR" },
        at: expect.any(String),
      },
    ]);
    expect(provider.requests()).toEqual([
      {
        seq: 1,
        method: "POST",
        path: "/v1/charges",
        key: "key-1",
        outcome: "acted",
        status: 200,
        effect: answer.body.id,
        at: expect.any(String),
      },
    ]);
  });

  it("sends an email; without a key every request acts", async () => {
    const first = await post("/v1/emails", EMAIL);
    const second = await post("/v1/emails", EMAIL);
    expect(first.body).toEqual({
      id: expect.stringMatching(/^em_/),
      object: "email",
      to: EMAIL.to,
      subject: EMAIL.subject,
      status: "sent",
      created: expect.any(Number),
    });
    expect(second.body.id).not.toBe(first.body.id);
    expect(provider.ledger().map((e) => [e.kind, e.key])).toEqual([
      ["email", null],
      ["email", null],
    ]);
  });

  it.each([
    ["not JSON", "/v1/charges", "{amount"],
    ["no amount", "/v1/charges", { currency: "eur", customer: "c" }],
    ["a zero amount", "/v1/charges", { ...CHARGE, amount: 0 }],
    ["a fractional amount", "/v1/charges", { ...CHARGE, amount: 1.5 }],
    ["a currency of two letters", "/v1/charges", { ...CHARGE, currency: "eu" }],
    ["an unknown field", "/v1/charges", { ...CHARGE, capture: true }],
    ["an address that is none", "/v1/emails", { ...EMAIL, to: "ada" }],
    ["no subject", "/v1/emails", { to: EMAIL.to, text: "x" }],
  ])(
    "refuses %s with 400 invalid_request_error, acts on nothing and forgets the key",
    async (_, path, body) => {
      const answer = await post(path, body, "bad-body");
      expect(answer.status).toBe(400);
      expect(errorOf(answer).type).toBe("invalid_request_error");
      expect(provider.ledger()).toEqual([]);
      expect(outcomes()).toEqual(["refused"]);
      const valid = path === "/v1/emails" ? EMAIL : CHARGE;
      expect((await post(path, valid, "bad-body")).status).toBe(200);
      expect(provider.ledger()).toHaveLength(1);
    },
  );

  it("refuses a key that is empty, too long or not printable ASCII", async () => {
    for (const key of ["", "k".repeat(256), "clé"]) {
      const answer = await fetch(`${provider.url}/v1/charges`, {
        method: "POST",
        headers: { "idempotency-key": Buffer.from(key, "utf8").toString("latin1") },
        body: JSON.stringify(CHARGE),
      });
      expect(answer.status, JSON.stringify(key)).toBe(400);
      expect(((await answer.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error");
    }
    expect((await post("/v1/charges", CHARGE, "k".repeat(255))).status).toBe(200);
    expect(provider.ledger()).toHaveLength(1);
  });

  it("refuses a body that is not UTF-8, a request target that is no path, and two Idempotency-Key headers", async () => {
    // Two bodies differing only in invalid bytes would decode to one request: refused, nothing kept.
    const invalid = Buffer.concat([
      Buffer.from('{"amount":1,"currency":"eur","customer":"c'),
      Buffer.from([0xff]),
      Buffer.from('"}'),
    ]);
    const notUtf8 = await fetch(`${provider.url}/v1/charges`, {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": "utf8-key" },
      body: invalid,
    });
    expect(notUtf8.status).toBe(400);
    expect(((await notUtf8.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error");
    // A request target no URL parser takes: a 400 answered, the connection not reset.
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = createConnection(Number(new URL(provider.url).port), "127.0.0.1");
      let text = "";
      socket.on("data", (chunk) => {
        text += chunk.toString("utf8");
      });
      socket.on("end", () => resolve(text));
      socket.on("error", reject);
      socket.write("POST //[ HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    });
    expect(raw).toMatch(/^HTTP\/1\.1 400 /);
    // Two keys in one request: which one would the provider mean? Refused.
    const { request } = await import("node:http");
    const twice = await new Promise<number>((resolve, reject) => {
      const req = request(`${provider.url}/v1/charges`, { method: "POST" }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on("error", reject);
      req.setHeader("content-type", "application/json");
      req.setHeader("idempotency-key", ["a", "b"]);
      req.end(JSON.stringify(CHARGE));
    });
    expect(twice).toBe(400);
    expect(provider.ledger()).toEqual([]);
  });

  it("answers 404 to an unknown path or method", async () => {
    expect((await post("/v1/refunds", {})).status).toBe(404);
    const get = await fetch(`${provider.url}/v1/charges`);
    expect(get.status).toBe(404);
    expect(((await get.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error");
    expect(provider.requests().map((r) => [r.path, r.outcome, r.status])).toEqual([
      ["/v1/refunds", "refused", 404],
      ["/v1/charges", "refused", 404],
    ]);
  });
});

describe("Idempotency-Key", () => {
  it("answers a repeat of the same request with the first answer, marked replayed, and no new effect", async () => {
    const first = await post("/v1/charges", CHARGE, "order-7");
    // The same request: key order and spacing do not matter.
    const reordered = `{ "description": "order 7", "customer": "cus_1", "currency": "eur", "amount": 1250 }`;
    const again = await post("/v1/charges", reordered, "order-7");
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(provider.ledger()).toHaveLength(1);
    expect(outcomes()).toEqual(["acted", "replayed"]);
  });

  it("refuses the same key with another body or on another path: 400 idempotency_error", async () => {
    await post("/v1/charges", CHARGE, "order-8");
    const otherBody = await post("/v1/charges", { ...CHARGE, amount: 1251 }, "order-8");
    expect(otherBody.status).toBe(400);
    expect(errorOf(otherBody).type).toBe("idempotency_error");
    const otherPath = await post("/v1/emails", EMAIL, "order-8");
    expect(otherPath.status).toBe(400);
    expect(errorOf(otherPath).type).toBe("idempotency_error");
    expect(provider.ledger()).toHaveLength(1);
    expect(outcomes()).toEqual(["acted", "refused", "refused"]);
  });

  it("keeps keys apart: another key with the same body acts again", async () => {
    await post("/v1/emails", EMAIL, "a");
    await post("/v1/emails", EMAIL, "b");
    expect(provider.ledger().map((e) => e.key)).toEqual(["a", "b"]);
  });
});

describe("faults", () => {
  it("fail answers its status without acting or remembering the key, so the retry acts once", async () => {
    provider.fault({ mode: "fail" });
    const failed = await post("/v1/emails", EMAIL, "email-1");
    expect(failed.status).toBe(500);
    expect(errorOf(failed).type).toBe("api_error");
    expect(provider.ledger()).toEqual([]);
    const retried = await post("/v1/emails", EMAIL, "email-1");
    expect(retried.status).toBe(200);
    expect(retried.headers.get("idempotent-replayed")).toBeNull();
    expect((await post("/v1/emails", EMAIL, "email-1")).headers.get("idempotent-replayed")).toBe("true");
    expect(provider.ledger()).toHaveLength(1);
    expect(outcomes()).toEqual(["failed", "acted", "replayed"]);
  });

  it("a fault applies `times` times, to its path only, in the order given", async () => {
    provider.fault({ path: "/v1/charges", mode: "fail", status: 429, times: 2 });
    provider.fault({ mode: "fail", status: 503 });
    const email = await post("/v1/emails", EMAIL);
    expect(email.status).toBe(503);
    const first = await post("/v1/charges", CHARGE);
    expect([first.status, errorOf(first).type]).toEqual([429, "rate_limit_error"]);
    expect((await post("/v1/charges", CHARGE)).status).toBe(429);
    expect((await post("/v1/charges", CHARGE)).status).toBe(200);
    expect((await post("/v1/emails", EMAIL)).status).toBe(200);
  });

  it("a replay and a refusal pass a fault untouched, and do not use it up", async () => {
    await post("/v1/charges", CHARGE, "k");
    provider.fault({ mode: "fail" });
    expect((await post("/v1/charges", CHARGE, "k")).status).toBe(200); // replayed
    expect((await post("/v1/charges", { amount: -1 }, "other")).status).toBe(400);
    expect((await post("/v1/charges", CHARGE, "new")).status).toBe(500);
    expect(outcomes()).toEqual(["acted", "replayed", "refused", "failed"]);
  });

  it("hang never answers and acts on nothing: the retry with the same key acts", async () => {
    provider.fault({ mode: "hang" });
    await expect(post("/v1/emails", EMAIL, "h-1", AbortSignal.timeout(300))).rejects.toThrow();
    expect(provider.ledger()).toEqual([]);
    expect((await post("/v1/emails", EMAIL, "h-1")).status).toBe(200);
    expect(provider.ledger()).toHaveLength(1);
    expect(provider.requests().map((r) => [r.outcome, r.status])).toEqual([
      ["hung", null],
      ["acted", 200],
    ]);
  });

  it("hang with act makes the effect and remembers the key: the retry is replayed", async () => {
    provider.fault({ mode: "hang", act: true });
    await expect(post("/v1/charges", CHARGE, "h-2", AbortSignal.timeout(300))).rejects.toThrow();
    const [effect] = provider.ledger();
    expect(effect?.key).toBe("h-2");
    const retried = await post("/v1/charges", CHARGE, "h-2");
    expect(retried.body.id).toBe(effect?.id);
    expect(retried.headers.get("idempotent-replayed")).toBe("true");
    expect(provider.ledger()).toHaveLength(1);
    expect(outcomes()).toEqual(["hung", "replayed"]);
  });

  it("late acts at once and answers after its delay; a retry meanwhile gets 409, after it the replay", async () => {
    provider.fault({ mode: "late", delayMs: 700 });
    const started = Date.now();
    const first = post("/v1/emails", EMAIL, "late-1");
    await sleep(150);
    expect(provider.ledger()).toHaveLength(1); // acted before answering
    const meanwhile = await post("/v1/emails", EMAIL, "late-1");
    expect(meanwhile.status).toBe(409);
    expect(errorOf(meanwhile)).toMatchObject({ type: "idempotency_error", code: "idempotency_key_in_use" });
    const answered = await first;
    expect(Date.now() - started).toBeGreaterThanOrEqual(650);
    expect(answered.status).toBe(200);
    const after = await post("/v1/emails", EMAIL, "late-1");
    expect(after.body).toEqual(answered.body);
    expect(after.headers.get("idempotent-replayed")).toBe("true");
    expect(provider.ledger()).toHaveLength(1);
    expect(outcomes()).toEqual(["late", "refused", "replayed"]);
  });

  it("late still remembers the key when its caller gave up waiting", async () => {
    provider.fault({ mode: "late", delayMs: 400 });
    await expect(post("/v1/charges", CHARGE, "late-2", AbortSignal.timeout(100))).rejects.toThrow();
    await sleep(500);
    const retried = await post("/v1/charges", CHARGE, "late-2");
    expect(retried.headers.get("idempotent-replayed")).toBe("true");
    expect(provider.ledger()).toHaveLength(1);
  });

  it("refuses a fault it cannot apply, naming the problem", () => {
    expect(() => provider.fault({ mode: "fail", status: 200 })).toThrow(ConfigurationError);
    expect(() => provider.fault({ mode: "late", path: "/v1/charge" })).toThrow(/path: an endpoint/);
    expect(() => provider.fault({ mode: "explode" } as never)).toThrow(/mode: one of/);
    expect(() => provider.fault({ mode: "hang", times: 0 })).toThrow(/times/);
  });
});

describe("control over HTTP", () => {
  it("takes faults, shows the ledger and the requests, and resets", async () => {
    const bad = await post("/_fake/faults", { mode: "fail", times: -1 });
    expect(bad.status).toBe(400);
    const set = await post("/_fake/faults", { mode: "fail", path: "/v1/emails", status: 502 });
    expect(set.body).toEqual({ fault: { mode: "fail", path: "/v1/emails", status: 502, times: 1 } });
    expect((await post("/v1/emails", EMAIL, "c-1")).status).toBe(502);
    await post("/v1/emails", EMAIL, "c-1");

    const ledger = (await (await fetch(`${provider.url}/_fake/ledger`)).json()) as {
      entries: unknown[];
      requests: Array<{ outcome: string }>;
    };
    expect(ledger.entries).toEqual(provider.ledger());
    expect(ledger.requests.map((r) => r.outcome)).toEqual(["failed", "acted"]);

    expect((await post("/_fake/reset", {})).status).toBe(200);
    expect(provider.ledger()).toEqual([]);
    expect(provider.requests()).toEqual([]);
    // Keys are forgotten too: the same key acts again.
    expect((await post("/v1/emails", EMAIL, "c-1")).headers.get("idempotent-replayed")).toBeNull();
    expect(provider.ledger()).toHaveLength(1);
  });

  it("reset in process forgets faults and keys", async () => {
    await post("/v1/charges", CHARGE, "r-1");
    provider.fault({ mode: "fail", times: 5 });
    provider.reset();
    const again = await post("/v1/charges", CHARGE, "r-1");
    expect([again.status, again.headers.get("idempotent-replayed")]).toEqual([200, null]);
  });
});

describe("the server", () => {
  it("close() ends hung connections and returns", async () => {
    provider.fault({ mode: "hang", times: 2 });
    const hung = [post("/v1/emails", EMAIL), post("/v1/charges", CHARGE)].map((request) =>
      request.then(
        () => "answered",
        () => "closed",
      ),
    );
    await sleep(100);
    const started = Date.now();
    await provider.close();
    expect(Date.now() - started).toBeLessThan(1000);
    expect(await Promise.all(hung)).toEqual(["closed", "closed"]);
    provider = await startFakeProvider(); // for afterEach
  });

  it("survives a client that goes away mid-body, and answers the next one", async () => {
    const { port } = new URL(provider.url);
    await new Promise<void>((resolve) => {
      const socket = createConnection({ host: "127.0.0.1", port: Number(port) }, () => {
        socket.write(
          'POST /v1/charges HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"amount":',
        );
        setTimeout(() => {
          socket.destroy();
          resolve();
        }, 50);
      });
    });
    await sleep(50);
    expect((await post("/v1/charges", CHARGE)).status).toBe(200);
    expect(provider.ledger()).toHaveLength(1);
  });

  it("refuses a port another process holds", async () => {
    const holder: Server = createServer();
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
    const address = holder.address();
    const port = typeof address === "object" && address ? address.port : 0;
    try {
      await expect(startFakeProvider({ port })).rejects.toMatchObject({ code: "EADDRINUSE" });
    } finally {
      await new Promise((resolve) => holder.close(resolve));
    }
  });
});
