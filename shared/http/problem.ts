/**
 * Errors as `application/problem+json` (RFC 9457). Every failure of the API becomes one: a client's
 * mistake a 4xx naming what was wrong, never a 500; only our own faults are 5xx. The kinds of
 * problem and their statuses are the errors' own (PROBLEM beside HttpProblem); this renders them.
 */
import type { APIGatewayProxyStructuredResultV2 } from "aws-lambda";
import { type HttpProblem, PROBLEM, type ProblemKind } from "../errors/http.ts";

/** Media type of every error response. */
export const PROBLEM_CONTENT_TYPE = "application/problem+json";

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
