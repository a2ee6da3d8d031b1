/** The migration runner's errors, under MigrationError. */
import { JobfenceError } from "./jobfence-error.ts";

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
  constructor(version: number, migrationName: string, recorded: string, actual: string, set?: string) {
    const file = `${set === undefined ? "" : `${set}/`}${String(version).padStart(4, "0")}_${migrationName}`;
    super(
      `migration ${file} was edited after it was applied ` +
        `(recorded checksum ${recorded.slice(0, 12)}…, file now ${actual.slice(0, 12)}…); ` +
        (set === "core"
          ? "jobfence's own migrations are never edited once released: this installation's copy of them differs from the one that migrated the database (a modified package, or one built from unreleased sources)"
          : "add a new migration instead of editing an applied one"),
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
