/**
 * Sending jobs: a producer's job its consumer would refuse, a sendJobs call refused whole, a job
 * id that cannot be derived, and a follow-up the work's consumer cannot send.
 */
import { PermanentJobError, POISON_REASON } from "./job.ts";
import { JobfenceError } from "./jobfence-error.ts";

/** Why a producer's job was refused before it was sent: what its consumer would have dead-lettered it for. */
export const INVALID_JOB_REASON = {
  /** The envelope (job_id, tenant_id, correlation_id) is not one envelopeSchema accepts. */
  invalidEnvelope: POISON_REASON.invalidEnvelope,
  /** The payload fails the consumer's schema (after the JSON round trip the message makes). */
  invalidPayload: POISON_REASON.invalidPayload,
  /** The job cannot be written as JSON at all (a bigint, a cycle). */
  notJson: "not-json",
} as const;

/** One of {@link INVALID_JOB_REASON}. */
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
