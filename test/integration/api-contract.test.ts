/**
 * The ops API does what its document says, through the real HTTP server and a real PostgreSQL:
 *
 * - requests generated from docs/openapi.json alone (valid ones and near misses, see
 *   test/support/openapi-requests.ts), sent with a token holding every permission: each answer's
 *   status is one the operation documents and its body is that status's documented schema; a request
 *   the document allows never gets a 400 (nor a 5xx), and one it refuses gets a 400;
 * - the query string is read strictly: integers are decimal digits, and a parameter given twice is
 *   refused naming it (API Gateway would join the values with a comma).
 */
import { readFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OPENAPI_DOCUMENT_PATH } from "../../functions/dead-letters-api/openapi.ts";
import { canonicalInstant, timestampSchema } from "../../shared/dead-letters/timestamp.ts";
import { MAX_REQUEST_LINE_AND_HEADERS_BYTES, requestLineAndHeadersBytes } from "../../shared/http/request.ts";
import { BASE, expectProblem, seedDeadLetters } from "../support/api-fixtures.ts";
import { type ApiTestBed, apiTestBed } from "../support/api-harness.ts";
import { DocumentContract } from "../support/openapi-requests.ts";

const document = JSON.parse(readFileSync(new URL(`../../${OPENAPI_DOCUMENT_PATH}`, import.meta.url), "utf8"));
const contract = new DocumentContract(document);

let bed: ApiTestBed;
beforeAll(async () => {
  bed = await apiTestBed({ bulk: { confirmAbove: 20 } });
  // A few pending dead letters, so lists, plans and starts have something to find.
  await seedDeadLetters(
    bed.db,
    Array.from({ length: 5 }, (_, i) => ({ consumer: "contract", job_id: `contract-${i}` })),
  );
});
afterAll(async () => {
  await bed?.close();
});

/** Sends `target` raw: the path and query exactly as given, no re-encoding. */
async function send(method: string, target: string, headers: Record<string, string> = {}, body?: string) {
  const response = await fetch(`${bed.apiUrl}${target}`, {
    method,
    headers: { authorization: `Bearer ${bed.tokens.admin}`, ...headers },
    ...(body !== undefined ? { body } : {}),
  });
  const text = await response.text();
  return { status: response.status, contentType: response.headers.get("content-type") ?? "", text };
}

describe("requests generated from the document", () => {
  for (const operation of contract.operations) {
    it(`${operation.method} ${operation.path}: documented statuses and bodies; valid never 400, invalid always`, async () => {
      const seen = { valid: 0, invalid: 0 };
      await fc.assert(
        fc.asyncProperty(contract.cases(operation), async (requests) => {
          for (const request of requests) {
            const answer = await send(request.method, request.target, request.headers, request.body);
            // The request line and headers are bounded as API Gateway bounds them (the document says
            // so on every operation's 431): a query the parameters allow may still be too long.
            const lineAndHeaders = requestLineAndHeadersBytes(request.method, request.target, [
              `Bearer ${bed.tokens.admin}`,
              ...Object.values(request.headers),
            ]);
            // fetch adds its own headers (host, accept, user-agent…), well under 300 bytes.
            if (lineAndHeaders > MAX_REQUEST_LINE_AND_HEADERS_BYTES) {
              expect(answer.status, `${request.method} ${request.target.slice(0, 200)}…`).toBe(431);
              continue;
            }
            if (answer.status === 431) {
              expect(lineAndHeaders, "a 431 only near the limit").toBeGreaterThan(
                MAX_REQUEST_LINE_AND_HEADERS_BYTES - 300,
              );
              continue;
            }
            const about = `${request.method} ${request.target} ${request.body ?? ""}\ndocument: ${
              request.invalid.join(", ") || "valid"
            }\nanswer: ${answer.status} ${answer.text.slice(0, 300)}`;
            expect(operation.statuses.has(answer.status), `undocumented status: ${about}`).toBe(true);
            expect(answer.status, about).toBeLessThan(500);
            if (request.invalid.length === 0) {
              seen.valid += 1;
              expect(answer.status, `a valid request refused: ${about}`).not.toBe(400);
            } else {
              seen.invalid += 1;
              expect(answer.status, `an invalid request taken: ${about}`).toBe(400);
            }
            const schema = operation.responses.get(answer.status);
            if (request.method === "HEAD") expect(answer.text, about).toBe("");
            else if (schema !== undefined) {
              expect(
                contract.valid(schema, JSON.parse(answer.text)),
                `body outside its schema: ${about}`,
              ).toBe(true);
            }
          }
        }),
        // Each run sends one valid request, one refused (when the operation takes input) and one
        // drawn either way.
        { numRuns: 14 },
      );
      expect(seen.valid).toBeGreaterThan(3);
      if (operation.parameters.length > 0 || operation.body !== undefined)
        expect(seen.invalid).toBeGreaterThan(3);
    });
  }
});

