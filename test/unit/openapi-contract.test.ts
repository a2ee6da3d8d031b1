/**
 * The document and the server's validation agree on every request a client could build from the
 * document: requests drawn from docs/openapi.json's schemas (valid ones and near misses), judged by
 * the document (ajv) and by what each route's handler parses first (path, query, body, as
 * routes.ts does), must get the same verdict. Fast, so it runs thousands of cases; the same
 * requests go through the real HTTP API in test/integration/api-contract.test.ts.
 */
import { readFileSync } from "node:fs";
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { OPENAPI_DOCUMENT_PATH } from "../../functions/dead-letters-api/openapi.ts";
import { ROUTES } from "../../functions/dead-letters-api/routes.ts";
import { deadLetterIdSchema } from "../../shared/dead-letters/api-schemas.ts";
import { idempotencyKeyOf } from "../../shared/dead-letters/idempotency.ts";
import { HttpProblem } from "../../shared/errors/http.ts";
import { parseJsonBody, parsePathParameter, parseQuery, queryParameters } from "../../shared/http/request.ts";
import { DocumentContract, type GeneratedRequest } from "../support/openapi-requests.ts";

const document = JSON.parse(readFileSync(new URL(`../../${OPENAPI_DOCUMENT_PATH}`, import.meta.url), "utf8"));
const contract = new DocumentContract(document);

/** The event API Gateway would hand the function for `request`, with `{id}` already matched. */
function eventOf(request: GeneratedRequest): APIGatewayProxyEventV2 {
  const [path = "", rawQueryString = ""] = request.target.split(/\?(.*)/s);
  const template = request.operation.path.split("/");
  const segments = path.split("/");
  const at = template.indexOf("{id}");
  const pathParameters = at < 0 ? undefined : { id: decodeURIComponentLoose(segments[at] ?? "") };
  return {
    rawPath: path,
    rawQueryString,
    headers: request.headers,
    ...(pathParameters ? { pathParameters } : {}),
    ...(request.body !== undefined ? { body: request.body } : {}),
    isBase64Encoded: false,
  } as unknown as APIGatewayProxyEventV2;
}

/** API Gateway decodes a path parameter; a segment that is not valid UTF-8 stays as sent. */
function decodeURIComponentLoose(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** What the route's handler refuses before it acts, or undefined when it takes the request. */
function serverRefusal(request: GeneratedRequest): string | undefined {
  // A HEAD operation is its GET's route, answered without the body.
  const route = ROUTES.find(
    (r) =>
      r.operationId === request.operation.operationId ||
      `head${r.operationId.charAt(0).toUpperCase()}${r.operationId.slice(1)}` ===
        request.operation.operationId,
  );
  if (!route) throw new Error(`no route ${request.operation.operationId}`);
  const event = eventOf(request);
  try {
    if (route.hasId) parsePathParameter(event, "id", deadLetterIdSchema);
    if (route.query) parseQuery(event, route.query);
    else if (Object.keys(queryParameters(event)).length > 0) return "query parameters";
    if (route.body) parseJsonBody(event, route.body);
    if (route.method === "POST") idempotencyKeyOf(event);
    return undefined;
  } catch (error) {
    if (error instanceof HttpProblem) return error.message;
    throw error;
  }
}

describe("the OpenAPI document and the server's validation", () => {
  it("document every operation the server routes", () => {
    const gets = contract.operations.filter((o) => o.method !== "HEAD");
    expect(gets.map((o) => o.operationId).sort()).toEqual(ROUTES.map((r) => r.operationId).sort());
    // Every GET has its HEAD, and nothing else does.
    expect(contract.operations.filter((o) => o.method === "HEAD").map((o) => o.path)).toEqual(
      gets.filter((o) => o.method === "GET").map((o) => o.path),
    );
  });

  for (const operation of contract.operations) {
    it(`agree on every request to ${operation.method} ${operation.path}`, () => {
      let valid = 0;
      let invalid = 0;
      fc.assert(
        fc.property(contract.requests(operation), (request) => {
          const refusal = serverRefusal(request);
          const documentValid = request.invalid.length === 0;
          if (documentValid) valid += 1;
          else invalid += 1;
          expect(
            { documentValid, serverValid: refusal === undefined },
            `${request.method} ${request.target} ${request.body ?? ""}\ndocument: ${request.invalid.join(", ") || "valid"}\nserver: ${refusal ?? "valid"}`,
          ).toEqual({ documentValid, serverValid: documentValid });
        }),
        { numRuns: 400 },
      );
      // Both sides are exercised, not one of them only.
      expect(valid).toBeGreaterThan(20);
      if (operation.parameters.length > 0 || operation.body !== undefined)
        expect(invalid).toBeGreaterThan(20);
    });
  }
});
