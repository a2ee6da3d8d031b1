/**
 * Runs a POST of the API at most once per `Idempotency-Key` (docs/api.md "Idempotency-Key"): claims
 * the key, runs the route, records its successful response on the claim, or releases the claim when
 * it fails; a repeat finds the recorded response, a refusal, or a claim still in progress.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import type pg from "pg";
import {
  claimIdempotencyKey,
  completeIdempotencyKey,
  type KeyedRequest,
  readIdempotencyKey,
  releaseIdempotencyKey,
} from "../../shared/db/queries/idempotency-keys.ts";
import { deadLetterIdSchema } from "../../shared/dead-letters/api-schemas.ts";
import { IDEMPOTENCY, repeatOutcome, requestDigest } from "../../shared/dead-letters/idempotency.ts";
import { IdempotencyKeyInProgressError, IdempotencyKeyReusedError } from "../../shared/errors/idempotency.ts";
import { describeError } from "../../shared/errors/last-error.ts";
import { parseJsonBody, parsePathParameter } from "../../shared/http/request.ts";
import type { RouteSpec } from "./routes.ts";

/** A route's answer: its status and its body as sent. */
export interface RouteAnswer {
  readonly status: number;
  readonly body: string;
  /** Given again for a repeat under the same key. */
  readonly replayed: boolean;
}

/**
 * The digest of the request `event` makes to `route`: its method, its path with the validated id,
 * its validated body. Validation refuses a bad request here (400) before any key is claimed.
 */
export function routeRequestDigest(route: RouteSpec, event: APIGatewayProxyEventV2): Buffer {
  const path = route.hasId
    ? route.path.replace("{id}", parsePathParameter(event, "id", deadLetterIdSchema))
    : route.path;
  const body = route.body ? parseJsonBody(event, route.body) : undefined;
  return requestDigest(route.method, path, body);
}

/** Claims tried while the row found keeps going away (released, expired, taken over) before it is read. */
const CLAIM_ATTEMPTS = 3;

/** Answers `request` once: runs `run` under a claim, or answers a repeat from the key's row. */
export async function answerOnce(
  pool: pg.Pool,
  request: KeyedRequest,
  run: () => Promise<{ status: number; body: string }>,
  logger: Logger,
): Promise<RouteAnswer> {
  const stale = IDEMPOTENCY.staleAfterSeconds;
  for (let attempt = 0; attempt < CLAIM_ATTEMPTS; attempt++) {
    const claim = await claimIdempotencyKey(pool, request, stale);
    if (claim !== undefined) {
      let answer: { status: number; body: string };
      try {
        answer = await run();
      } catch (error) {
        // Only a success is kept: a retry after a failure is evaluated afresh. A release that fails
        // leaves the claim to be taken over once it is stale.
        await releaseIdempotencyKey(pool, request.actor, request.key, claim).catch((releaseError) =>
          logger.warn("idempotency key not released", { error: describeError(releaseError) }),
        );
        throw error;
      }
      // The work is done and answered whatever happens to the record: a record that fails leaves
      // the claim unanswered, and a repeat after it is stale runs again, where the operation's own
      // guards (a dead letter no longer pending, an operation running) answer it.
      await completeIdempotencyKey(pool, request.actor, request.key, claim, answer).catch((error) =>
        logger.warn("idempotency key response not recorded", { error: describeError(error) }),
      );
      return { ...answer, replayed: false };
    }
    const stored = await readIdempotencyKey(pool, request.actor, request.key, stale);
    if (stored === undefined) continue;
    switch (repeatOutcome(stored, request.digest)) {
      case "replay":
        return {
          status: stored.response_status as number,
          body: stored.response_body as string,
          replayed: true,
        };
      case "reused":
        throw new IdempotencyKeyReusedError(stored.operation);
      case "in-progress":
        throw new IdempotencyKeyInProgressError();
      case "claim":
        continue;
    }
  }
  throw new IdempotencyKeyInProgressError();
}