describe("the query string", () => {
  const list = (query: string) => bed.call("GET", `${BASE}?${query}`, { token: bed.tokens.read });

  it("takes integers as decimal digits only", async () => {
    for (const limit of ["0x10", "0b11", "1e1", "+5", "%205%20", "5.0", "-5", "５"]) {
      const response = await list(`limit=${limit}`);
      expectProblem(response, 400);
      expect(response.body.errors, limit).toEqual([
        expect.objectContaining({ location: "query", field: "limit" }),
      ]);
    }
    const five = await list("limit=5");
    expect(five.status).toBe(200);
    expect(five.body.items.length).toBeLessThanOrEqual(5);
    expect((await list("limit=005")).status).toBe(200);
    for (const path of [`${BASE}/groups?limit=1e1`, `${BASE}/operations?limit=0x10`]) {
      expectProblem(await bed.call("GET", path, { token: bed.tokens.read }), 400);
    }
  });

  it("refuses a parameter given twice, naming it, instead of merging the values into one", async () => {
    for (const [query, name] of [
      ["consumer=contract&consumer=other", "consumer"],
      ["consumer=contract&consumer=contract", "consumer"],
      ["limit=5&limit=5", "limit"],
      ["status=pending_review&consumer=contract&status=replayed", "status"],
      ["consumer=a&consumer", "consumer"],
    ] as const) {
      const response = await list(query);
      expectProblem(response, 400);
      expect(response.body.errors, query).toEqual([
        { location: "query", field: name, message: "is given more than once" },
      ]);
      expect(response.body.detail).toContain(name);
    }
    const groups = await bed.call("GET", `${BASE}/groups?include_resolved=true&include_resolved=false`, {
      token: bed.tokens.read,
    });
    expectProblem(groups, 400);
    expect(groups.body.errors[0].field).toBe("include_resolved");
    // The same name once, and a comma inside one value, are one value.
    const one = await list("consumer=contract");
    expect(one.status).toBe(200);
    expect(one.body.items.length).toBeGreaterThan(0);
    expect((await list("consumer=a%2Cb")).status).toBe(200);
  });

  it("refuses a value that is not percent-encoded UTF-8, naming the parameter", async () => {
    for (const query of ["consumer=%ED%A0%80", "consumer=%FF", "consumer=%E0%A4%A", "job_id=%00"]) {
      const response = await list(query);
      expectProblem(response, 400);
      expect(response.body.errors[0].field, query).toMatch(/^(consumer|job_id)$/);
    }
  });

  it("refuses year 0000, offsets past ±15:59 and calendar days that do not exist, in the query and in a body", async () => {
    for (const value of [
      "0000-06-01T00:00:00Z",
      "2026-03-01T00:00:00%2B16:00",
      "2026-03-01T00:00:00-23:59",
      "2026-02-29T00:00:00Z",
      "2026-03-01t00:00:00z",
    ]) {
      expectProblem(await list(`created_after=${value}`), 400);
    }
    expect((await list("created_after=2026-03-01T00:00:00-15:59")).status).toBe(200);
    expect((await list("created_after=0001-01-01T00:00:00Z")).status).toBe(200);
    const plan = await bed.call("POST", `${BASE}/discard/plan`, {
      token: bed.tokens.discard,
      body: { filter: { created_before: "0000-12-31T23:59:59Z" } },
    });
    expectProblem(plan, 400);
    expect(plan.body.errors[0].field).toBe("filter.created_before");
  });

  it("counts text bounds in characters, as the document and the database do, not UTF-16 units", async () => {
    // 128 emoji: 128 characters, 256 UTF-16 units. The consumer filter takes up to 128.
    const emoji = encodeURIComponent("\u{1F600}".repeat(128));
    expect((await list(`consumer=${emoji}`)).status).toBe(200);
    expectProblem(await list(`consumer=${emoji}${encodeURIComponent("\u{1F600}")}`), 400);
  });
});

