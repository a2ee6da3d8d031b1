/**
 * The migrate function as the package deploys it (functions/migrate/handler.ts), for a service with
 * consumers of its own and no registry: it applies `core` only, ensures the roles of the consumers
 * its configuration names, and registers the follow-up targets JOBFENCE_FOLLOW_UP_TARGETS gives
 * (a sender given none has its targets revoked). Against a real PostgreSQL.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { handler } from "../../functions/migrate/handler.ts";
import { coreMigrationSet } from "../../shared/db/migrations.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

const suffix = randomBytes(4).toString("hex");
/** A service's own consumers: one sends follow-ups to the other. */
const SENDER = `record-payment-${suffix}`;
const TARGET = `send-receipt-${suffix}`;

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ empty: true });
});
afterAll(async () => {
  vi.unstubAllEnvs();
  await db?.drop();
});

const followUpTargets = async () =>
  db.withClient(
    async (c) =>
      (await c.query("SELECT sender, target FROM core.follow_up_targets ORDER BY sender, target")).rows,
  );

describe("the package's migrate function", () => {
  it("refuses follow-up targets that are not a JSON map of consumer names to lists of them, before touching anything", async () => {
    vi.stubEnv("DATABASE_URL", db.url);
    for (const bad of ['["a"]', '{"Bad": []}', `{"${SENDER}": ["Not A Name"]}`, `{"${SENDER}": "x"}`]) {
      vi.stubEnv("JOBFENCE_FOLLOW_UP_TARGETS", bad);
      await expect(handler()).rejects.toThrow(ConfigurationError);
      await expect(handler()).rejects.toThrow(/JOBFENCE_FOLLOW_UP_TARGETS/);
    }
    const core = await db.withClient((c) => c.query("SELECT 1 FROM pg_namespace WHERE nspname = 'core'"));
    expect(core.rowCount).toBe(0);
  });

  it("applies core only, ensures the configured consumers' roles and registers their follow-up targets", async () => {
    vi.stubEnv("DATABASE_URL", db.url);
    vi.stubEnv("JOBFENCE_FOLLOW_UP_TARGETS", JSON.stringify({ [SENDER]: [TARGET], [TARGET]: [] }));
    const result = await handler();
    expect(new Set(result.applied.map((m) => m.set))).toEqual(new Set(["core"]));
    expect(result.applied).toHaveLength(coreMigrationSet().migrations.length);
    expect(result.consumerRoles).toEqual([consumerRoleName(TARGET), consumerRoleName(SENDER)].sort());
    expect(result.followUpTargetsRegistered).toEqual([SENDER, TARGET].sort());
    // None of this repository's reference consumers' tables: jobfence owns only core.
    const schemas = await db.withClient(
      async (c) =>
        (
          await c.query<{ nspname: string }>(
            "SELECT nspname FROM pg_namespace WHERE nspname IN ('core', 'award_points', 'notify_user') ORDER BY 1",
          )
        ).rows,
    );
    expect(schemas).toEqual([{ nspname: "core" }]);
    const sets = await db.withClient(
      async (c) => (await c.query("SELECT DISTINCT migration_set FROM core.schema_migrations")).rows,
    );
    expect(sets).toEqual([{ migration_set: "core" }]);
    expect(await followUpTargets()).toEqual([{ sender: SENDER, target: TARGET }]);
  });

  it("revokes a target dropped from a sender's definition: the sender given with no targets has none", async () => {
    vi.stubEnv("DATABASE_URL", db.url);
    vi.stubEnv("JOBFENCE_FOLLOW_UP_TARGETS", JSON.stringify({ [SENDER]: [], [TARGET]: [] }));
    const result = await handler();
    expect(result.applied).toEqual([]);
    expect(result.followUpTargetsRegistered).toEqual([SENDER, TARGET].sort());
    expect(await followUpTargets()).toEqual([]);
  });
});
