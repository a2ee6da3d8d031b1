/**
 * Typed errors of the jobfence library, every one under {@link JobfenceError}. Behaviour is
 * decided by class (`instanceof`), never by message text. Every error has a stable `name` and may
 * carry the underlying `cause`.
 */
import { PROBLEM, type ProblemKind } from "./http/problem.ts";

/** Root of every error jobfence throws on purpose. */
export class JobfenceError extends Error {
  override name = "JobfenceError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** A migration could not be applied, or the database's migration history disagrees with the code. */
export class MigrationError extends JobfenceError {
  override name = "MigrationError";
}

/** A migration file's name does not follow `NNNN_description.sql`, or two files share a version. */
export class MigrationFileError extends MigrationError {
  override name = "MigrationFileError";
}

/** An applied migration was edited afterwards: its checksum no longer matches the recorded one. */
export class MigrationChecksumError extends MigrationError {
  override name = "MigrationChecksumError";
  /** Version of the edited migration. */
  readonly version: number;
  /** Checksum recorded when it was applied. */
  readonly recorded: string;
  /** Checksum of the file as it is now. */
  readonly actual: string;
  constructor(version: number, migrationName: string, recorded: string, actual: string) {
    super(
      `migration ${String(version).padStart(4, "0")}_${migrationName} was edited after it was applied ` +
        `(recorded checksum ${recorded.slice(0, 12)}…, file now ${actual.slice(0, 12)}…); ` +
        "add a new migration instead of editing an applied one",
    );
    this.version = version;
    this.recorded = recorded;
    this.actual = actual;
  }
}

/** The database records a migration that the code does not have: it is newer than this code. */
export class MigrationUnknownError extends MigrationError {
  override name = "MigrationUnknownError";
}

/** A session that holds the migration runner's lock, as pg_locks and pg_stat_activity show it. */
export interface MigrationLockHolder {
  readonly pid: number | null;
  readonly role: string | null;
  readonly applicationName: string | null;
  /** Whether the holder may be another migration runner (the runner's own role, or a superuser). */
  readonly migrator: boolean;
}

/**
 * The migration runner's lock is held by a session that is no migration runner (any role may take
 * an advisory lock), or by another runner for longer than the runner waits; `holders` names them.
 */
export class MigrationLockError extends MigrationError {
  override name = "MigrationLockError";
  /** The sessions holding the lock. */
  readonly holders: readonly MigrationLockHolder[];
  constructor(message: string, holders: readonly MigrationLockHolder[]) {
    super(message);
    this.holders = holders;
  }
}

/** Configuration was refused at start-up (or synth); `problems` lists every problem found, not just the first. */
export class ConfigurationError extends JobfenceError {
  override name = "ConfigurationError";
  /** One line per problem. */
  readonly problems: readonly string[];
  constructor(subject: string, problems: readonly string[]) {
    super(`invalid ${subject} configuration:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.problems = problems;
  }
}

/**
 * Thrown by a consumer's work for a business rule that will never pass on retry (an unknown
 * account, a closed order): the job is dead-lettered at once with `error_kind = 'hard'`.
 */
export class PermanentJobError extends JobfenceError {
  override name = "PermanentJobError";
}

/** Why a message is poison. */
export const POISON_REASON = {
  /** The body is not JSON. */
  unparseableBody: "unparseable-body",
  /** The body is JSON but not a valid job envelope (docs/design.md §2). */
  invalidEnvelope: "invalid-envelope",
  /** The envelope is valid but its payload fails the consumer's schema. */
  invalidPayload: "invalid-payload",
} as const;

/** One of {@link POISON_REASON}. */
export type PoisonReason = (typeof POISON_REASON)[keyof typeof POISON_REASON];

/** A message that can never be processed as sent: dead-lettered with zero retries (`error_kind = 'poison'`). */
export class PoisonMessageError extends JobfenceError {
  override name = "PoisonMessageError";
  /** Which stage refused the message. */
  readonly reason: PoisonReason;
  constructor(reason: PoisonReason, detail: string) {
    super(`${reason}: ${detail}`);
    this.reason = reason;
  }
}

/** A transient failure on the last allowed attempt: dead-lettered with `error_kind = 'exhausted'`. */
/** Why a transient failure was not retried. */
export const EXHAUSTED_REASON = {
  /** The failure was the last of the policy's attempts. */
  attempts: "attempts",
  /** The backoff would have outlived the message's retention: retrying would lose it. */
  retention: "retention",
  /** The message had used its queue's receives: the next one would move it to the backstop. */
  receiveLimit: "receive-limit",
} as const;
export type ExhaustedReason = (typeof EXHAUSTED_REASON)[keyof typeof EXHAUSTED_REASON];

export class RetriesExhaustedError extends JobfenceError {
  override name = "RetriesExhaustedError";
  /** The attempt on which retries ran out: failed runs of the work, this one included. */
  readonly attempts: number;
  readonly reason: ExhaustedReason;
  constructor(
    attempts: number,
    cause: unknown,
    reason: ExhaustedReason = EXHAUSTED_REASON.attempts,
    detail = "",
  ) {
    super(
      reason === EXHAUSTED_REASON.attempts
        ? `gave up after attempt ${attempts}`
        : reason === EXHAUSTED_REASON.retention
          ? `gave up after attempt ${attempts}: the retry would outlive the message's retention${detail}`
          : `gave up after attempt ${attempts}: the message used its queue's receives${detail}`,
      { cause },
    );
    this.attempts = attempts;
    this.reason = reason;
  }
}

/**
 * A message whose deliveries kept ending without an outcome while its work was in flight (the
 * invocation timed out, crashed or ran out of memory): dead-lettered as `interrupted` so that it
 * stops taking its batch-mates down with it.
 */
export class InterruptedJobError extends JobfenceError {
  override name = "InterruptedJobError";
  readonly interruptions: number;
  constructor(interruptions: number) {
    super(`${interruptions} deliveries ended without an outcome while this record was in flight`);
    this.interruptions = interruptions;
  }
}

/**
 * The fence insert waited `lock_timeout` on the fence of a concurrent, still-open delivery of the
 * same job. Not a failure of the job: the other delivery decides; this one goes back to the queue
 * without costing an attempt.
 */
export class FenceLockTimeoutError extends JobfenceError {
  override name = "FenceLockTimeoutError";
  readonly jobIds: readonly string[];
  constructor(jobIds: readonly string[], cause: unknown) {
    super(
      `another delivery holds the fence of ${jobIds.length === 1 ? `job ${jobIds[0]}` : `${jobIds.length} jobs`}`,
      {
        cause,
      },
    );
    this.jobIds = jobIds;
  }
}

/**
 * The attempt ledger could not be read or written before the work (the database is unreachable):
 * nothing ran, so nothing is counted; the record goes back to its queue.
 */
export class LedgerUnavailableError extends JobfenceError {
  override name = "LedgerUnavailableError";
  constructor(cause: unknown) {
    super("the attempt ledger could not be reached", { cause });
  }
}

/**
 * The invocation's time ran out while the record was running: the harness stopped waiting for it,
 * rolled its transaction back and did nothing more for it.
 */
export class InvocationDeadlineError extends JobfenceError {
  override name = "InvocationDeadlineError";
}

/**
 * COMMIT found the fence transaction already failed and rolled it back: the work caught an error
 * from one of its statements and returned as if it had succeeded. Nothing was applied; transient.
 */
export class TransactionRolledBackError extends JobfenceError {
  override name = "TransactionRolledBackError";
  constructor(command: string | undefined) {
    super(
      `COMMIT answered ${command ?? "nothing"}: a statement of the work failed and the work did not rethrow; nothing was applied`,
    );
  }
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

/**
 * A message found in a backstop queue: it exhausted its receives on the source queue without the
 * harness ever recording an outcome (typically because the database was unreachable throughout).
 * The drain records it with `error_kind = 'unrecorded'`.
 */
export class UnrecordedMessageError extends JobfenceError {
  override name = "UnrecordedMessageError";
}

/**
 * A value that RFC 8785 canonical JSON cannot represent (a function, a bigint, a non-finite number,
 * a cycle…) was asked for a fingerprint: the job cannot be fenced as sent, so it is poison.
 */
export class CanonicalJsonError extends JobfenceError {
  override name = "CanonicalJsonError";
}

/**
 * The work tried to end the fence's transaction (`COMMIT`, `ROLLBACK`, `BEGIN`, …), or changed its
 * role or search_path and did not restore them. A plain transaction control text is refused before
 * it is sent; any other spelling is refused by the server, or ends the transaction, which the
 * server rolls back with the fence (shared/fence/work-transaction.ts). Nothing of the work commits;
 * retrying cannot help, so the job is dead-lettered as `hard`.
 */
export class TransactionControlError extends PermanentJobError {
  override name = "TransactionControlError";
  /** The refused statement, as the work sent it (trimmed to a bound). */
  readonly statement: string;
  constructor(statement: string, why: string, options?: ErrorOptions) {
    const shown = statement.length > 200 ? `${statement.slice(0, 199)}…` : statement;
    super(`the work's transaction refuses ${JSON.stringify(shown)}: ${why}`, options);
    this.statement = shown;
  }
}

/**
 * The work returned while statements it sent were still running (it did not await them): what they
 * do would happen after the work said it was done, outside anything the harness can vouch for. A
 * bug in the work, so never retried.
 */
export class WorkLeftStatementsError extends PermanentJobError {
  override name = "WorkLeftStatementsError";
  constructor(count: number) {
    super(
      `the work returned with ${count} statement(s) still running: await every tx.query before returning`,
    );
  }
}

/**
 * At COMMIT (or the ROLLBACK after a failed work) the harness found that the open transaction is
 * not the one that inserted the fence: something ended it and began another behind the work's
 * `tx`. The harness does not commit it; the job is dead-lettered as `hard` for a person to look at.
 */
export class ForeignTransactionError extends PermanentJobError {
  override name = "ForeignTransactionError";
}

/** SQLSTATE of `core.assert_fence_transaction` (migration 0008). */
export const FOREIGN_TRANSACTION_SQLSTATE = "JF001";

/** The pending row a dead-letter write collided with kept being resolved between its statements. */
export class DeadLetterRaceError extends JobfenceError {
  override name = "DeadLetterRaceError";
  constructor(consumer: string, jobId: string) {
    super(`could not record the dead letter of ${consumer}/${jobId}: its pending row kept changing`);
  }
}

/** EventBridge accepted the PutEvents call but refused the entry. */
export class AlertRejectedError extends JobfenceError {
  override name = "AlertRejectedError";
}

/**
 * One job id, two different jobs (a conflict): the job's fence exists with another fingerprint, so
 * this message is not a repeat of the applied job. Nothing is applied; the message is
 * dead-lettered as `conflict` with both fingerprints, alerted and acked.
 */
export class JobConflictError extends JobfenceError {
  override name = "JobConflictError";
  /** The fingerprint of the job this message carries. */
  readonly jobFingerprint: Buffer;
  /** The fingerprint the fence (or an earlier record of the same batch) recorded. */
  readonly fenceFingerprint: Buffer;
  constructor(jobId: string, jobFingerprint: Buffer, fenceFingerprint: Buffer) {
    super(
      `job ${JSON.stringify(jobId)} was applied with fingerprint ${fenceFingerprint.toString("hex")}; ` +
        `this message carries a different job (fingerprint ${jobFingerprint.toString("hex")})`,
    );
    this.jobFingerprint = jobFingerprint;
    this.fenceFingerprint = fenceFingerprint;
  }
}

/**
 * Replay refused: the dead letter's job id has a fence with another fingerprint, so the row
 * carries a different job than the one applied. Sending it would only record a conflict; the row
 * stays pending for a person to decide.
 */
export class ReplayConflictError extends JobfenceError {
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
export class ReplayQueueRefusedError extends JobfenceError {
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
export class FollowUpProvenanceError extends JobfenceError {
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
export class ReplayOutlivedError extends JobfenceError {
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

/** Why a producer's job was refused before it was sent: what its consumer would have dead-lettered it for. */
export const INVALID_JOB_REASON = {
  /** The envelope (job_id, tenant_id, correlation_id) is not one envelopeSchema accepts. */
  invalidEnvelope: POISON_REASON.invalidEnvelope,
  /** The payload fails the consumer's schema (after the JSON round trip the message makes). */
  invalidPayload: POISON_REASON.invalidPayload,
  /** The job cannot be written as JSON at all (a bigint, a cycle). */
  notJson: "not-json",
} as const;
export type InvalidJobReason = (typeof INVALID_JOB_REASON)[keyof typeof INVALID_JOB_REASON];

/**
 * A job a producer built that its consumer would refuse as poison. Nothing was sent. `issues`
 * lists every problem found as `path: message`.
 */
export class InvalidJobError extends JobfenceError {
  override name = "InvalidJobError";
  readonly reason: InvalidJobReason;
  readonly issues: readonly string[];
  constructor(reason: InvalidJobReason, issues: readonly string[], options?: ErrorOptions) {
    super(`${reason}: ${issues.join("; ")}`, options);
    this.reason = reason;
    this.issues = issues;
  }
}

/**
 * sendJobs refused the whole call before sending anything: a job without a usable job_id or
 * envelope, two jobs under one job_id, a bad option. `problems` names each job at fault by index.
 */
export class SendRefusedError extends JobfenceError {
  override name = "SendRefusedError";
  readonly problems: readonly string[];
  constructor(problems: readonly string[]) {
    super(`nothing was sent:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.problems = problems;
  }
}

/**
 * The work sent a follow-up its consumer cannot send: a target it does not declare in `sends`, a
 * payload the target's schema refuses, a message too large for SQS, two follow-ups under one key.
 * The same work would send it again on every retry, so it is permanent: the job is dead-lettered
 * `hard` and nothing of its transaction (effect or other follow-ups) commits.
 */
export class FollowUpRefusedError extends PermanentJobError {
  override name = "FollowUpRefusedError";
  readonly target: string;
  readonly issues: readonly string[];
  constructor(target: string, issues: readonly string[], options?: ErrorOptions) {
    super(`follow-up to ${JSON.stringify(target)} refused: ${issues.join("; ")}`, options);
    this.target = target;
    this.issues = issues;
  }
}

/** deriveJobId was given a namespace or keys it cannot make a stable, unambiguous job id from. */
export class JobIdDerivationError extends JobfenceError {
  override name = "JobIdDerivationError";
}

/** A bulk operation's plan token that cannot be used: malformed, forged, or for another filter or kind. */
export class InvalidPlanTokenError extends JobfenceError {
  override name = "InvalidPlanTokenError";
}

/** A bulk operation's plan token past its expiry: plan again. */
export class PlanExpiredError extends JobfenceError {
  override name = "PlanExpiredError";
}

/** The set a plan matched has changed since (rows resolved, recorded, or another operation ran): plan again. */
export class PlanStaleError extends JobfenceError {
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
export class ConfirmationRequiredError extends JobfenceError {
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
export class PlanUsedError extends JobfenceError {
  override name = "PlanUsedError";
}

/** A bulk operation whose filter matches no pending dead letter. */
export class NothingMatchedError extends JobfenceError {
  override name = "NothingMatchedError";
}

/** No bulk operation has this id. */
export class OperationNotFoundError extends JobfenceError {
  override name = "OperationNotFoundError";
}

/** A bulk operation that has finished and can no longer be cancelled. */
export class OperationFinishedError extends JobfenceError {
  override name = "OperationFinishedError";
  readonly id: string;
  readonly status: string;
  constructor(id: string, status: string) {
    super(`bulk operation ${id} is ${status}; only a running operation can be cancelled`);
    this.id = id;
    this.status = status;
  }
}

/** A cursor that cannot be used: malformed, edited, or issued for another filter or walk. */
export class InvalidCursorError extends JobfenceError {
  override name = "InvalidCursorError";
}

/** A secret that cannot be used as a login. */
export class LoginSecretError extends JobfenceError {
  override name = "LoginSecretError";
}

/** An SQS event the harness cannot use as given (a record whose queue ARN is not one). */
export class InvalidEventError extends JobfenceError {
  override name = "InvalidEventError";
}

/** The database answered a jobfence function in a way its migration does not allow. */
export class UnexpectedDatabaseAnswerError extends JobfenceError {
  override name = "UnexpectedDatabaseAnswerError";
}

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
