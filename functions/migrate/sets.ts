/** Every migration set a deployment applies, in order: the core schema, then each consumer's own. */
import { coreMigrationSet, type MigrationSet } from "../../shared/db/migrations.ts";
import { awardPointsMigrationSet } from "../award-points/migrations.ts";

export function deploymentMigrationSets(): MigrationSet[] {
  return [coreMigrationSet(), awardPointsMigrationSet()];
}
