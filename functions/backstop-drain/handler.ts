/** Lambda entry point of a consumer's backstop drain; configured from the environment at init. */
import { ConfigurationError, createBackstopDrain, drainConfigFromEnv } from "../../shared/index.ts";
import { CONSUMERS } from "../consumers.ts";

const config = drainConfigFromEnv();
// The consumer's own definition, so the drain fingerprints its jobs as the consumer does; a drain
// for a consumer this deployment does not know would fingerprint them otherwise, so it refuses.
const definition = CONSUMERS.find((c) => c.definition.name === config.consumer)?.definition;
if (!definition) {
  throw new ConfigurationError("backstop drain", [
    `JOBFENCE_CONSUMER "${config.consumer}" is none of this deployment's consumers (functions/consumers.ts)`,
  ]);
}

export const handler = createBackstopDrain(config, { definition });
