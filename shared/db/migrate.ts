/**
 * The migration runner. Applies the numbered migrations that a database lacks, each in its own
 * transaction, recording version and checksum in `core.schema_migrations`.
 *
 * Concurrency: runners take a session-level advisory lock before reading the history, so two
 * runners against one database (two deploys, two test workers) apply each migration exactly once
 * and never interleave; the second waits, then finds nothing left to do.
 */
import pg from "pg";
import { MigrationChecksumError, MigrationError, MigrationUnknownError } from "../errors.ts";
import { loadMigrations, type Migration } from "./migrations.ts";

/** Options of {@link runMigrations}. */
export interface RunMigrationsOptions {
  /** A connected client; the runner leaves it connected. Or pass `connectionString`. */
  readonly client?: pg.ClientBase;
  /** Used to open (and afterwards close) a client when `client` is not given. */
  readonly connectionString?: string;
  /**
   * The migrations to apply.
   * @default the library's own, from `shared/db/migrations/`
   */
  readonly migrations?: readonly Migration[];
  /**
   * Receives one line per applied migration.
   * @default no output
   */
  readonly log?: (line: string) => void;
}

/** What a run did. */
export interface MigrationReport {
  /** Versions applied by this run, in order. */
  readonly applied: readonly number[];
  /** How many migrations were already applied before this run. */
  readonly alreadyApplied: number;
}

interface AppliedRow {
  version: number;
  name: string;
  checksum: string;
}

// The key is computed server-side from a name, so it is stable and does not collide with the
// small integers other tools tend to use for their own advisory locks.
const LOCK = "SELECT pg_advisory_lock(hashtextextended('jobfence.migrate', 0))";
const UNLOCK = "SELECT pg_advisory_unlock(hashtextextended('jobfence.migrate', 0))";

const BOOTSTRAP = `
  CREATE SCHEMA IF NOT EXISTS core;
  CREATE TABLE IF NOT EXISTS core.schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
  );
`;

/**
 * Brings the database up to date. Re-running on an up-to-date database is a no-op. Refuses to
 * apply anything when an applied migration was edited (checksum) or when the database has a
 * migration this code does not know.
 */
export async function runMigrations(options: RunMigrationsOptions): Promise<MigrationReport> {
  const migrations = options.migrations ?? loadMigrations();
  const log = options.log ?? (() => {});
  const owned = options.client ? undefined : new pg.Client({ connectionString: options.connectionString });
  const client = options.client ?? (owned as pg.Client);
  if (owned) await owned.connect();
  try {
    await client.query(LOCK);
    let failed = false;
    try {
      await client.query(BOOTSTRAP);
      const { rows } = await client.query<AppliedRow>(
        "SELECT version, name, checksum FROM core.schema_migrations ORDER BY version",
      );
      const pending = verifyHistory(migrations, rows);
      const applied: number[] = [];
      for (const migration of pending) {
        await applyOne(client, migration);
        applied.push(migration.version);
        log(`applied migration ${label(migration)}`);
      }
      return { applied, alreadyApplied: rows.length };
    } catch (error) {
      failed = true;
      throw error;
    } finally {
      // On a broken connection the unlock fails too; the lock dies with the session, and the
      // original error is the one worth reporting.
      await client.query(UNLOCK).catch((unlockError: unknown) => {
        if (!failed) throw unlockError;
      });
    }
  } finally {
    if (owned) await owned.end();
  }
}

/** Checks the recorded history against the files and returns the migrations still to apply. */
function verifyHistory(migrations: readonly Migration[], recorded: readonly AppliedRow[]): Migration[] {
  const byVersion = new Map(migrations.map((m) => [m.version, m]));
  for (const row of recorded) {
    const migration = byVersion.get(row.version);
    if (!migration) {
      throw new MigrationUnknownError(
        `the database has migration ${String(row.version).padStart(4, "0")}_${row.name}, which this code ` +
          "does not know; it was migrated by a newer version",
      );
    }
    if (migration.checksum !== row.checksum) {
      throw new MigrationChecksumError(row.version, row.name, row.checksum, migration.checksum);
    }
  }
  const done = new Set(recorded.map((r) => r.version));
  return migrations.filter((m) => !done.has(m.version));
}

async function applyOne(client: pg.ClientBase, migration: Migration): Promise<void> {
  await client.query("BEGIN");
  try {
    await client.query(migration.sql);
    await client.query("INSERT INTO core.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)", [
      migration.version,
      migration.name,
      migration.checksum,
    ]);
    await client.query("COMMIT");
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {
      // The connection is gone; the transaction died with it.
    });
    throw new MigrationError(`migration ${label(migration)} failed and was rolled back: ${describe(error)}`, {
      cause: error,
    });
  }
}

function label(m: Migration): string {
  return `${String(m.version).padStart(4, "0")}_${m.name}`;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
