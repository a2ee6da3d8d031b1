/**
 * Requests sent with an `Idempotency-Key` that cannot be run or answered as asked, under
 * IdempotencyKeyError.
 */
import { JobfenceError } from "./jobfence-error.ts";

/** A request whose `Idempotency-Key` cannot be honoured. */
export class IdempotencyKeyError extends JobfenceError {
  override name = "IdempotencyKeyError";
}

/**
 * The key was first used, by the same caller and within its lifetime, for another request (another
 * route, dead letter or body): the first request keeps it.
 */
export class IdempotencyKeyReusedError extends IdempotencyKeyError {
  override name = "IdempotencyKeyReusedError";
  /** The route (operationId) the key was first used on. */
  readonly firstUsedFor: string;
  constructor(firstUsedFor: string) {
    super(
      `this Idempotency-Key was first used for another request (${firstUsedFor}, another target or body); use a new key for a new request`,
    );
    this.firstUsedFor = firstUsedFor;
  }
}

/** The first request under the key is still running: its answer is not known yet. */
export class IdempotencyKeyInProgressError extends IdempotencyKeyError {
  override name = "IdempotencyKeyInProgressError";
  constructor() {
    super("a request with this Idempotency-Key is still in progress; retry later to receive its response");
  }
}
