/**
 * Lambda entry point of this repository's reference deployment's migrate function: the package's
 * (./migrate.ts), plus what the registry's consumers keep in sets jobfence runs (their own tables),
 * their roles and their declared follow-up targets (functions/consumers.ts).
 */
import { declaredFollowUpTargets } from "../consumers.ts";
import { createMigrateHandler } from "./migrate.ts";
import { deploymentConsumerSets, deploymentConsumers } from "./sets.ts";

export const handler = createMigrateHandler({
  sets: deploymentConsumerSets(),
  consumers: deploymentConsumers(),
  followUpTargets: declaredFollowUpTargets(),
});
