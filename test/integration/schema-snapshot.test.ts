/**
 * Schema drift check: the schema the migrations produce must equal the committed, reviewed
 * description (shared/db/core-catalog.txt), which is also what the doctor checks a live database
 * against. After an intended schema change (a new migration), refresh it with
 * `npm run schema:snapshot` and review the diff.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { readCatalog } from "../../shared/db/catalog.ts";
import { describeCore, renderCatalogDescription } from "../../shared/db/catalog-description.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

it("the migrated schema matches the committed snapshot", async () => {
  const described = renderCatalogDescription(describeCore(await db.withClient(readCatalog)));
  await expect(described).toMatchFileSnapshot("../../shared/db/core-catalog.txt");
});
