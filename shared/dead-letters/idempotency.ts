/**
 * The API's `Idempotency-Key` (docs/api.md): the header read and validated, the digest that
 * identifies a request, and what a repeat gets. Pure; the claims themselves are
 * functions/dead-letters-api/idempotent.ts, the statements shared/db/queries/idempotency-keys.ts.
 *
 * Like a payment gateway's: a key is the caller's own; the first request under it is recorded with
 * a digest of what it asked; a repeat of that request gets the first (successful) response again;
 * another request under the key is refused; a repeat while the first runs is told to retry later.
 */
import { createHash } from "node:crypto";
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import { canonicalJson } from "../envelope/canonical-json.ts";
import { HttpProblem } from "../errors/http.ts";
import { headerOf } from "../http/request.ts";
import { idempotencyKeySchema } from "./api-schemas.ts";

export const IDEMPOTENCY = Object.freeze({
  /** The request header. */
  header: "Idempotency-Key",
  /** The response header of an answer given again: its value is `true`. */
  replayedHeader: "Idempotent-Replayed",
  /** How long a key is kept after its first request (migration 0028 fixes it too). */
  lifetimeHours: 24,
  /**
   * An unanswered claim older than this is taken to belong to a process that died, and the same
   * request may take it over. The API function stops at 29 seconds (API Gateway at 30); a minute
   * leaves room for a statement the database is still finishing for a process that is gone.
   */
  staleAfterSeconds: 60,
});

/** The request's `Idempotency-Key`, validated; undefined when none was sent. */
export function idempotencyKeyOf(event: APIGatewayProxyEventV2): string | undefined {
  const value = headerOf(event, IDEMPOTENCY.header);
  if (value === undefined) return undefined;
  const result = idempotencyKeySchema.safeParse(value);
  if (result.success) return result.data;
  const message = result.error.issues.map((issue) => issue.message).join("; ");
  throw new HttpProblem("invalidRequest", `invalid header ${IDEMPOTENCY.header}: ${message}`, {
    extensions: { errors: [{ location: "header", field: IDEMPOTENCY.header, message }] },
  });
}

/**
 * What identifies a request under a key: SHA-256 of the canonical JSON of its method, its path (the
 * route's, with the validated id) and its body as validated (defaults filled in). Two requests that
 * validate to the same thing are the same request, however their JSON was spelled.
 */
export function requestDigest(method: string, path: string, body: unknown): Buffer {
  return createHash("sha256")
    .update(canonicalJson([method, path, body ?? null]), "utf8")
    .digest();
}

/** A key's stored state as a repeat finds it. */
export interface StoredKey {
  readonly request_digest: Buffer;
  readonly response_status: number | null;
  readonly live: boolean;
  readonly stale: boolean;
}

/**
 * What a request finds under its key when it could not claim it:
 * - `claim`: the row expired or was abandoned since; claim again;
 * - `reused`: the key was first used for another request;
 * - `replay`: the same request was answered; answer it again;
 * - `in-progress`: the same request is running now.
 */
export function repeatOutcome(
  stored: StoredKey,
  digest: Buffer,
): "claim" | "reused" | "replay" | "in-progress" {
  if (!stored.live) return "claim";
  if (!stored.request_digest.equals(digest)) return "reused";
  if (stored.response_status !== null) return "replay";
  return stored.stale ? "claim" : "in-progress";
}
