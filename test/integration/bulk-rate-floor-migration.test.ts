/**
 * The migration that gives a bulk operation's pace its floor (bulk_rate_floor), on a database that
 * already holds operations below it: a running one, which could never finish (each chunk's pause was
 * out of PostgreSQL's interval range), is failed saying why; a finished one stays as the audit record
 * it is; new rows and every later update are held to the floor.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runMigrations } from "../../shared/db/migrate.ts";
import { coreMigrationSet, type MigrationSet } from "../../shared/db/migrations.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

const shipped = coreMigrationSet().migrations;
const floor = shipped.find((m) => m.name === "bulk_rate_floor");
const upTo = (version: number): MigrationSet[] => [
  { name: "core", migrations: shipped.filter((m) => m.version <= version) },
];

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ empty: true });
});
afterAll(async () => {
  await db?.drop();
});

describe("the bulk rate floor's migration", () => {
  it("fails a running operation below the floor, keeps a finished one, and holds new rows to it", async () => {
    expect(floor).toBeDefined();
    const version = floor?.version ?? 0;
    await runMigrations({ connectionString: db.url, sets: upTo(version - 1) });
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

    await runMigrations({ connectionString: db.url, sets: upTo(version) });

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
