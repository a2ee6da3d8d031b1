/**
 * Lambda entry point of the backstop drains of this repository's reference deployment: the
 * consumer's own definition from the registry (functions/consumers.ts), so the drain fingerprints
 * its jobs as the consumer does whatever its definition's `fingerprint`; a drain for a consumer
 * the registry does not know could not, so it refuses.
 */
import { ConfigurationError, createBackstopDrain, drainConfigFromEnv } from "../../shared/index.ts";
import { CONSUMERS } from "../consumers.ts";

const config = drainConfigFromEnv();
const definition = CONSUMERS.find((c) => c.definition.name === config.consumer)?.definition;
if (!definition) {
  throw new ConfigurationError("backstop drain", [
    `JOBFENCE_CONSUMER "${config.consumer}" is none of this deployment's consumers (functions/consumers.ts)`,
  ]);
}

export const handler = createBackstopDrain(config, { definition });
