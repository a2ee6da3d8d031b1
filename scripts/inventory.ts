/**
 * `npm run inventory`: regenerates the privilege inventory of docs/schema.md (the section between
 * its markers) from a freshly migrated database: every privilege the jobfence roles hold and every
 * SECURITY DEFINER function, read from the catalog (shared/db/privilege-inventory.ts). An entry
 * that still exists keeps its why and its test; a new one gets "(to fill in)" in both, for a person to fill
 * in (test/integration/privilege-inventory.test.ts fails until they are); one that no longer exists
 * is dropped. Prints what it added and dropped.
 *
 * With DATABASE_URL (an administrative URL: CREATEDB, CREATEROLE) it migrates a scratch database
 * beside it and drops it afterwards; without, an embedded PostgreSQL started for the run.
 * `--check` changes nothing and exits 1 when the section is not up to date.
 */

import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { deploymentMigrationSets } from "../functions/migrate/sets.ts";
import { startEmbeddedPostgres } from "../local/postgres.ts";
import { runMigrations } from "../shared/db/migrate.ts";
import {
  keyOf,
  parseInventorySection,
  readInventory,
  renderInventorySection,
  replaceInventorySection,
} from "../shared/db/privilege-inventory.ts";

const SCHEMA_DOC = fileURLToPath(new URL("../docs/schema.md", import.meta.url));

/** `url` with another database name. */
function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

async function onAdmin<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** Migrates a scratch database on the server `adminUrl` names and reads its inventory. */
async function inventoryOn(adminUrl: string) {
  const name = `jf_inventory_${randomBytes(4).toString("hex")}`;
  await onAdmin(adminUrl, (c) => c.query(`CREATE DATABASE ${name}`));
  try {
    const url = withDatabase(adminUrl, name);
    await runMigrations({ connectionString: url, sets: deploymentMigrationSets() });
    return await onAdmin(url, readInventory);
  } finally {
    await onAdmin(adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
  }
}

const check = process.argv.includes("--check");
const adminUrl = process.env.DATABASE_URL;
const embedded = adminUrl ? undefined : await startEmbeddedPostgres({ durability: "fast" });
try {
  const keys = await inventoryOn(adminUrl ?? (embedded?.url as string));
  const document = await readFile(SCHEMA_DOC, "utf8");
  const { section, added, dropped } = renderInventorySection(keys, parseInventorySection(document));
  for (const k of added) console.log(`added   ${keyOf(k)}  (fill in its why and its test)`);
  for (const e of dropped) console.log(`dropped ${keyOf(e)}`);
  // The document as the linter formats it (it aligns the table), so a fresh run changes nothing.
  const updated = execFileSync("node_modules/.bin/biome", ["format", `--stdin-file-path=${SCHEMA_DOC}`], {
    input: replaceInventorySection(document, section),
    encoding: "utf8",
  });
  if (updated === document) {
    console.log(`privilege inventory up to date (${keys.length} entries)`);
  } else if (check) {
    console.log("docs/schema.md's privilege inventory is not up to date: run npm run inventory");
    process.exitCode = 1;
  } else {
    await writeFile(SCHEMA_DOC, updated);
    console.log(`docs/schema.md: privilege inventory written (${keys.length} entries)`);
  }
} finally {
  await embedded?.stop();
}
