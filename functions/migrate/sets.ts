/**
 * Every migration set a deployment applies, in order: the core schema, then each registered
 * consumer's own (functions/consumers.ts), so a consumer cannot be deployed without its tables.
 */
import { coreMigrationSet, type MigrationSet } from "../../shared/db/migrations.ts";
import { CONSUMERS } from "../consumers.ts";
import { consumerMigrationSet } from "../registry.ts";

export function deploymentMigrationSets(): MigrationSet[] {
  return [coreMigrationSet(), ...CONSUMERS.map((c) => consumerMigrationSet(c.definition.name))];
}
