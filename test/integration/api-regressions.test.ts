/**
 * Regressions found by the API's robustness tests: each request here once reached the database
 * and came back as a 500, or was refused where it should not have been.
 */
import { readFileSync } from "node:fs";
import type { IncomingMessage } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toHttpApiEvent } from "../../local/http-adapter.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { type ApiTestBed, apiTestBed } from "../support/api-harness.ts";
import { insertDeadLetter } from "../support/fixtures.ts";

let bed: ApiTestBed;
let id: string;
beforeAll(async () => {
  bed = await apiTestBed();
  id = await bed.db.withClient((c) => insertDeadLetter(c, { job_id: "regression-1" }));
});
afterAll(async () => {
  await bed?.close();
});

const BASE = "/v1/core/dead-letters";

describe("timestamps PostgreSQL cannot read are refused as bad requests", () => {
  it.each([
    "created_after=0000-01-01T00:00:00Z",
    "created_before=2024-01-01T00:00:00%2B16:00",
    "created_before=2024-01-01T00:00:00-23:59",
  ])("GET ?%s → 400", async (query) => {
    const response = await bed.call("GET", `${BASE}?${query}`, { token: bed.tokens.read });
    expect(response.status).toBe(400);
    expect(response.contentType).toBe("application/problem+json");
  });

  it("a bulk dry run with year 0000 → 400", async () => {
    const response = await bed.call("POST", `${BASE}/replay`, {
      token: bed.tokens.replay,
      body: { filter: { created_before: "0000-01-01T00:00:00Z" }, dry_run: true },
    });
    expect(response.status).toBe(400);
  });

  it("an edited cursor carrying such a timestamp → 400", async () => {
    const cursor = Buffer.from(
      JSON.stringify({
        v: 1,
        t: "0000-01-01T00:00:00Z",
        i: "00000000-0000-4000-8000-000000000000",
        f: "0123456789abcdef",
      }),
    ).toString("base64url");
    const response = await bed.call("GET", `${BASE}?cursor=${cursor}`, { token: bed.tokens.read });
    expect(response.status).toBe(400);
  });
});

describe("tokens", () => {
  it("a subject the database cannot store (U+0000) is refused with 401, and nothing changes", async () => {
    const token = await bed.issuer.sign("a\u0000b", [
      "core.dead_letters.discard",
      "core.dead_letters.replay",
    ]);
    const discard = await bed.call("POST", `${BASE}/${id}/discard`, { token, body: { reason: "x" } });
    expect(discard.status).toBe(401);
    const replay = await bed.call("POST", `${BASE}/${id}/replay`, { token });
    expect(replay.status).toBe(401);
    const row = await bed.db.withClient(
      async (c) => (await c.query("SELECT status FROM core.dead_letters WHERE id = $1", [id])).rows[0],
    );
    expect(row.status).toBe("pending_review");
  });

  it("the Bearer scheme is case-insensitive", async () => {
    const response = await bed.call("GET", BASE, { headers: { authorization: `bearer ${bed.tokens.read}` } });
    expect(response.status).toBe(200);
  });
});

describe("inputs", () => {
  it("a query parameter named __proto__ is an unknown parameter (400), not a prototype", async () => {
    const response = await bed.call("GET", `${BASE}?__proto__=x`, { token: bed.tokens.read });
    expect(response.status).toBe(400);
  });

  it.each([
    ["zero-width spaces", "\u200b\u200b"],
    ["a byte-order mark", "\ufeff"],
    ["control characters", "\u001c\u0085"],
  ])("a discard reason of only %s is no reason (400)", async (_, reason) => {
    const response = await bed.call("POST", `${BASE}/${id}/discard`, {
      token: bed.tokens.discard,
      body: { reason },
    });
    expect(response.status).toBe(400);
  });
});

describe("routing", () => {
  it.each([
    ["DELETE", "/v1/core/dead-letters", "GET, HEAD"],
    ["PUT", "/v1/core/dead-letters/00000000-0000-4000-8000-000000000000/discard", "POST"],
    // A literal path wins over {id}: these are the bulk routes' paths, which take POST only.
    ["PATCH", "/v1/core/dead-letters/replay", "POST"],
    ["GET", "/v1/core/dead-letters/replay", "POST"],
    ["GET", "/v1/core/dead-letters/discard", "POST"],
    ["HEAD", "/v1/core/dead-letters/discard", "POST"],
    ["GET", "/v1/core/dead-letters/replay/plan", "POST"],
    ["GET", "/v1/core/dead-letters/discard/plan", "POST"],
    ["POST", "/v1/core/dead-letters/operations", "GET, HEAD"],
    ["POST", "/v1/core/dead-letters/stats", "GET, HEAD"],
    ["GET", "/v1/core/dead-letters/operations/00000000-0000-4000-8000-000000000000/cancel", "POST"],
  ])("%s %s is 405 with Allow: %s", async (method, path, allow) => {
    const response = await bed.call(method, path, { token: bed.tokens.admin });
    expect(response.status).toBe(405);
    expect(response.headers.get("allow")).toBe(allow);
    if (method === "HEAD") {
      expect(response.body).toBeUndefined();
      return;
    }
    expect(response.contentType).toBe("application/problem+json");
    expect(response.body).toMatchObject({ status: 405, instance: path });
  });

  it("an unknown path is 404", async () => {
    const response = await bed.call("GET", "/v1/core/nothing-here", { token: bed.tokens.admin });
    expect(response.status).toBe(404);
    expect(response.contentType).toBe("application/problem+json");
  });

  it("answers 405 and 404 before it reads a token (in AWS those routes have no authorizer); an operation still needs one", async () => {
    for (const token of [undefined, "not-a-jwt", bed.tokens.none]) {
      const options = token === undefined ? {} : { token };
      const wrong = await bed.call("GET", `${BASE}/replay`, options);
      expect(wrong.status).toBe(405);
      expect(wrong.headers.get("allow")).toBe("POST");
      expect((await bed.call("DELETE", `${BASE}/${id}`, options)).status).toBe(405);
      expect((await bed.call("GET", "/v1/core/nothing-here", options)).status).toBe(404);
    }
    const replay = await bed.call("POST", `${BASE}/${id}/replay`);
    expect(replay.status).toBe(401);
    expect(replay.headers.get("www-authenticate")).toMatch(/^Bearer /);
  });
});

