import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { runMigrations } from "../../shared/db/migrate.ts";
import {
  checksumOf,
  coreMigrationSet,
  type Migration,
  type MigrationSet,
} from "../../shared/db/migrations.ts";
import {
  MigrationChecksumError,
  MigrationError,
  MigrationUnknownError,
} from "../../shared/errors/migration.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

const shipped = coreMigrationSet().migrations;
const core = (migrations: readonly Migration[]): MigrationSet[] => [{ name: "core", migrations }];
const versionsOf = (report: { applied: readonly { version: number }[] }) =>
  report.applied.map((m) => m.version);
const created: TestDatabase[] = [];

async function emptyDatabase(): Promise<TestDatabase> {
  const db = await createTestDatabase({ empty: true });
  created.push(db);
  return db;
}

afterEach(async () => {
  await Promise.all(created.splice(0).map((db) => db.drop()));
});

async function recorded(db: TestDatabase): Promise<Array<{ version: number; checksum: string }>> {
  return db.withClient(async (c) => {
    const { rows } = await c.query(
      "SELECT version, checksum FROM core.schema_migrations WHERE migration_set = 'core' ORDER BY version",
    );
    return rows;
  });
}

async function coreTables(db: TestDatabase): Promise<string[]> {
  return db.withClient(async (c) => {
    const { rows } = await c.query<{ t: string }>(
      "SELECT tablename AS t FROM pg_tables WHERE schemaname = 'core' ORDER BY 1",
    );
    return rows.map((r) => r.t);
  });
}

function edited(migrations: readonly Migration[], version: number, sql: string): Migration[] {
  return migrations.map((m) => (m.version === version ? { ...m, sql, checksum: checksumOf(sql) } : m));
}

/** The tables the core migrations create, by name. */
const CORE_TABLES = [
  "bulk_operation_items",
  "bulk_operation_skips",
  "bulk_operations",
  "consumer_roles",
  "dead_letter_counts",
  "dead_letter_groups",
  "dead_letters",
  "follow_up_targets",
  "idempotency_keys",
  "job_steps",
  "message_attempts",
  "outbox",
  "processed_jobs",
  "schema_migrations",
];

describe("migration runner", () => {
  it("applies every migration to an empty database and records each with its checksum", async () => {
    const db = await emptyDatabase();
    const report = await runMigrations({ connectionString: db.url });

    expect(versionsOf(report)).toEqual(shipped.map((m) => m.version));
    expect(report.alreadyApplied).toBe(0);
    expect(await recorded(db)).toEqual(shipped.map((m) => ({ version: m.version, checksum: m.checksum })));
    expect(await coreTables(db)).toEqual(CORE_TABLES);
  });

  it("re-running on an up-to-date database is a no-op", async () => {
    const db = await emptyDatabase();
    await runMigrations({ connectionString: db.url });
    const before = await recorded(db);

    const again = await runMigrations({ connectionString: db.url });

    expect(again.applied).toEqual([]);
    expect(again.alreadyApplied).toBe(shipped.length);
    expect(await recorded(db)).toEqual(before);
  });

  it("applies only the migrations a database lacks", async () => {
    const db = await emptyDatabase();
    await runMigrations({ connectionString: db.url, sets: core(shipped.slice(0, 1)) });

    const report = await runMigrations({ connectionString: db.url });

    expect(versionsOf(report)).toEqual(shipped.slice(1).map((m) => m.version));
    expect(report.alreadyApplied).toBe(1);
  });

  it("concurrent runners apply each migration exactly once and end consistent", async () => {
    const db = await emptyDatabase();
    const runners = 6;

    const reports = await Promise.all(
      Array.from({ length: runners }, () => runMigrations({ connectionString: db.url })),
    );

    // Exactly one runner applied everything; the others waited on the lock and found nothing to do.
    const appliedCounts = reports.map((r) => r.applied.length).sort();
    expect(appliedCounts).toEqual([...Array(runners - 1).fill(0), shipped.length]);
    expect(await recorded(db)).toHaveLength(shipped.length);
    expect(await coreTables(db)).toEqual(CORE_TABLES);
  });

  it("refuses to run when an applied migration was edited, and applies nothing", async () => {
    const db = await emptyDatabase();
    await runMigrations({ connectionString: db.url, sets: core(shipped.slice(0, 2)) });
    const tampered = edited(shipped, 1, `${shipped[0]?.sql}\n-- a harmless-looking edit\n`);

    const attempt = runMigrations({ connectionString: db.url, sets: core(tampered) });

    await expect(attempt).rejects.toBeInstanceOf(MigrationChecksumError);
    await expect(attempt).rejects.toMatchObject({ version: 1 });
    // Named as its file is (set, then number and name), and, being jobfence's own, not to be "fixed"
    // with a new migration of the user's.
    await expect(attempt).rejects.toThrow(
      /^migration core\/0001_\w+ was edited after it was applied .*jobfence's own migrations are never edited/,
    );
    // Migration 3 was pending but must not have been applied past the refused history.
    expect((await recorded(db)).map((r) => r.version)).toEqual([1, 2]);
  });

  it("refuses a database migrated by newer code (a recorded version the code lacks)", async () => {
    const db = await emptyDatabase();
    await runMigrations({ connectionString: db.url });

    await expect(
      runMigrations({ connectionString: db.url, sets: core(shipped.slice(0, -1)) }),
    ).rejects.toBeInstanceOf(MigrationUnknownError);
  });

  it("rolls a failing migration back whole and records nothing for it", async () => {
    const db = await emptyDatabase();
    const broken: Migration[] = [
      ...shipped,
      {
        version: shipped.length + 1,
        name: "broken",
        sql: "CREATE TABLE core.half_done (id int); SELECT * FROM core.no_such_table;",
        checksum: checksumOf("broken"),
      },
    ];

    await expect(runMigrations({ connectionString: db.url, sets: core(broken) })).rejects.toBeInstanceOf(
      MigrationError,
    );

    expect((await recorded(db)).map((r) => r.version)).toEqual(shipped.map((m) => m.version));
    expect(await coreTables(db)).not.toContain("half_done");
  });

  it("releases its advisory lock on failure so the next runner is not blocked", async () => {
    const db = await emptyDatabase();
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const bad = [{ version: 1, name: "bad", sql: "SELEC 1", checksum: checksumOf("SELEC 1") }];
      await expect(runMigrations({ client, sets: core(bad) })).rejects.toBeInstanceOf(MigrationError);
      const { rows } = await client.query(
        "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
      );
      expect(rows[0].n).toBe(0);
    } finally {
      await client.end();
    }
    // A second runner on another connection gets the lock at once and applies the real migrations.
    const report = await runMigrations({ connectionString: db.url });
    expect(versionsOf(report)).toEqual(shipped.map((m) => m.version));
  });
});
