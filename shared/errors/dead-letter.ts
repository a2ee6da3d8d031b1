/**
 * Dead letters and their replay: a row that is not there or not pending, a write that kept
 * colliding, a send that failed, a list cursor that cannot be used, and the replays refused
 * (under ReplayRefusedError) before anything was sent.
 */
import { JobfenceError } from "./jobfence-error.ts";

/** A replay refused before anything was sent: the dead letter stays pending for a person to decide. */
export class ReplayRefusedError extends JobfenceError {
  override name = "ReplayRefusedError";
}

/** No dead letter has the requested id. */
export class DeadLetterNotFoundError extends JobfenceError {
  override name = "DeadLetterNotFoundError";
  constructor(id: string) {
    super(`no dead letter has id ${id}`);
  }
}

/** The dead letter is no longer pending_review: it was replayed, discarded or superseded already. */
export class DeadLetterConflictError extends JobfenceError {
  override name = "DeadLetterConflictError";
  /** The status it has now. */
  readonly status: string;
  constructor(id: string, status: string) {
    super(`dead letter ${id} is ${status}, not pending_review`);
    this.status = status;
  }
}

/** SQS refused or could not be reached for a replay; the dead letter stays pending. */
export class ReplaySendError extends JobfenceError {
  override name = "ReplaySendError";
}

/** The pending row a dead-letter write collided with kept being resolved between its statements. */
export class DeadLetterRaceError extends JobfenceError {
  override name = "DeadLetterRaceError";
  constructor(consumer: string, jobId: string) {
    super(`could not record the dead letter of ${consumer}/${jobId}: its pending row kept changing`);
  }
}

/**
 * Replay refused: the dead letter's job id has a fence with another fingerprint, so the row
 * carries a different job than the one applied. Sending it would only record a conflict; the row
 * stays pending for a person to decide.
 */
export class ReplayConflictError extends ReplayRefusedError {
  override name = "ReplayConflictError";
  constructor(id: string, jobId: string) {
    super(
      `dead letter ${id} carries a different job than the one applied under job id ${JSON.stringify(jobId)}; ` +
        "replaying it would be a conflict, so nothing was sent",
    );
  }
}

/**
 * A dead letter that names a queue not registered for its consumer (core.consumer_roles.queues,
 * migration 0014). The consumer wrote the row, so the queue is its word alone: sending there could
 * hand its body to another consumer. Nothing was sent; the row stays pending.
 */
export class ReplayQueueRefusedError extends ReplayRefusedError {
  override name = "ReplayQueueRefusedError";
  constructor(id: string, consumer: string) {
    super(
      `dead letter ${id} names a queue that is not registered for consumer ${JSON.stringify(consumer)}, ` +
        "so it was not sent; discard it, or re-send the job to the consumer's own queue",
    );
  }
}

/**
 * A replay of an undelivered follow-up whose provenance fails (core.follow_up_fault, migration 0019):
 * its sender does not declare its consumer as a follow-up target, its job id is not the one
 * deriveJobId gives for its sender, parent and key, its body carries another job, or it names no
 * sender at all. Another consumer could have forged it, and a replay would deliver it with the
 * operator's rights: nothing was sent; the row stays pending.
 */
export class FollowUpProvenanceError extends ReplayRefusedError {
  override name = "FollowUpProvenanceError";
  /** The sending consumer the dead letter names, if any. */
  readonly sender: string | null;
  /** Why its provenance fails, as the database says. */
  readonly fault: string;
  constructor(id: string, sender: string | null, fault: string) {
    super(
      `dead letter ${id} is an undelivered follow-up${sender === null ? "" : ` of ${JSON.stringify(sender)}`} ` +
        `whose provenance fails (${fault}), so it was not sent; discard it, or have its sender send the job again`,
    );
    this.sender = sender;
    this.fault = fault;
  }
}

/**
 * A replay of an `outlived` dead letter without the operator's forced override (migration 0021,
 * docs/design.md §7.2): a copy older than its job's fence lifetime, and the job has no fence, so
 * the job may have been applied and its fence cleaned; sending it could apply it twice. Nothing was
 * sent; the row stays pending.
 */
export class ReplayOutlivedError extends ReplayRefusedError {
  override name = "ReplayOutlivedError";
  /** The dead letter's job id. */
  readonly jobId: string;
  /** When its copy was first sent, as the database recorded it (ISO 8601), or null when unknown. */
  readonly copySentAt: string | null;
  constructor(id: string, jobId: string, copySentAt: string | null) {
    super(
      `dead letter ${id} is outlived: its copy of job ${JSON.stringify(jobId)} was first sent ` +
        `${copySentAt === null ? "at an unknown time" : `at ${copySentAt}`}, longer ago than the fence lifetime of its consumer, ` +
        "and the job has no fence, so it may have been applied already and its fence cleaned; nothing was sent. " +
        'Check the job\'s effect in the consumer\'s own records, then replay with {"force_outlived": true, "reason": "…"} ' +
        "if it was not applied, or discard it",
    );
    this.jobId = jobId;
    this.copySentAt = copySentAt;
  }
}

/**
 * A send SQS could not take at all for a reason that may pass (throttling, a 5xx, the network): a
 * bulk operation's chunk is retried later rather than its rows marked failed.
 */
export class TransientSendError extends JobfenceError {
  override name = "TransientSendError";
}

/** A cursor that cannot be used: malformed, edited, or issued for another filter or walk. */
export class InvalidCursorError extends JobfenceError {
  override name = "InvalidCursorError";
}