describe("what the first outside pass found", () => {
  it("refuses a timestamp with more than nine fraction digits (PostgreSQL refused ~130 with a raw sqlstate)", async () => {
    const list = (query: string) => bed.call("GET", `${BASE}?${query}`, { token: bed.tokens.read });
    for (const fraction of ["1234567891", "0".repeat(130)]) {
      const response = await list(`created_after=2026-03-01T12:00:00.${fraction}Z`);
      expectProblem(response, 400);
      expect(JSON.stringify(response.body)).not.toMatch(/sqlstate|22007/);
      const plan = await bed.call("POST", `${BASE}/replay/plan`, {
        token: bed.tokens.replay,
        body: { filter: { created_before: `2026-03-01T12:00:00.${fraction}Z` } },
      });
      expectProblem(plan, 400);
      expect(plan.body.errors[0].field).toBe("filter.created_before");
    }
    expect((await list("created_after=2026-03-01T12:00:00.123456789Z")).status).toBe(200);
  });

  it("counts two spellings of one instant as one filter: a second start while the first runs is refused", async () => {
    await seedDeadLetters(
      bed.db,
      Array.from({ length: 3 }, (_, i) => ({ consumer: "spelling", job_id: `spelling-${i}` })),
    );
    const start = (created_after?: string) =>
      bed.call("POST", `${BASE}/discard`, {
        token: bed.tokens.discard,
        body: {
          filter: { consumer: "spelling", ...(created_after ? { created_after } : {}) },
          reason: "spelled three ways",
          rate_per_second: 0.01,
        },
      });
    const first = await start("2000-01-01T01:00:00+01:00");
    expect(first.status, JSON.stringify(first.body)).toBe(202);
    expect(first.body.filter.created_after).toBe("2000-01-01T00:00:00.000000Z");
    for (const spelling of [
      "2000-01-01T00:00:00.000Z",
      "2000-01-01T00:00:00Z",
      "1999-12-31T14:00:00-10:00",
    ]) {
      const again = await start(spelling);
      expectProblem(again, 409);
      expect(again.body).toMatchObject({ reason: "operation-running", operation_id: first.body.id });
    }
  });

  it("refuses any query parameter on an operation that takes none, naming it", async () => {
    const id = "00000000-0000-4000-8000-000000000000";
    for (const [method, path, token, body] of [
      ["POST", `${BASE}/discard/plan?consumer=zzz`, bed.tokens.discard, { filter: {} }],
      ["POST", `${BASE}/replay?consumer=zzz`, bed.tokens.replay, {}],
      ["GET", `${BASE}/${id}?limit=abc`, bed.tokens.read, undefined],
      ["GET", `${BASE}/operations/${id}?x=1`, bed.tokens.read, undefined],
      ["POST", `${BASE}/${id}/replay?bogus=1`, bed.tokens.replay, {}],
      ["GET", `${BASE}/stats?consumer=a`, bed.tokens.read, undefined],
      ["GET", "/v1/core/openapi.json?v=2", bed.tokens.read, undefined],
    ] as const) {
      const response = await bed.call(method, path, { token, ...(body ? { body } : {}) });
      expectProblem(response, 400);
      expect(response.body.errors?.[0]?.location, path).toBe("query");
    }
  });

  it("takes a body only as application/json (UTF-8), and empty only as JSON's white space", async () => {
    const path = `${BASE}/replay/plan`;
    for (const contentType of [
      "application/merge-patch+json",
      "application/json-seq",
      "application/json.x",
      "application/vnd.api+json",
      "application/json; charset=latin1",
    ]) {
      const response = await bed.call("POST", path, {
        token: bed.tokens.replay,
        rawBody: "{}",
        headers: { "content-type": contentType },
      });
      expectProblem(response, 415);
    }
    for (const contentType of [
      "application/json",
      "Application/JSON; charset=UTF-8",
      'application/json;charset="utf-8"',
    ]) {
      const response = await bed.call("POST", path, {
        token: bed.tokens.replay,
        rawBody: "{}",
        headers: { "content-type": contentType },
      });
      expect(response.status, contentType).toBe(200);
    }
    // U+FEFF, U+00A0 and U+2028 are not JSON white space: such a body is a body, and not JSON.
    for (const rawBody of ["\uFEFF", "\u00A0", "\u2028"]) {
      expectProblem(
        await bed.call("POST", path, {
          token: bed.tokens.replay,
          rawBody,
          headers: { "content-type": "text/plain" },
        }),
        415,
      );
      expectProblem(
        await bed.call("POST", path, {
          token: bed.tokens.replay,
          rawBody,
          headers: { "content-type": "application/json" },
        }),
        400,
      );
    }
    expect(
      (await bed.call("POST", path, { token: bed.tokens.replay, rawBody: " \r\n\t", headers: {} })).status,
    ).toBe(200);
  });

  it("gives a stored cancel answer again only to a token that may still cancel that kind", async () => {
    await seedDeadLetters(
      bed.db,
      Array.from({ length: 2 }, (_, i) => ({ consumer: "cancel-kind", job_id: `cancel-kind-${i}` })),
    );
    const started = await bed.call("POST", `${BASE}/discard`, {
      token: bed.tokens.discard,
      body: { filter: { consumer: "cancel-kind" }, reason: "to cancel", rate_per_second: 0.01 },
    });
    expect(started.status).toBe(202);
    const sub = "ops-cancel-kind";
    const everything = await bed.issuer.sign(sub, [
      "core.dead_letters.read",
      "core.dead_letters.replay",
      "core.dead_letters.discard",
    ]);
    const replayOnly = await bed.issuer.sign(sub, ["core.dead_letters.replay"]);
    const cancel = (token: string) =>
      bed.call("POST", `${BASE}/operations/${started.body.id}/cancel`, {
        token,
        body: {},
        headers: { "idempotency-key": "cancel-kind-k1" },
      });
    const first = await cancel(everything);
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    const again = await cancel(replayOnly);
    expectProblem(again, 403);
    expect(again.body.required_permission).toBe("core.dead_letters.discard");
    const allowed = await cancel(everything);
    expect(allowed.status).toBe(200);
    expect(allowed.headers.get("idempotent-replayed")).toBe("true");
  });
});

