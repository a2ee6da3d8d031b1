/**
 * Every migration set a deployment applies, in order: the core schema, then the own set of each
 * registered consumer (functions/consumers.ts) that has one, so such a consumer cannot be deployed
 * without its tables. A consumer without migrations works on the service's tables; the runner
 * still ensures its group role ({@link deploymentConsumers}).
 */
import { coreMigrationSet, type MigrationSet } from "../../shared/db/migrations.ts";
import { CONSUMERS } from "../consumers.ts";
import { consumerMigrationSet, hasConsumerMigrations } from "../registry.ts";

export function deploymentMigrationSets(): MigrationSet[] {
  return [coreMigrationSet(), ...deploymentConsumerSets()];
}

/** The own sets of the registered consumers that have migrations, in the registry's order. */
export function deploymentConsumerSets(): MigrationSet[] {
  return CONSUMERS.filter((c) => hasConsumerMigrations(c.definition.name)).map((c) =>
    consumerMigrationSet(c.definition.name),
  );
}

/** Every registered consumer's name: the runner ensures each one's group role. */
export function deploymentConsumers(): string[] {
  return CONSUMERS.map((c) => c.definition.name);
}
