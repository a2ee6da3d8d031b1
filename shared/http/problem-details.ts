/**
 * Middleware: turns every error of an HTTP handler into a problem+json response. Typed errors
 * decide the status (never message text); what is left is logged and answered 500.
 */

import { randomUUID } from "node:crypto";
import type { Logger } from "@aws-lambda-powertools/logger";
import type { MiddlewareObj } from "@middy/core";
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from "aws-lambda";
import {
  ConfirmationRequiredError,
  InvalidPlanTokenError,
  NothingMatchedError,
  OperationFinishedError,
  OperationNotFoundError,
  OperationRunningError,
  PlanExpiredError,
  PlanStaleError,
  PlanUsedError,
} from "../errors/bulk-operation.ts";
import {
  DeadLetterConflictError,
  DeadLetterNotFoundError,
  FollowUpProvenanceError,
  InvalidCursorError,
  ReplayConflictError,
  ReplayOutlivedError,
  ReplayQueueRefusedError,
  ReplaySendError,
} from "../errors/dead-letter.ts";
import { HttpProblem } from "../errors/http.ts";
import { IdempotencyKeyInProgressError, IdempotencyKeyReusedError } from "../errors/idempotency.ts";
import { describeError } from "../errors/last-error.ts";
import { problemResponse } from "./problem.ts";

/**
 * SQLSTATE classes and codes that mean the database is unreachable, overloaded or asks for the same
 * request again (a lock or statement timeout, a serialization failure, a deadlock), not that we erred.
 */
const UNAVAILABLE_SQLSTATE = /^(08|53|57P0[1-3])|^(55P03|57014|40001|40P01)$/;
const UNAVAILABLE_ERRNO = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "ENOTFOUND"]);

