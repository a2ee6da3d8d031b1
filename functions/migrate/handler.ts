/**
 * Lambda entry point that brings the database schema up to date; the deployment invokes it
 * before any consumer starts. Invoking it again is a no-op, and concurrent invocations are
 * serialised by the runner's advisory lock.
 */
import { type MigrationReport, runMigrations } from "../../shared/db/migrate.ts";
import { deploymentMigrationSets } from "./sets.ts";

/** Applies pending migrations to the database named by `DATABASE_URL` (the migrator's login). */
export async function handler(): Promise<MigrationReport> {
  const connectionString = process.env.DATABASE_URL;
  if (!connectionString) throw new Error("DATABASE_URL must name the database to migrate");
  return runMigrations({
    connectionString,
    sets: deploymentMigrationSets(),
    log: (line) => console.log(line),
  });
}
