/**
 * The migration runner. Applies the numbered migrations that a database lacks, set by set and each
 * in its own transaction, recording set, version and checksum in `core.schema_migrations`.
 *
 * Concurrency: runners take a session-level advisory lock before reading the history, so two
 * runners against one database (two deploys, two test workers) apply each migration exactly once
 * and never interleave; the second waits, then finds nothing left to do.
 *
 * Any role may take any advisory lock, a consumer's login included (and on an empty database, a
 * login of another database of the cluster: CONNECT is PUBLIC's by default). So the runner never
 * queues on the lock blindly: it tries it, and while it is taken it looks the holders up
 * (pg_locks, pg_stat_activity). A holder that cannot be a runner (neither the runner's role nor a
 * superuser) fails the run at once with a MigrationLockError naming its pid, role and
 * application_name; another runner is waited for, up to `lockWaitMs`, then named the same way.
 */
import pg from "pg";
import {
  MigrationChecksumError,
  MigrationError,
  MigrationLockError,
  type MigrationLockHolder,
  MigrationUnknownError,
} from "../errors/migration.ts";
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
   * Consumers whose group roles (`consumerRoleName`) are ensured after the sets are applied: a
   * consumer with no migration set of its own, whose tables the service's migration tool makes and
   * grants to that role. A consumer with a set has its role ensured before its set anyway.
   * @default none
   */
  readonly consumers?: readonly string[];
  /**
   * Receives one line per applied migration.
   * @default no output
   */
  readonly log?: (line: string) => void;
  /**
   * How long to wait for another migration runner that holds the lock before failing, naming it.
   * A holder that is no runner fails the run at once.
   * @default 600000 (ten minutes)
   */
  readonly lockWaitMs?: number;
  /**
   * How long one migration may wait for a lock on an object it changes (PostgreSQL's `lock_timeout`,
   * for its transaction) before it fails, naming the sessions that hold locks on the `core` tables.
   * Any session with a table of `core` open in a transaction (a consumer's, idle in its
   * transaction) would otherwise stall the migration without end, and every session queued behind it.
   * @default 30000 (thirty seconds)
   */
  readonly migrationLockTimeoutMs?: number;
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
  /** The group roles ensured for {@link RunMigrationsOptions.consumers}, in order. */
  readonly consumerRoles: readonly string[];
}

interface AppliedRow {
  migration_set: string;
  version: number;
  name: string;
  checksum: string;
}

// The key is computed server-side from a name, so it is stable and does not collide with the
// small integers other tools tend to use for their own advisory locks.
const TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended('jobfence.migrate', 0)) AS locked";
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
    await acquireLock(client, options.lockWaitMs ?? 600_000);
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
          await applyOne(client, set.name, migration, options.migrationLockTimeoutMs ?? 30_000);
          applied.push({ set: set.name, version: migration.version, name: migration.name });
          log(`applied migration ${label(set.name, migration)}`);
        }
      }
      // Under the runner's lock, so two runners never race to create one role.
      const consumerRoles: string[] = [];
      for (const consumer of options.consumers ?? []) {
        consumerRoles.push(await ensureConsumerRole(client, consumer));
      }
      const known = new Set(sets.map((s) => s.name));
      return {
        applied,
        alreadyApplied: rows.filter((r) => known.has(r.migration_set)).length,
        consumerRoles,
      };
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

// A bigint advisory key shows in pg_locks as classid (high 32 bits), objid (low 32 bits), objsubid 1.
// Reads only catalogs and views every role may read, so it works before `core` exists.
const HOLDERS = `
  WITH k AS (SELECT hashtextextended('jobfence.migrate', 0) AS key)
  SELECT l.pid, a.usename::text AS role, a.application_name AS "applicationName",
         -- A session whose role cannot be seen (a backend still starting) is waited for, as a runner's.
         coalesce(a.usename = current_user OR r.rolsuper, a.usename IS NULL) AS migrator
    FROM k, pg_locks AS l
    LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
    LEFT JOIN pg_roles AS r ON r.oid = a.usesysid
   WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
     AND l.classid = ((k.key >> 32) & 4294967295)::oid AND l.objid = (k.key & 4294967295)::oid
     AND l.pid IS DISTINCT FROM pg_backend_pid()
   ORDER BY l.pid`;

