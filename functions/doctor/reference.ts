/**
 * What this repository's reference deployment's doctor knows of its registry
 * (functions/consumers.ts): each consumer's own migration set's committed description, and what
 * each definition declares it works on outside core. A user's doctor gets neither from a registry:
 * it compares no consumer schemas, and its declarations come from its environment.
 */
import type { DeclaredConsumerData } from "../../shared/doctor/declared-data.ts";
import type { ConsumerSchemaFile } from "../../shared/doctor/doctor.ts";
import { CONSUMERS } from "../consumers.ts";
import { consumerSchemaFile, hasConsumerMigrations } from "../registry.ts";

/**
 * Each registered consumer with migrations of its own and its committed `schema.txt`, which the
 * doctor compares its schemas with: beside the consumer's folder in the repository, and in the
 * doctor function's bundle (infra/bundling/bundle-with-files.ts ships them).
 */
export function deploymentConsumerSchemas(): ConsumerSchemaFile[] {
  return CONSUMERS.filter((c) => hasConsumerMigrations(c.definition.name)).map((c) => ({
    consumer: c.definition.name,
    file: consumerSchemaFile(c.definition.name),
  }));
}

/** What each registered consumer's definition declares it works on outside core (its `data`). */
export function deploymentDeclarations(): DeclaredConsumerData[] {
  return CONSUMERS.map((c) => ({ consumer: c.definition.name, data: c.definition.data ?? {} }));
}
