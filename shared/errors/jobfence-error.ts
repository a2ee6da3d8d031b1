/**
 * The root of every error jobfence throws on purpose. Behaviour is decided by class
 * (`instanceof`), never by message text; every error has a stable `name` and may carry the
 * underlying `cause`. The errors of each concept stand in a file of their own beside this one.
 */

/** Root of every error jobfence throws on purpose. */
export class JobfenceError extends Error {
  override name = "JobfenceError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}
