/**
 * Where jobfence's own Lambda entry points and bundling script are, found relative to this module:
 * a synth then works from the repository's sources (`.ts`, run by Node 24's type stripping) and
 * from the built package (`.js`, the same folder layout under some `node_modules/jobfence/dist/`).
 */
import { extname } from "node:path";
import { fileURLToPath } from "node:url";

/** This module's own extension: `.ts` in the repository, `.js` in the built package. */
export const OWN_EXTENSION = extname(fileURLToPath(import.meta.url));

/** jobfence's own functions, each a folder of `functions/` with its `handler` entry point. */
export type JobfenceFunctionName =
  | "backstop-drain"
  | "bulk-operations"
  | "dead-letters-api"
  | "doctor"
  | "escalation"
  | "fence-cleanup"
  | "migrate"
  | "outbox-relay";

/** The absolute path of jobfence function `name`'s entry point, beside this package's constructs. */
export function jobfenceEntry(name: JobfenceFunctionName): string {
  return fileURLToPath(new URL(`../../functions/${name}/handler${OWN_EXTENSION}`, import.meta.url));
}

/** The script that bundles an entry whose modules read files beside themselves (./bundling). */
export const BUNDLE_WITH_FILES = fileURLToPath(
  new URL(`../bundling/bundle-with-files${OWN_EXTENSION}`, import.meta.url),
);
