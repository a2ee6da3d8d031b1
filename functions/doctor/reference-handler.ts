/**
 * Lambda entry point of this repository's reference deployment's doctor: the package's, plus the
 * registry consumers' own migration sets and committed schema descriptions, and their definitions'
 * declarations when the environment carries none (./reference.ts).
 */
import { deploymentConsumerSets } from "../migrate/sets.ts";
import { createDoctorHandler } from "./create-handler.ts";
import { deploymentConsumerSchemas, deploymentDeclarations } from "./reference.ts";

export const handler = createDoctorHandler({
  sets: deploymentConsumerSets(),
  consumerSchemas: deploymentConsumerSchemas(),
  declarations: deploymentDeclarations,
});
