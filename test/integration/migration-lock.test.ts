/**
 * The migration runner's lock cannot be held against it without end (issue 30): any role may take
 * any advisory lock, so a consumer's login (made by core.provision_login) that takes the runner's
 * makes the run fail at once, naming the session; on an empty database (no `core` yet) too, where
 * the login is one of another database of the cluster (CONNECT is PUBLIC's by default). Another
 * runner that holds it is waited for, up to a bound, then named.
 */
import { createHash, randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runMigrations } from "../../shared/db/migrate.ts";
import { provisionLogin } from "../../shared/db/queries/provision-login.ts";
import { MigrationLockError } from "../../shared/errors/migration.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

const LOCK = "SELECT pg_advisory_lock(hashtextextended('jobfence.migrate', 0))";
let migrated: TestDatabase;
let empty: TestDatabase;
const username = `jft_lock_${randomBytes(4).toString("hex")}`;
const password = randomBytes(18).toString("base64url");

beforeAll(async () => {
  migrated = await createTestDatabase();
  empty = await createTestDatabase({ empty: true });
  await migrated.withClient((c) => provisionLogin(c, { username, password, consumer: "award-points" }));
});
afterAll(async () => {
  await migrated?.drop();
  await empty?.drop();
  await migrated?.withClient((c) => c.query(`DROP ROLE IF EXISTS ${username}`)).catch(() => {});
});

function loginTo(db: TestDatabase, applicationName: string): pg.Client {
  const url = new URL(db.url);
  url.username = username;
  url.password = password;
  return new pg.Client({ connectionString: url.toString(), application_name: applicationName });
}

/** The run's outcome, or "still waiting" after `ms`. */
async function within<T>(work: Promise<T>, ms: number): Promise<T | Error | "still waiting"> {
  return Promise.race([
    work.catch((e: unknown) => e as Error),
    new Promise<"still waiting">((resolve) => setTimeout(() => resolve("still waiting"), ms)),
  ]);
}

describe("a session holding the migration runner's lock", () => {
  for (const which of ["migrated", "empty"] as const) {
    it(`a consumer's login that holds it fails the run at once, named, on ${which === "migrated" ? "a migrated" : "an empty"} database`, async () => {
      const db = which === "migrated" ? migrated : empty;
      const holder = loginTo(db, "lock-squatter");
      await holder.connect();
      try {
        await holder.query(LOCK);
        const { rows } = await holder.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
        const outcome = await within(runMigrations({ connectionString: db.url, lockWaitMs: 60_000 }), 10_000);
        expect(outcome).toBeInstanceOf(MigrationLockError);
        const error = outcome as MigrationLockError;
        expect(error.message).toContain(`pid ${rows[0]?.pid}`);
        expect(error.message).toContain(`role ${username}`);
        expect(error.message).toContain("application_name 'lock-squatter'");
        expect(error.holders).toEqual([
          { pid: rows[0]?.pid, role: username, applicationName: "lock-squatter", migrator: false },
        ]);
      } finally {
        await holder.end();
      }
      // Once the session is gone the run proceeds.
      await expect(runMigrations({ connectionString: db.url })).resolves.toBeDefined();
    });
  }

  it("another runner's session is waited for up to the bound, then named", async () => {
    const other = new pg.Client({ connectionString: migrated.url, application_name: "other-runner" });
    await other.connect();
    try {
      await other.query(LOCK);
      const started = Date.now();
      const outcome = await within(
        runMigrations({ connectionString: migrated.url, lockWaitMs: 300 }),
        10_000,
      );
      expect(outcome).toBeInstanceOf(MigrationLockError);
      expect(Date.now() - started).toBeGreaterThanOrEqual(300);
      expect((outcome as Error).message).toMatch(
        /another migration runner .*application_name 'other-runner'/,
      );
      // Released while one waits: that one goes on.
      const waiting = runMigrations({ connectionString: migrated.url, lockWaitMs: 10_000 });
      await new Promise((resolve) => setTimeout(resolve, 150));
      await other.query("SELECT pg_advisory_unlock_all()");
      await expect(waiting).resolves.toMatchObject({ applied: [] });
    } finally {
      await other.end();
    }
  });
});

describe("a session holding a lock on a core table a migration changes", () => {
  it("a consumer's login idle in its transaction fails the migration within its lock timeout, named", async () => {
    const holder = loginTo(migrated, "idle-in-transaction");
    await holder.connect();
    // A migration of the next release that changes the outbox (here: takes the lock such a change takes).
    const sql = "LOCK TABLE core.outbox IN ACCESS EXCLUSIVE MODE";
    const probe = {
      name: "lock-probe",
      migrations: [
        {
          version: 1,
          name: "changes_the_outbox",
          sql,
          checksum: createHash("sha256").update(sql).digest("hex"),
        },
      ],
    };
    try {
      await holder.query("BEGIN");
      await holder.query("SELECT count(*) FROM core.outbox");
      const { rows } = await holder.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
      const outcome = await within(
        runMigrations({ connectionString: migrated.url, sets: [probe], migrationLockTimeoutMs: 300 }),
        10_000,
      );
      expect(outcome).toBeInstanceOf(MigrationLockError);
      const error = outcome as MigrationLockError;
      expect(error.message).toMatch(/lock-probe\/0001_changes_the_outbox waited more than 300 ms/);
      expect(error.holders).toContainEqual({
        pid: rows[0]?.pid,
        role: username,
        applicationName: "idle-in-transaction",
        migrator: false,
      });
      await holder.query("ROLLBACK");
      // Once the transaction is over the migration applies.
      await expect(runMigrations({ connectionString: migrated.url, sets: [probe] })).resolves.toMatchObject({
        applied: [{ set: "lock-probe", version: 1, name: "changes_the_outbox" }],
      });
    } finally {
      await holder.end();
    }
  });
});
