/** Lambda entry point of a consumer's backstop drain; configured from the environment at init. */
import { createBackstopDrain, drainConfigFromEnv } from "../../shared/index.ts";
import { CONSUMERS } from "../consumers.ts";

const config = drainConfigFromEnv();
// The consumer's own definition, so the drain fingerprints its jobs as the consumer does.
const definition = CONSUMERS.find((c) => c.definition.name === config.consumer)?.definition;

export const handler = createBackstopDrain(config, definition ? { definition } : {});
