/**
 * The ops API's errors: the problems it reports, by kind, and the error answered with one
 * (shared/http/problem.ts renders it as application/problem+json).
 */
import { JobfenceError } from "./jobfence-error.ts";

/** The problems the API reports, by slug: status and a title that does not change per occurrence. */
export const PROBLEM = {
  invalidRequest: { status: 400, title: "The request is not valid" },
  unauthenticated: { status: 401, title: "A valid bearer token is required" },
  forbidden: { status: 403, title: "The token lacks the permission this operation requires" },
  notFound: { status: 404, title: "No such resource" },
  methodNotAllowed: { status: 405, title: "Method not allowed" },
  conflict: { status: 409, title: "The dead letter's state does not allow this operation" },
  contentTooLarge: { status: 413, title: "The request body is too large" },
  headersTooLarge: { status: 431, title: "The request line and headers are too large" },
  unsupportedMediaType: { status: 415, title: "The body must be application/json" },
  idempotencyKeyReused: { status: 422, title: "The Idempotency-Key was first used for another request" },
  confirmationRequired: { status: 428, title: "This operation needs the confirmation token of its plan" },
  upstreamFailed: { status: 502, title: "A downstream service refused the operation" },
  unavailable: { status: 503, title: "The service is temporarily unavailable" },
  internal: { status: 500, title: "Internal error" },
} as const;

/** One of {@link PROBLEM}'s keys. */
export type ProblemKind = keyof typeof PROBLEM;

/** An error that is answered with a problem document. */
export class HttpProblem extends JobfenceError {
  override name = "HttpProblem";
  readonly kind: ProblemKind;
  readonly status: number;
  /** Extension members (e.g. `errors` with the fields that failed validation). */
  readonly extensions: Record<string, unknown>;
  /** Extra response headers (e.g. WWW-Authenticate on a 401). */
  readonly headers: Record<string, string>;
  constructor(
    kind: ProblemKind,
    detail: string,
    options: { extensions?: Record<string, unknown>; headers?: Record<string, string>; cause?: unknown } = {},
  ) {
    super(detail, { cause: options.cause });
    this.kind = kind;
    this.status = PROBLEM[kind].status;
    this.extensions = options.extensions ?? {};
    this.headers = options.headers ?? {};
  }
}
