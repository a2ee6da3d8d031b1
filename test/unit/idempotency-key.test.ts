/**
 * The pure part of the API's Idempotency-Key (shared/dead-letters/idempotency.ts): the header read
 * and validated, the digest that tells one request from another, and what a repeat gets.
 */
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import { describe, expect, it } from "vitest";
import {
  IDEMPOTENCY,
  idempotencyKeyOf,
  repeatOutcome,
  requestDigest,
} from "../../shared/dead-letters/idempotency.ts";
import { HttpProblem } from "../../shared/errors/http.ts";

const event = (headers: Record<string, string>) => ({ headers }) as unknown as APIGatewayProxyEventV2;

describe("the Idempotency-Key header", () => {
  it("is optional, read case-insensitively, and 1–255 visible ASCII characters", () => {
    expect(idempotencyKeyOf(event({}))).toBeUndefined();
    expect(idempotencyKeyOf(event({ "Idempotency-KEY": "k-1" }))).toBe("k-1");
    expect(idempotencyKeyOf(event({ "idempotency-key": "!".repeat(255) }))).toBe("!".repeat(255));
    for (const value of ["", "x".repeat(256), "a b", "a,\u0009b", "é", "\u0000", "a\u007f"]) {
      let refused: unknown;
      try {
        idempotencyKeyOf(event({ "idempotency-key": value }));
      } catch (error) {
        refused = error;
      }
      expect(refused, JSON.stringify(value)).toBeInstanceOf(HttpProblem);
      expect((refused as HttpProblem).status).toBe(400);
      expect((refused as HttpProblem).extensions.errors).toEqual([
        { location: "header", field: "Idempotency-Key", message: expect.any(String) },
      ]);
    }
  });
});

describe("the request digest", () => {
  it("is the same for the same method, path and body whatever the body's key order, and differs otherwise", () => {
    const path = "/v1/core/dead-letters/replay";
    const a = requestDigest("POST", path, { filter: { consumer: "c", queue: "q" }, rate_per_second: 5 });
    expect(a).toHaveLength(32);
    expect(
      requestDigest("POST", path, { rate_per_second: 5, filter: { queue: "q", consumer: "c" } }),
    ).toEqual(a);
    expect(
      requestDigest("POST", path, { filter: { consumer: "c", queue: "q" }, rate_per_second: 6 }),
    ).not.toEqual(a);
    expect(
      requestDigest("POST", "/v1/core/dead-letters/discard", {
        filter: { consumer: "c", queue: "q" },
        rate_per_second: 5,
      }),
    ).not.toEqual(a);
    expect(requestDigest("POST", path, undefined)).toEqual(requestDigest("POST", path, null));
  });
});

describe("what a repeat gets", () => {
  const digest = requestDigest("POST", "/p", {});
  const other = requestDigest("POST", "/p", { x: 1 });
  const row = { request_digest: digest, response_status: 200, live: true, stale: false };
  it.each([
    ["the same request, answered", row, digest, "replay"],
    ["another request, answered", row, other, "reused"],
    ["another request, still running", { ...row, response_status: null }, other, "reused"],
    ["another request, its claim abandoned", { ...row, response_status: null, stale: true }, other, "reused"],
    ["the same request, still running", { ...row, response_status: null }, digest, "in-progress"],
    [
      "the same request, its claim abandoned",
      { ...row, response_status: null, stale: true },
      digest,
      "claim",
    ],
    ["any request, the key expired", { ...row, live: false }, other, "claim"],
  ] as const)("%s: %s", (_, stored, sent, outcome) => {
    expect(repeatOutcome(stored, sent)).toBe(outcome);
  });

  it("takes an abandoned claim over only after the API's 29-second timeout has surely passed", () => {
    expect(IDEMPOTENCY.staleAfterSeconds).toBeGreaterThan(30);
    expect(IDEMPOTENCY.lifetimeHours).toBe(24);
  });
});
