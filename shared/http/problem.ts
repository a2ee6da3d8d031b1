/**
 * Errors as `application/problem+json` (RFC 9457). Every failure of the API becomes one: a client's
 * mistake a 4xx naming what was wrong, never a 500; only our own faults are 5xx.
 */
import type { APIGatewayProxyStructuredResultV2 } from "aws-lambda";
import type { HttpProblem } from "../errors.ts";

/** Media type of every error response. */
export const PROBLEM_CONTENT_TYPE = "application/problem+json";

/** The problems the API reports, by slug: status and a title that does not change per occurrence. */
export const PROBLEM = {
  invalidRequest: { status: 400, title: "The request is not valid" },
  unauthenticated: { status: 401, title: "A valid bearer token is required" },
  forbidden: { status: 403, title: "The token lacks the permission this operation requires" },
  notFound: { status: 404, title: "No such resource" },
  methodNotAllowed: { status: 405, title: "Method not allowed" },
  conflict: { status: 409, title: "The dead letter's state does not allow this operation" },
  unsupportedMediaType: { status: 415, title: "The body must be application/json" },
  confirmationRequired: { status: 428, title: "This operation needs the confirmation token of its plan" },
  upstreamFailed: { status: 502, title: "A downstream service refused the operation" },
  unavailable: { status: 503, title: "The service is temporarily unavailable" },
  internal: { status: 500, title: "Internal error" },
} as const;

/** One of {@link PROBLEM}'s keys. */
export type ProblemKind = keyof typeof PROBLEM;

/** The `type` URI of a problem kind. */
export function problemType(kind: ProblemKind): string {
  return `urn:jobfence:problem:${kind.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
}

/** The HTTP response for a problem at `instance` (the request path). */
export function problemResponse(problem: HttpProblem, instance?: string): APIGatewayProxyStructuredResultV2 {
  const body = {
    type: problemType(problem.kind),
    title: PROBLEM[problem.kind].title,
    status: problem.status,
    detail: problem.message,
    ...(instance ? { instance } : {}),
    ...problem.extensions,
  };
  return {
    statusCode: problem.status,
    headers: { "content-type": PROBLEM_CONTENT_TYPE, ...problem.headers },
    body: JSON.stringify(body),
  };
}