/** The problem an error stands for. */
export function problemOf(error: unknown): HttpProblem {
  if (error instanceof HttpProblem) return error;
  if (error instanceof DeadLetterNotFoundError) return new HttpProblem("notFound", error.message);
  if (error instanceof DeadLetterConflictError) {
    return new HttpProblem("conflict", error.message, {
      extensions: { current_status: error.status, reason: "not-pending" },
    });
  }
  if (error instanceof ReplayQueueRefusedError) {
    return new HttpProblem("conflict", error.message, {
      extensions: { current_status: "pending_review", reason: "foreign-queue" },
    });
  }
  if (error instanceof FollowUpProvenanceError) {
    return new HttpProblem("conflict", error.message, {
      extensions: {
        current_status: "pending_review",
        reason: "unproven-follow-up",
        sender: error.sender,
        provenance: error.fault,
      },
    });
  }
  if (error instanceof ReplayOutlivedError) {
    return new HttpProblem("conflict", error.message, {
      extensions: {
        current_status: "pending_review",
        reason: "outlived",
        job_id: error.jobId,
        copy_sent_at: error.copySentAt,
      },
    });
  }
  if (error instanceof ReplayConflictError) {
    return new HttpProblem("conflict", error.message, {
      extensions: { current_status: "pending_review", reason: "job-conflict" },
    });
  }
  if (error instanceof InvalidCursorError) {
    return new HttpProblem("invalidRequest", error.message, {
      extensions: { errors: [{ location: "cursor", field: "cursor", message: error.message }] },
    });
  }
  if (error instanceof InvalidPlanTokenError) {
    return new HttpProblem("invalidRequest", error.message, {
      extensions: { errors: [{ location: "body", field: "token", message: error.message }] },
    });
  }
  if (error instanceof PlanExpiredError) {
    return new HttpProblem("conflict", error.message, { extensions: { reason: "plan-expired" } });
  }
  if (error instanceof PlanStaleError) {
    return new HttpProblem("conflict", error.message, {
      extensions: { reason: "plan-stale", planned: error.planned, matched: error.matched },
    });
  }
  if (error instanceof PlanUsedError) {
    return new HttpProblem("conflict", error.message, { extensions: { reason: "plan-used" } });
  }
  if (error instanceof NothingMatchedError) {
    return new HttpProblem("conflict", error.message, {
      extensions: { reason: "nothing-matched", matched: 0 },
    });
  }
  if (error instanceof ConfirmationRequiredError) {
    return new HttpProblem("confirmationRequired", error.message, {
      extensions: {
        reason: "confirmation-required",
        matched: error.matched,
        pending_total: error.pendingTotal,
        confirm_above: error.confirmAbove,
      },
    });
  }
  if (error instanceof OperationNotFoundError) return new HttpProblem("notFound", error.message);
  if (error instanceof OperationFinishedError) {
    return new HttpProblem("conflict", error.message, {
      extensions: { operation_status: error.status, reason: "operation-finished" },
    });
  }
  if (error instanceof OperationRunningError) {
    return new HttpProblem("conflict", error.message, {
      extensions: {
        reason: "operation-running",
        ...(error.operationId !== undefined ? { operation_id: error.operationId } : {}),
      },
    });
  }
  if (error instanceof IdempotencyKeyReusedError) {
    return new HttpProblem("idempotencyKeyReused", error.message, {
      extensions: { reason: "idempotency-key-reused" },
    });
  }
  if (error instanceof IdempotencyKeyInProgressError) {
    return new HttpProblem("conflict", error.message, {
      extensions: { reason: "idempotency-key-in-progress" },
      headers: { "retry-after": "1" },
    });
  }
  // The message says what failed in the operator's words; the queue URL and SQS's own text are
  // in the cause, logged under the correlation id the problem document carries.
  if (error instanceof ReplaySendError)
    return new HttpProblem("upstreamFailed", error.message, { cause: error });
  const code = (error as { code?: unknown })?.code;
  const status = (error as { statusCode?: unknown })?.statusCode;
  if (status === 404) return new HttpProblem("notFound", "no such route");
  if (status === 405) return new HttpProblem("methodNotAllowed", "this route does not take that method");
  // Validation should refuse everything the database would; if a value slips through, the client
  // still gets a 400 naming the refusal, not a 500 (22: data exception, 23514: a CHECK).
  if (typeof code === "string" && (code.startsWith("22") || code === "23514")) {
    return new HttpProblem("invalidRequest", "the database refused a value of this request", {
      extensions: { sqlstate: code },
      cause: error,
    });
  }
  if (typeof code === "string" && (UNAVAILABLE_SQLSTATE.test(code) || UNAVAILABLE_ERRNO.has(code))) {
    return new HttpProblem("unavailable", "the database is unavailable or busy; try again shortly", {
      headers: { "retry-after": "5" },
      cause: error,
    });
  }
  if (error instanceof Error && /timeout exceeded when trying to connect/i.test(error.message)) {
    // node-postgres' pool reports its connection timeout only by message.
    return new HttpProblem("unavailable", "no database connection was free in time; try again shortly", {
      headers: { "retry-after": "5" },
      cause: error,
    });
  }
  return new HttpProblem("internal", "an internal error occurred; it has been logged", { cause: error });
}

/** Options of {@link problemDetails}. */
export interface ProblemDetailsOptions {
  readonly logger: Logger;
}

export function problemDetails(
  options: ProblemDetailsOptions,
): MiddlewareObj<APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2> {
  const problemDetailsOnError = (request: {
    event: APIGatewayProxyEventV2;
    error: unknown;
    response: APIGatewayProxyStructuredResultV2 | null | undefined;
  }): void => {
    let problem = problemOf(request.error);
    if (problem.status >= 500) {
      // One id in the log entry and in the answer, so an operator's report finds the details.
      const correlationId = request.event.requestContext?.requestId || randomUUID();
      options.logger.error("request failed", {
        path: request.event.rawPath,
        status: problem.status,
        correlation_id: correlationId,
        error: describeError(problem.cause ?? request.error),
      });
      problem = new HttpProblem(problem.kind, problem.message, {
        extensions: { ...problem.extensions, correlation_id: correlationId },
        headers: problem.headers,
        cause: problem.cause,
      });
    }
    request.response = problemResponse(problem, request.event.rawPath);
  };
  return { name: "jobfence-problem-details", onError: problemDetailsOnError };
}