describe("a filter's timestamp read as PostgreSQL reads it", () => {
  it("canonicalInstant names the instant PostgreSQL reads, for generated spellings (fractions to nine digits, offsets to ±15:59, years 0001–9999)", async () => {
    const pad = (n: number, w = 2) => String(n).padStart(w, "0");
    const spelling = fc
      .record({
        date: fc.date({
          min: new Date("0001-01-02T00:00:00Z"),
          max: new Date("9999-12-30T00:00:00Z"),
          noInvalidDate: true,
        }),
        fraction: fc.option(fc.stringMatching(/^[0-9]{1,9}$/), { nil: undefined }),
        offset: fc.oneof(fc.constant(0), fc.integer({ min: -(15 * 60 + 59), max: 15 * 60 + 59 })),
        z: fc.boolean(),
      })
      .map(({ date, fraction, offset, z }) => {
        const local = new Date(date.getTime() + offset * 60_000);
        const zone =
          z && offset === 0
            ? "Z"
            : `${offset < 0 ? "-" : "+"}${pad(Math.floor(Math.abs(offset) / 60))}:${pad(Math.abs(offset) % 60)}`;
        return `${pad(local.getUTCFullYear(), 4)}-${pad(local.getUTCMonth() + 1)}-${pad(local.getUTCDate())}T${pad(
          local.getUTCHours(),
        )}:${pad(local.getUTCMinutes())}:${pad(local.getUTCSeconds())}${fraction === undefined ? "" : `.${fraction}`}${zone}`;
      });
    const edges = [
      "2000-01-01T00:00:00.0000005Z",
      "2000-01-01T00:00:00.0000015Z",
      "2000-01-01T00:00:00.9999995Z",
      "2000-12-31T23:59:59.999999999Z",
      "0001-01-01T00:30:00+01:00",
      "0001-01-01T00:00:00+15:59",
      "9999-12-31T23:59:59.9999999-15:59",
      "2024-02-29T23:59:59.5-00:01",
    ];
    const samples = [...edges, ...fc.sample(spelling, { numRuns: 400, seed: 34 })];
    for (const text of samples) expect(timestampSchema.safeParse(text).success, text).toBe(true);
    const { rows } = await bed.db.withClient((c) =>
      c.query<{ text: string; canonical: string; same: boolean; canonical_valid: boolean }>(
        `SELECT t.text, t.canonical, t.text::timestamptz = t.canonical::timestamptz AS same
           FROM unnest($1::text[], $2::text[]) AS t(text, canonical)`,
        [samples, samples.map(canonicalInstant)],
      ),
    );
    for (const row of rows) {
      expect(row.same, `${row.text} → ${row.canonical}`).toBe(true);
      // The canonical text is a valid timestamp itself, and its own canonical text.
      expect(timestampSchema.safeParse(row.canonical).success, row.canonical).toBe(true);
      expect(canonicalInstant(row.canonical)).toBe(row.canonical);
    }
    // One instant, one text: spellings PostgreSQL reads as equal have the same canonical text.
    const { rows: groups } = await bed.db.withClient((c) =>
      c.query<{ texts: string[] }>(
        `SELECT array_agg(DISTINCT t.canonical) AS texts
           FROM unnest($1::text[], $2::text[]) AS t(text, canonical)
          GROUP BY t.text::timestamptz`,
        [samples, samples.map(canonicalInstant)],
      ),
    );
    for (const group of groups) expect(group.texts).toHaveLength(1);
  });
});

