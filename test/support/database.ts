/**
 * A database of its own for each test file (or test): created from the run's migrated template,
 * or empty for tests of the migrations themselves. Isolation by database lets files run in
 * parallel against one server; roles are cluster-wide and identical in every database.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { expect, inject } from "vitest";
import { databaseUrl, withAdmin } from "./admin.ts";

/** A database created for a test, with helpers to reach it. */
export interface TestDatabase {
  readonly name: string;
  /** Superuser (migrator) connection string. */
  readonly url: string;
  /** Runs `fn` on a fresh client connected as the migrator; closes it afterwards. */
  withClient<T>(fn: (client: pg.Client) => Promise<T>): Promise<T>;
  /** Drops the database (connections are terminated). */
  drop(): Promise<void>;
}

/** Creates a database: migrated (a clone of the run's template) unless `empty` is set. */
export async function createTestDatabase(options: { empty?: boolean } = {}): Promise<TestDatabase> {
  const adminUrl = inject("adminDatabaseUrl");
  if (adminUrl === undefined) {
    // A file that reaches this without importing this module in a way test-files.ts reads.
    throw new Error(
      `${expect.getState().testPath ?? "this file"} is not in the database project, which alone has a PostgreSQL: ` +
        "import createTestDatabase from test/support/database.ts statically, as test/support/test-files.ts reads imports",
    );
  }
  const name = `${inject("databasePrefix")}_${randomBytes(5).toString("hex")}`;
  const template = options.empty ? "template0" : inject("templateDatabase");
  await withAdmin(adminUrl, (client) => client.query(`CREATE DATABASE ${name} TEMPLATE ${template}`));
  const url = databaseUrl(adminUrl, name);
  // The file's own connections, kept between calls: a connection costs about 20 ms here (a backend
  // process started and authenticated), and the suite's helpers make thousands of short calls. Each
  // goes back reset by DISCARD ALL (role, settings, temporary tables, prepared statements, locks,
  // LISTEN): a callback gets a session as fresh as a new connection's. One that cannot be reset (a
  // transaction left open, say) is closed instead, as before.
  const pool = new pg.Pool({
    connectionString: url,
    max: 20,
    idleTimeoutMillis: 1000,
    allowExitOnIdle: true,
  });
  // An idle connection ended from outside (the database dropped, a test terminating backends).
  pool.on("error", () => {});
  let dropped = false;
  return {
    name,
    url,
    withClient: async (fn) => {
      if (dropped) throw new Error(`database ${name} was dropped`);
      const client = await pool.connect();
      try {
        return await fn(client as unknown as pg.Client);
      } finally {
        await client.query("DISCARD ALL").then(
          () => client.release(),
          () => client.release(true),
        );
      }
    },
    drop: async () => {
      dropped = true;
      await pool.end();
      await withAdmin(adminUrl, (client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    },
  };
}
