import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { handler } from "../../functions/migrate/handler.ts";
import { deploymentMigrationSets } from "../../functions/migrate/sets.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ empty: true });
});
afterAll(async () => {
  vi.unstubAllEnvs();
  await db?.drop();
});

describe("migrate function", () => {
  it("refuses to run without DATABASE_URL", async () => {
    vi.stubEnv("DATABASE_URL", "");
    await expect(handler()).rejects.toThrow(/DATABASE_URL/);
  });

  it("migrates the database DATABASE_URL names, and a second invocation is a no-op", async () => {
    vi.stubEnv("DATABASE_URL", db.url);
    const expected = deploymentMigrationSets().flatMap((set) =>
      set.migrations.map((m) => ({ set: set.name, version: m.version, name: m.name })),
    );
    expect(expected.map((m) => m.set)).toEqual(expect.arrayContaining(["core", "award-points"]));
    expect(await handler()).toEqual({ applied: expected, alreadyApplied: 0 });
    expect(await handler()).toEqual({ applied: [], alreadyApplied: expected.length });
  });
});
