/**
 * The migration runner. Applies the numbered migrations that a database lacks, set by set and each
 * in its own transaction, recording set, version and checksum in `core.schema_migrations`.
 *
 * Concurrency: runners take a session-level advisory lock before reading the history, so two
 * runners against one database (two deploys, two test workers) apply each migration exactly once
 * and never interleave; the second waits, then finds nothing left to do.
 */
import pg from "pg";
import { MigrationChecksumError, MigrationError, MigrationUnknownError } from "../errors.ts";
import { coreMigrationSet, type Migration, type MigrationSet } from "./migrations.ts";
import { ensureConsumerRole } from "./queries/provision-login.ts";
import { withTransaction } from "./transaction.ts";

/** Options of {@link runMigrations}. */
export interface RunMigrationsOptions {
  /** A connected client; the runner leaves it connected. Or pass `connectionString`. */
  readonly client?: pg.ClientBase;
  /** Used to open (and afterwards close) a client when `client` is not given. */
  readonly connectionString?: string;
  /**
   * The sets to apply, in order.
   * @default [the library's core set]
   */
  readonly sets?: readonly MigrationSet[];
  /**
   * Receives one line per applied migration.
   * @default no output
   */
  readonly log?: (line: string) => void;
}

/** One applied migration. */
export interface AppliedMigration {
  readonly set: string;
  readonly version: number;
  readonly name: string;
}

/** What a run did. */
export interface MigrationReport {
  /** Migrations applied by this run, in order. */
  readonly applied: readonly AppliedMigration[];
  /** How many migrations of the run's sets were already applied before it. */
  readonly alreadyApplied: number;
}

interface AppliedRow {
  migration_set: string;
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
    migration_set text        NOT NULL,
    version       integer     NOT NULL,
    name          text        NOT NULL,
    checksum      text        NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (migration_set, version)
  );
`;

/**
 * Brings the database up to date. Re-running on an up-to-date database is a no-op. Refuses to
 * apply anything when an applied migration was edited (checksum) or when the database has a
 * migration this code does not know.
 */
export async function runMigrations(options: RunMigrationsOptions): Promise<MigrationReport> {
  const sets = options.sets ?? [coreMigrationSet()];
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
        "SELECT migration_set, version, name, checksum FROM core.schema_migrations ORDER BY migration_set, version",
      );
      // Verify every set before applying anything: a refused history stops the whole run.
      const pending = sets.map((set) => ({
        set,
        migrations: verifyHistory(
          set,
          rows.filter((r) => r.migration_set === set.name),
        ),
      }));
      const applied: AppliedMigration[] = [];
      for (const { set, migrations } of pending) {
        // A consumer's set grants its tables to the consumer's group role: make sure it exists (and
        // is registered) first. Every run, so a consumer added to an existing database gets one.
        if (set.consumer !== undefined) await ensureConsumerRole(client, set.consumer);
        for (const migration of migrations) {
          await applyOne(client, set.name, migration);
          applied.push({ set: set.name, version: migration.version, name: migration.name });
          log(`applied migration ${label(set.name, migration)}`);
        }
      }
      const known = new Set(sets.map((s) => s.name));
      return { applied, alreadyApplied: rows.filter((r) => known.has(r.migration_set)).length };
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

/** Checks a set's recorded history against its files and returns the migrations still to apply. */
function verifyHistory(set: MigrationSet, recorded: readonly AppliedRow[]): Migration[] {
  const byVersion = new Map(set.migrations.map((m) => [m.version, m]));
  for (const row of recorded) {
    const migration = byVersion.get(row.version);
    if (!migration) {
      throw new MigrationUnknownError(
        `the database has migration ${set.name}/${String(row.version).padStart(4, "0")}_${row.name}, which ` +
          "this code does not know; it was migrated by a newer version",
      );
    }
    if (migration.checksum !== row.checksum) {
      throw new MigrationChecksumError(
        row.version,
        `${set.name}/${row.name}`,
        row.checksum,
        migration.checksum,
      );
    }
  }
  const done = new Set(recorded.map((r) => r.version));
  return set.migrations.filter((m) => !done.has(m.version));
}

async function applyOne(client: pg.ClientBase, set: string, migration: Migration): Promise<void> {
  try {
    await withTransaction(client, async (tx) => {
      await tx.query(migration.sql);
      await tx.query(
        "INSERT INTO core.schema_migrations (migration_set, version, name, checksum) VALUES ($1, $2, $3, $4)",
        [set, migration.version, migration.name, migration.checksum],
      );
    });
  } catch (error) {
    throw new MigrationError(
      `migration ${label(set, migration)} failed and was rolled back: ${describe(error)}`,
      {
        cause: error,
      },
    );
  }
}

function label(set: string, m: Migration): string {
  return `${set}/${String(m.version).padStart(4, "0")}_${m.name}`;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
