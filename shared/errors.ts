/**
 * Typed errors of the jobfence library. Behaviour is decided by class (`instanceof`), never by
 * message text. Every error has a stable `name` and may carry the underlying `cause`.
 */

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
