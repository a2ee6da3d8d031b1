/**
 * Migrations of core.bulk_operations, each on a database migrated up to the one before it that
 * already holds the operations the migration must deal with:
 *
 * - bulk_rate_floor gives a bulk operation's pace its floor: a running operation below it, which
 *   could never finish (each chunk's pause was out of PostgreSQL's interval range), is failed saying
 *   why; a finished one stays as the audit record it is; new rows and every later update are held to
 *   the floor.
 * - bulk_filter_message_case makes the filter digest read the `message` filter as its match does,
 *   case-insensitively: of running operations whose messages differ only in case the oldest keeps
 *   running and the later ones are cancelled saying why, other filters are untouched, and a new
 *   start of the same set is refused.
 */
import { afterEach, describe, expect, it } from "vitest";
import { runMigrations } from "../../shared/db/migrate.ts";
import { coreMigrationSet } from "../../shared/db/migrations.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

const shipped = coreMigrationSet().migrations;

const databases: TestDatabase[] = [];
afterEach(async () => {
  for (const db of databases.splice(0)) await db.drop();
});

/**
 * A database migrated up to the migration `name` (not included), and how to apply it: `migrate()`
 * runs the shipped migrations up to and including it.
 */
async function before(name: string): Promise<{ db: TestDatabase; migrate(): Promise<void> }> {
  const migration = shipped.find((m) => m.name === name);
  expect(migration, name).toBeDefined();
  const version = migration?.version ?? 0;
  const upTo = (v: number) => [{ name: "core", migrations: shipped.filter((m) => m.version <= v) }];
  const db = await createTestDatabase({ empty: true });
  databases.push(db);
  await runMigrations({ connectionString: db.url, sets: upTo(version - 1) });
  return {
    db,
    migrate: () => runMigrations({ connectionString: db.url, sets: upTo(version) }).then(() => {}),
  };
}

describe("the bulk rate floor's migration", () => {
  it("fails a running operation below the floor, keeps a finished one, and holds new rows to it", async () => {
    const { db, migrate } = await before("bulk_rate_floor");
    const insert = `INSERT INTO core.bulk_operations (kind, filter, reason, delay_seconds, rate_per_second, planned, submitted_by)
                    VALUES ('discard', $1::jsonb, 'old', 0, $2, 1, 'tester') RETURNING id`;
    const ids = await db.withClient(async (c) => {
      const running = (await c.query(insert, ['{"consumer":"slow"}', 1e-40])).rows[0].id;
      const finished = (await c.query(insert, ['{"consumer":"done"}', 1e-30])).rows[0].id;
      await c.query(
        "UPDATE core.bulk_operations SET status = 'cancelled', cancelled_by = 'tester', finished_at = now() WHERE id = $1",
        [finished],
      );
      const healthy = (await c.query(insert, ['{"consumer":"fine"}', 5])).rows[0].id;
      return { running, finished, healthy };
    });

    await migrate();

    await db.withClient(async (c) => {
      const rows = new Map(
        (
          await c.query<{ id: string; status: string; last_error: string | null }>(
            "SELECT id, status, last_error FROM core.bulk_operations",
          )
        ).rows.map((r) => [r.id, r]),
      );
      expect(rows.get(ids.running)).toMatchObject({
        status: "failed",
        last_error: expect.stringMatching(/below the floor of 0\.01/),
      });
      expect(rows.get(ids.finished)).toMatchObject({ status: "cancelled", last_error: null });
      expect(rows.get(ids.healthy)).toMatchObject({ status: "running", last_error: null });
      await expect(c.query(insert, ['{"consumer":"new"}', 0.005])).rejects.toMatchObject({
        code: "23514",
        constraint: "bulk_operations_rate",
      });
      // The healthy running operation still moves on.
      await c.query("UPDATE core.bulk_operations SET processed = 0, next_run_at = now() WHERE id = $1", [
        ids.healthy,
      ]);
    });
  });
});

describe("the bulk filter digest's migration", () => {
  it("keeps the oldest of running operations whose messages differ only in case, cancels the rest, and refuses another", async () => {
    const { db, migrate } = await before("bulk_filter_message_case");
    const insert = `INSERT INTO core.bulk_operations (kind, filter, reason, delay_seconds, rate_per_second, planned, submitted_by, submitted_at)
                    VALUES ('discard', $1::jsonb, 'old', 0, 1, 1, 'tester', now() - make_interval(secs => $2)) RETURNING id`;
    const ids = await db.withClient(async (c) => {
      const id = async (filter: object, ageSeconds: number) =>
        (await c.query(insert, [JSON.stringify(filter), ageSeconds])).rows[0].id as string;
      return {
        oldest: await id({ consumer: "c", message: "Timeout" }, 30),
        later: await id({ consumer: "c", message: "TIMEOUT" }, 20),
        latest: await id({ message: "timeout", consumer: "c" }, 10),
        otherText: await id({ consumer: "c", message: "Timeout!" }, 5),
        otherConsumer: await id({ consumer: "d", message: "Timeout" }, 5),
      };
    });

    await migrate();

    await db.withClient(async (c) => {
      const rows = new Map(
        (
          await c.query<{ id: string; status: string; cancelled_by: string | null }>(
            "SELECT id, status, cancelled_by FROM core.bulk_operations",
          )
        ).rows.map((r) => [r.id, r]),
      );
      expect(rows.get(ids.oldest)).toMatchObject({ status: "running", cancelled_by: null });
      for (const id of [ids.later, ids.latest]) {
        expect(rows.get(id)).toMatchObject({
          status: "cancelled",
          cancelled_by: expect.stringMatching(/migration 0030 .*differed only in case/),
        });
      }
      for (const id of [ids.otherText, ids.otherConsumer])
        expect(rows.get(id)).toMatchObject({ status: "running", cancelled_by: null });
      await expect(c.query(insert, ['{"consumer":"c","message":"tImEoUt"}', 0])).rejects.toMatchObject({
        code: "23505",
        constraint: "bulk_operations_one_running_per_filter",
      });
    });
  });
});