describe("HEAD", () => {
  // Node's server drops a HEAD response's body by itself; API Gateway is given what the function
  // returns, so the function must leave the body out itself.
  it("is answered by the function without a body, errors too, with GET's status and headers", async () => {
    const handler = bed.handler();
    const invoke = (method: string, path: string, token?: string) =>
      handler(
        toHttpApiEvent(
          {
            method,
            url: path,
            httpVersion: "1.1",
            headers: token ? { authorization: `Bearer ${token}` } : {},
            socket: { remoteAddress: "127.0.0.1" },
          } as unknown as IncomingMessage,
          Buffer.alloc(0),
        ),
        lambdaContext("dead-letters-api"),
      );
    for (const [path, token] of [
      [`${BASE}/${id}`, bed.tokens.read],
      [`${BASE}/stats`, bed.tokens.read],
      [`${BASE}/00000000-0000-4000-8000-000000000000`, bed.tokens.read],
      [`${BASE}/${id}`, bed.tokens.discard],
      [`${BASE}/${id}`, undefined],
      [`${BASE}/replay`, bed.tokens.read],
      ["/v1/core/openapi.json", bed.tokens.read],
    ] as const) {
      const get = await invoke("GET", path, token);
      const head = await invoke("HEAD", path, token);
      expect(get.body, `GET ${path}`).toEqual(expect.any(String));
      expect(head.body, `HEAD ${path}`).toBeUndefined();
      expect(head.statusCode, `HEAD ${path}`).toBe(get.statusCode);
      expect(head.headers, `HEAD ${path}`).toEqual(get.headers);
    }
  });

  /** Headers that describe the connection or the body's framing, not the answer. */
  const FRAMING = new Set(["date", "connection", "keep-alive", "transfer-encoding", "content-length"]);
  const answerHeaders = (headers: Headers) =>
    Object.fromEntries([...headers].filter(([name]) => !FRAMING.has(name)));

  const cases: Array<[string, () => string, "read" | "discard" | undefined]> = [
    ["the list", () => `${BASE}?limit=1`, "read"],
    ["stats", () => `${BASE}/stats`, "read"],
    ["groups", () => `${BASE}/groups`, "read"],
    ["operations", () => `${BASE}/operations`, "read"],
    ["one dead letter", () => `${BASE}/${id}`, "read"],
    ["an unknown dead letter", () => `${BASE}/00000000-0000-4000-8000-000000000000`, "read"],
    ["an id that is not a UUID", () => `${BASE}/not-a-uuid`, "read"],
    ["one dead letter, without the read permission", () => `${BASE}/${id}`, "discard"],
    ["one dead letter, without a token", () => `${BASE}/${id}`, undefined],
  ];
  it.each(cases)("on %s answers as GET does, without a body", async (_, path, token) => {
    const options = token ? { token: bed.tokens[token] } : {};
    const get = await bed.call("GET", path(), options);
    const head = await bed.call("HEAD", path(), options);
    expect(head.status).toBe(get.status);
    expect(answerHeaders(head.headers)).toEqual(answerHeaders(get.headers));
    expect(head.body).toBeUndefined();
    expect(get.body).toBeDefined();
  });
});

describe("the OpenAPI document", () => {
  const committed = readFileSync(new URL("../../docs/openapi.json", import.meta.url), "utf8");

  it("is served at /v1/core/openapi.json, byte for byte what npm run openapi writes", async () => {
    const response = await fetch(`${bed.apiUrl}/v1/core/openapi.json`, {
      headers: { authorization: `Bearer ${bed.tokens.read}` },
    });
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("application/json");
    expect(await response.text()).toBe(committed);
    // It describes itself.
    expect(JSON.parse(committed).paths["/v1/core/openapi.json"].get.operationId).toBe("getOpenApiDocument");
  });

  it("needs the read permission, answers HEAD, and takes no query", async () => {
    expect((await bed.call("GET", "/v1/core/openapi.json")).status).toBe(401);
    const forbidden = await bed.call("GET", "/v1/core/openapi.json", { token: bed.tokens.discard });
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.required_permission).toBe("core.dead_letters.read");
    const head = await bed.call("HEAD", "/v1/core/openapi.json", { token: bed.tokens.read });
    expect(head.status).toBe(200);
    expect(head.body).toBeUndefined();
    expect((await bed.call("GET", "/v1/core/openapi.json?x=1", { token: bed.tokens.read })).status).toBe(400);
    const post = await bed.call("POST", "/v1/core/openapi.json", { token: bed.tokens.read });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
  });
});
