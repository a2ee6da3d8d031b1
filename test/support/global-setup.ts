/**
 * Vitest global setup of the database project (vitest.config.ts): provides one PostgreSQL server
 * for the whole run and a migrated template database that test files clone (CREATE DATABASE …
 * TEMPLATE), so each file gets an isolated, ready database in milliseconds and files run in
 * parallel. Files of the other projects get none (createTestDatabase refuses there).
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import type { TestProject } from "vitest/node";
import { declaredFollowUpTargets } from "../../functions/consumers.ts";
import { deploymentMigrationSets } from "../../functions/migrate/sets.ts";
import { runMigrations } from "../../shared/db/migrate.ts";
import { registerDeclaredFollowUpTargets } from "../../shared/db/queries/follow-up-targets.ts";
import { databaseUrl, dropDatabasesWithPrefix } from "./admin.ts";
import { acquirePostgres } from "./postgres-source.ts";

declare module "vitest" {
  export interface ProvidedContext {
    /** Administrative connection string of the run's server. */
    adminDatabaseUrl: string;
    /** Prefix of every database this run creates; all are dropped at the end. */
    databasePrefix: string;
    /** A database with every migration applied, to clone per test file. */
    templateDatabase: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const source = await acquirePostgres();
  const prefix = `jf_test_${randomBytes(4).toString("hex")}`;
  const template = `${prefix}_template`;

  const admin = new pg.Client({ connectionString: source.adminUrl });
  await admin.connect();
  const { rows } = await admin.query<{ server_version: string }>("SHOW server_version");
  await admin.query(`CREATE DATABASE ${template}`);
  await admin.end();
  await runMigrations({
    connectionString: databaseUrl(source.adminUrl, template),
    sets: deploymentMigrationSets(),
  });
  // The registry's follow-up targets, as the migrate function registers them on deploy.
  const templateClient = new pg.Client({ connectionString: databaseUrl(source.adminUrl, template) });
  await templateClient.connect();
  try {
    await registerDeclaredFollowUpTargets(templateClient, declaredFollowUpTargets());
  } finally {
    await templateClient.end();
  }

  // One line in every log says what actually ran.
  console.log(`jobfence tests: PostgreSQL ${rows[0]?.server_version} (${source.kind})`);

  project.provide("adminDatabaseUrl", source.adminUrl);
  project.provide("databasePrefix", prefix);
  project.provide("templateDatabase", template);

  return async () => {
    await dropDatabasesWithPrefix(source.adminUrl, prefix);
    await source.release();
  };
}