const POLL_MS = 100;

/** Takes the runner's lock, or fails naming who holds it (see the module comment). */
async function acquireLock(client: pg.ClientBase, waitMs: number): Promise<void> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const { rows } = await client.query<{ locked: boolean }>(TRY_LOCK);
    if (rows[0]?.locked) return;
    const holders = (await client.query<MigrationLockHolder>(HOLDERS)).rows;
    const foreign = holders.filter((h) => !h.migrator);
    if (foreign.length > 0) {
      throw new MigrationLockError(
        `the migration lock (pg_advisory_lock(hashtextextended('jobfence.migrate', 0))) is held by ${describeHolders(foreign)}, ` +
          "which is no migration runner: end that session (pg_terminate_backend) and run the migrations again",
        holders,
      );
    }
    if (Date.now() >= deadline) {
      throw new MigrationLockError(
        `another migration runner has held the migration lock for more than ${waitMs} ms: ${describeHolders(holders)}`,
        holders,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

function describeHolders(holders: readonly MigrationLockHolder[]): string {
  return holders.length === 0
    ? "a session that let it go meanwhile"
    : holders
        .map(
          (h) => `pid ${h.pid ?? "?"} (role ${h.role ?? "?"}, application_name '${h.applicationName ?? ""}')`,
        )
        .join(", ");
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
      throw new MigrationChecksumError(row.version, row.name, row.checksum, migration.checksum, set.name);
    }
  }
  const done = new Set(recorded.map((r) => r.version));
  return set.migrations.filter((m) => !done.has(m.version));
}

async function applyOne(
  client: pg.ClientBase,
  set: string,
  migration: Migration,
  lockTimeoutMs: number,
): Promise<void> {
  try {
    await withTransaction(client, async (tx) => {
      await tx.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.floor(lockTimeoutMs))}`);
      await tx.query(migration.sql);
      await tx.query(
        "INSERT INTO core.schema_migrations (migration_set, version, name, checksum) VALUES ($1, $2, $3, $4)",
        [set, migration.version, migration.name, migration.checksum],
      );
    });
  } catch (error) {
    if ((error as { code?: string }).code === LOCK_NOT_AVAILABLE) {
      const holders = (await client.query<MigrationLockHolder>(TABLE_LOCK_HOLDERS)).rows;
      throw new MigrationLockError(
        `migration ${label(set, migration)} waited more than ${lockTimeoutMs} ms for a lock and was rolled back; ` +
          `sessions holding locks on core's tables: ${describeHolders(holders)}. End their transactions ` +
          "(or the sessions: pg_terminate_backend) and run the migrations again",
        holders,
      );
    }
    throw new MigrationError(
      `migration ${label(set, migration)} failed and was rolled back: ${describe(error)}`,
      {
        cause: error,
      },
    );
  }
}

/** PostgreSQL's SQLSTATE for a lock wait that passed lock_timeout. */
const LOCK_NOT_AVAILABLE = "55P03";

/** The other sessions holding a lock on a table, view or sequence of `core`, as a migration's wait names them. */
const TABLE_LOCK_HOLDERS = `
  SELECT DISTINCT l.pid, a.usename::text AS role, a.application_name AS "applicationName",
         coalesce(a.usename = current_user OR r.rolsuper, false) AS migrator
    FROM pg_locks AS l
    JOIN pg_class AS c ON c.oid = l.relation
    JOIN pg_namespace AS n ON n.oid = c.relnamespace AND n.nspname = 'core'
    LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
    LEFT JOIN pg_roles AS r ON r.oid = a.usesysid
   WHERE l.locktype = 'relation' AND l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   ORDER BY l.pid`;

function label(set: string, m: Migration): string {
  return `${set}/${String(m.version).padStart(4, "0")}_${m.name}`;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
