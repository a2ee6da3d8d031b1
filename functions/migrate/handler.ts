/**
 * Lambda entry point of the migrate function (./migrate.ts) as jobfence deploys it for any
 * service: `core` only, every consumer from its configuration.
 */
import { createMigrateHandler } from "./migrate.ts";

export const handler = createMigrateHandler();
