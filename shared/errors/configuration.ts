/** Configuration refused: at start-up, at synth, or in the event a function is given. */
import { JobfenceError } from "./jobfence-error.ts";

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
 * A user's Middy chain that runs jobfence's steps out of order, omits one, mixes two consumers'
 * middlewares or hands a step a record context jobfence did not make: the deployment's bug, not the
 * message's. The record fails and stays in the queue; nothing is dead-lettered or counted for it.
 */
export class RecordChainError extends ConfigurationError {
  override name = "RecordChainError";
  constructor(problem: string) {
    super("record chain", [problem]);
  }
}

/** An SQS event the harness cannot use as given (a record whose queue ARN is not one). */
export class InvalidEventError extends JobfenceError {
  override name = "InvalidEventError";
}
