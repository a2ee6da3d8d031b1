/**
 * Bulk operations over dead letters, under BulkOperationError: their plans and tokens, and the
 * operations themselves.
 */
import { JobfenceError } from "./jobfence-error.ts";

/** A bulk operation that cannot be planned, started or cancelled as asked. */
export class BulkOperationError extends JobfenceError {
  override name = "BulkOperationError";
}

/** A bulk operation's plan token that cannot be used: malformed, forged, or for another filter or kind. */
export class InvalidPlanTokenError extends BulkOperationError {
  override name = "InvalidPlanTokenError";
}

/** A bulk operation's plan token past its expiry: plan again. */
export class PlanExpiredError extends BulkOperationError {
  override name = "PlanExpiredError";
}

/**
 * A plan token sealed under another signing key: a plan made before the local stack restarted (it
 * makes its key at start) or before the deployment's key was rotated. Refused as any token this API
 * cannot verify, with what happened and what to do: plan again.
 */
export class PlanFromEarlierKeyError extends InvalidPlanTokenError {
  override name = "PlanFromEarlierKeyError";
}

/** The set a plan matched has changed since (rows resolved, recorded, or another operation ran): plan again. */
export class PlanStaleError extends BulkOperationError {
  override name = "PlanStaleError";
  readonly planned: number;
  readonly matched: number;
  constructor(planned: number, matched: number) {
    super(
      `the matched set changed since the plan (planned ${planned}, ${matched} match now); plan again and confirm the new set`,
    );
    this.planned = planned;
    this.matched = matched;
  }
}

/** A bulk operation over a large set, or over every pending dead letter, started without its plan's token. */
export class ConfirmationRequiredError extends BulkOperationError {
  override name = "ConfirmationRequiredError";
  readonly matched: number;
  readonly pendingTotal: number;
  readonly confirmAbove: number;
  constructor(matched: number, pendingTotal: number, confirmAbove: number) {
    super(
      matched === pendingTotal
        ? `this filter matches every pending dead letter (${matched}); plan it and start it with the plan's token`
        : `this filter matches ${matched} pending dead letters (more than ${confirmAbove}); plan it and start it with the plan's token`,
    );
    this.matched = matched;
    this.pendingTotal = pendingTotal;
    this.confirmAbove = confirmAbove;
  }
}

/** A plan token that has already started a bulk operation: each plan starts one at most. */
export class PlanUsedError extends BulkOperationError {
  override name = "PlanUsedError";
}

/** A bulk operation whose filter matches no pending dead letter. */
export class NothingMatchedError extends BulkOperationError {
  override name = "NothingMatchedError";
}

/** No bulk operation has this id. */
export class OperationNotFoundError extends BulkOperationError {
  override name = "OperationNotFoundError";
}

/** A bulk operation that has finished and can no longer be cancelled. */
export class OperationFinishedError extends BulkOperationError {
  override name = "OperationFinishedError";
  readonly id: string;
  readonly status: string;
  constructor(id: string, status: string) {
    super(`bulk operation ${id} is ${status}; only a running operation can be cancelled`);
    this.id = id;
    this.status = status;
  }
}

/**
 * A bulk operation of the same kind and filter is running: a second one would walk the same rows.
 * `operationId` names it; undefined only when it finished just as this start was refused.
 */
export class OperationRunningError extends BulkOperationError {
  override name = "OperationRunningError";
  readonly operationId: string | undefined;
  constructor(operationId: string | undefined) {
    super(
      operationId === undefined
        ? "a bulk operation of this kind and filter was running; try again"
        : `bulk operation ${operationId} of this kind and filter is running; follow it, or cancel it before starting another`,
    );
    this.operationId = operationId;
  }
}
