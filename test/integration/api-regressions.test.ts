/**
 * Regressions found by the API's robustness tests: each request here once reached the database
 * and came back as a 500, or was refused where it should not have been.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
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
    ["DELETE", "/v1/core/dead-letters", "GET"],
    ["PUT", "/v1/core/dead-letters/00000000-0000-4000-8000-000000000000/discard", "POST"],
    // GET reaches /{id} (and is refused there as not a UUID), so both methods are allowed.
    ["PATCH", "/v1/core/dead-letters/replay", "GET, POST"],
  ])("%s %s is 405 with Allow: %s", async (method, path, allow) => {
    const response = await bed.call(method, path, { token: bed.tokens.admin });
    expect(response.status).toBe(405);
    expect(response.contentType).toBe("application/problem+json");
    expect(response.headers.get("allow")).toBe(allow);
  });

  it("an unknown path is 404", async () => {
    const response = await bed.call("GET", "/v1/core/nothing-here", { token: bed.tokens.admin });
    expect(response.status).toBe(404);
    expect(response.contentType).toBe("application/problem+json");
  });
});
