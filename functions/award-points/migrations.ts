/** The reference consumer's migration set: its ledger and balances, beside the core schema. */
import { fileURLToPath } from "node:url";
import { loadMigrations, type MigrationSet } from "../../shared/db/migrations.ts";

export function awardPointsMigrationSet(): MigrationSet {
  return {
    name: "award-points",
    consumer: "award-points",
    migrations: loadMigrations(fileURLToPath(new URL("./migrations/", import.meta.url))),
  };
}
