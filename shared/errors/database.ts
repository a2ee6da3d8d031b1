/**
 * The database and its logins: a secret that is no usable login, an answer a migration does not
 * allow.
 */
import { JobfenceError } from "./jobfence-error.ts";

/** A secret that cannot be used as a login. */
export class LoginSecretError extends JobfenceError {
  override name = "LoginSecretError";
}

/** The database answered a jobfence function in a way its migration does not allow. */
export class UnexpectedDatabaseAnswerError extends JobfenceError {
  override name = "UnexpectedDatabaseAnswerError";
}
