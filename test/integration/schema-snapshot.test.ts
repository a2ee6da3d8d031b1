/**
 * Schema drift check: the schema the migrations produce must equal the committed, reviewed
 * description. After an intended schema change (a new migration), refresh it with
 * `npm run schema:snapshot` and review the diff.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { describeSchema } from "../support/describe-schema.ts";

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

it("the migrated schema matches the committed snapshot", async () => {
  const described = await db.withClient(describeSchema);
  await expect(described).toMatchFileSnapshot("../schema/core.schema.txt");
});
