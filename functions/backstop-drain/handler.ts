/** Lambda entry point of a consumer's backstop drain; configured from the environment at init. */
import { createBackstopDrain, drainConfigFromEnv } from "../../shared/backstop/drain.ts";

export const handler = createBackstopDrain(drainConfigFromEnv());