/** Sends exactly `path` (no URL normalisation) with raw headers and body, through node:http. */
function rawRequest(
  method: string,
  path: string,
  headers: Record<string, string | string[]>,
  body?: Buffer,
): Promise<{ status: number; text: string; headers: Record<string, unknown> }> {
  const { port, hostname } = new URL(bed.apiUrl);
  return new Promise((resolve, reject) => {
    const sent = body === undefined ? headers : { ...headers, "content-length": String(body.length) };
    const request = httpRequest(
      { host: hostname, port, method, path, headers: sent, agent: false },
      (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (c: Buffer) => chunks.push(c));
        response.on("end", () =>
          resolve({
            status: response.statusCode ?? 0,
            text: Buffer.concat(chunks).toString("utf8"),
            headers: response.headers,
          }),
        );
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}

describe("what the second outside pass found", () => {
  it("counts message filters that differ only in case as one filter, as the match does (ILIKE)", async () => {
    await seedDeadLetters(
      bed.db,
      Array.from({ length: 2 }, (_, i) => ({ consumer: "cased", job_id: `cased-${i}` })),
    );
    const start = (message: string) =>
      bed.call("POST", `${BASE}/discard`, {
        token: bed.tokens.discard,
        body: { filter: { consumer: "cased", message }, reason: "cased", rate_per_second: 0.01 },
      });
    const first = await start("Connection Reset");
    expect(first.status, JSON.stringify(first.body)).toBe(202);
    // Shown as the operator typed it.
    expect(first.body.filter.message).toBe("Connection Reset");
    for (const message of ["connection reset", "CONNECTION RESET", "cOnNeCtIoN rEsEt"]) {
      const again = await start(message);
      expectProblem(again, 409);
      expect(again.body).toMatchObject({ reason: "operation-running", operation_id: first.body.id });
    }
    // Another text is another filter.
    const other = await start("connection");
    expect(other.status, JSON.stringify(other.body)).toBe(202);
    for (const id of [first.body.id, other.body.id])
      await bed.call("POST", `${BASE}/operations/${id}/cancel`, { token: bed.tokens.discard, body: {} });
  });

  it("counts spellings PostgreSQL reads as one instant as one filter: sub-microsecond fractions, and years 0001 and 9999 across offsets", async () => {
    await seedDeadLetters(
      bed.db,
      Array.from({ length: 2 }, (_, i) => ({ consumer: "spelling-2", job_id: `spelling-2-${i}` })),
    );
    for (const [one, other] of [
      ["2000-01-01T00:00:00Z", "2000-01-01T00:00:00.0000001Z"],
      ["2000-01-01T00:00:01Z", "2000-01-01T00:00:00.9999999Z"],
      ["0001-01-01T00:30:00+01:00", "0001-01-01T01:30:00+02:00"],
    ] as const) {
      const start = (created_after: string) =>
        bed.call("POST", `${BASE}/discard`, {
          token: bed.tokens.discard,
          body: {
            filter: { consumer: "spelling-2", created_after },
            reason: "spelled twice",
            rate_per_second: 0.01,
          },
        });
      const first = await start(one);
      expect(first.status, JSON.stringify(first.body)).toBe(202);
      const again = await start(other);
      expectProblem(again, 409);
      expect(again.body).toMatchObject({ reason: "operation-running", operation_id: first.body.id });
      await bed.call("POST", `${BASE}/operations/${first.body.id}/cancel`, {
        token: bed.tokens.discard,
        body: {},
      });
    }
  });

  it("routes the path as sent: no dot segments, backslashes or `//host` resolved into a route", async () => {
    for (const path of [
      "//evil/v1/core/dead-letters/stats",
      "/v1\\core\\dead-letters\\stats",
      "/v1/core/dead-letters/x/%2e%2e/stats",
      "/v1/core/dead-letters/x/../stats",
      "/v1/core/dead-letters/./stats",
    ]) {
      const answer = await rawRequest("GET", path, { authorization: `Bearer ${bed.tokens.read}` });
      expect(answer.status, path).toBe(404);
      expect(JSON.parse(answer.text).instance, path).toBe(path);
    }
    const ok = await rawRequest("GET", `${BASE}/stats`, { authorization: `Bearer ${bed.tokens.read}` });
    expect(ok.status).toBe(200);
  });

  it("counts header bytes, not fields, and answers headers past the parser's limit with the same 431 problem", async () => {
    const many: Record<string, string> = { authorization: `Bearer ${bed.tokens.read}` };
    for (let i = 0; i < 1200; i++) many[`x-h${i}`] = "1";
    expect((await rawRequest("GET", `${BASE}/stats`, many)).status).toBe(200);
    for (const size of [70_000, 200_000]) {
      const answer = await rawRequest("GET", `${BASE}/stats`, {
        authorization: `Bearer ${bed.tokens.read}`,
        "x-pad": "p".repeat(size),
      }).catch((error: Error) => ({ status: 0, text: error.message, headers: {} }));
      expect(answer.status, String(size)).toBe(431);
      expect(JSON.parse(answer.text)).toMatchObject({
        type: "urn:jobfence:problem:headers-too-large",
        status: 431,
      });
    }
  });

  it("refuses a JSON body that is not valid UTF-8, instead of storing U+FFFD for its bytes", async () => {
    const [id] = await seedDeadLetters(bed.db, [{ consumer: "utf8-body", job_id: "utf8-body-1" }]);
    const body = Buffer.concat([
      Buffer.from('{"reason":"bad '),
      Buffer.from([0xff, 0xfe]),
      Buffer.from('"}'),
    ]);
    const answer = await rawRequest(
      "POST",
      `${BASE}/${id}/discard`,
      { authorization: `Bearer ${bed.tokens.discard}`, "content-type": "application/json" },
      body,
    );
    expect(answer.status, answer.text).toBe(400);
    const { rows } = await bed.db.withClient((c) =>
      c.query("SELECT status FROM core.dead_letters WHERE id = $1", [id]),
    );
    expect(rows[0]?.status).toBe("pending_review");
  });

  it("refuses a body on an operation that takes none, as it refuses a query", async () => {
    for (const [path, contentType, text] of [
      [BASE, "application/json", '{"consumer":"nobody"}'],
      [`${BASE}/stats`, "text/plain", "garbage"],
      ["/v1/core/openapi.json", "application/json", "{}"],
    ] as const) {
      const answer = await rawRequest(
        "GET",
        path,
        { authorization: `Bearer ${bed.tokens.read}`, "content-type": contentType },
        Buffer.from(text),
      );
      expect(answer.status, `${path} ${answer.text}`).toBe(400);
    }
  });

  it("says in the document that in AWS the gateway's authorizer answers some 401 and 403 itself", () => {
    const responses = (document.components as { responses: Record<string, { description: string }> })
      .responses;
    expect(responses.Unauthenticated?.description).toMatch(/API Gateway's JWT authorizer/);
    expect(responses.Forbidden?.description).toMatch(/API Gateway's JWT authorizer/);
  });
});
