/**
 * Lambda entry point of a consumer's backstop drain as jobfence deploys it for any service,
 * configured from the environment at init. It knows no definition: it fingerprints each job by its
 * whole payload as received, which is exactly what a consumer whose definition has no custom
 * `fingerprint` does. A consumer with one needs a drain entry of its own that passes its
 * definition (JobConsumer's `drainEntry`; the construct refuses the consumer without one).
 */
import { createBackstopDrain, drainConfigFromEnv } from "../../shared/index.ts";

export const handler = createBackstopDrain(drainConfigFromEnv());
