/**
 * What can go wrong in a job's steps (shared/steps/) that retrying cannot fix: each is a
 * PermanentJobError, so the job is dead-lettered at once (`error_kind = 'hard'`), and its dead letter
 * shows the steps already recorded.
 */
import { PermanentJobError } from "./job.ts";
import { JobfenceError } from "./jobfence-error.ts";

/** A step the definition names or orders wrongly: a bad name, or one name used twice in a job. */
export class StepDefinitionError extends PermanentJobError {
  override name = "StepDefinitionError";
}

/**
 * A step's answer that cannot be recorded: its schema refuses it, it has no JSON form the schema
 * accepts again, or it is larger than a step records. The provider may have acted: the message
 * names the step and its key, so an operator can look it up there.
 */
export class StepResultError extends PermanentJobError {
  override name = "StepResultError";
  /** The step's name. */
  readonly step: string;
  constructor(step: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.step = step;
  }
}

/** A step's call failed in a way its `permanent` setting declares retrying cannot fix (a provider's 4xx). */
export class PermanentStepError extends PermanentJobError {
  override name = "PermanentStepError";
  /** The step's name. */
  readonly step: string;
  constructor(step: string, cause: unknown) {
    const why = cause instanceof Error ? cause.message : String(cause);
    super(`step ${JSON.stringify(step)} failed for good: ${why}`, { cause });
    this.step = step;
  }
}

/**
 * A step that was called and whose answer was never recorded (its delivery died between the call
 * and the checkpoint), found again after the provider has forgotten its key: calling again could
 * act twice. A person looks the key up at the provider: if it acted, what the job was for happened
 * there (compensate or complete by hand, then discard); if not, discard and send the job anew under
 * a new job id.
 */
export class StepOutcomeUnknownError extends PermanentJobError {
  override name = "StepOutcomeUnknownError";
  /** The step's name. */
  readonly step: string;
  /** The key the provider was given. */
  readonly key: string;
  constructor(step: string, key: string, ageSeconds: number, lifetimeSeconds: number) {
    super(
      `step "${step}" was called ${Math.round(ageSeconds)} s ago with key ${key} and its answer never recorded; ` +
        `the provider keeps a key for ${lifetimeSeconds} s, so calling again could act twice: look the key up at the provider`,
    );
    this.step = step;
    this.key = key;
  }
}

/**
 * A job's steps found its fence and ran nothing, and by the time its fence transaction began the
 * fence was gone (it expired and the cleanup took it): transient, the record is tried again and its
 * steps then run.
 */
export class StepsFenceGoneError extends JobfenceError {
  override name = "StepsFenceGoneError";
  constructor(jobId: string) {
    super(
      `job ${JSON.stringify(jobId)}: its fence was found before its steps and was gone at its fence transaction`,
    );
  }
}
