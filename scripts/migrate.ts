/**
 * `npm run migrate`: applies the jobfence migrations to the database named by DATABASE_URL: the
 * `core` schema, the own migrations of the registered consumers that have some, and every
 * registered consumer's group role. The connecting user becomes the owner of every object (the
 * migrator) and needs CREATEROLE. (`migrateDatabase` in shared/commands/migrate.ts is the same for
 * a service without this repository's registry.)
 */

import { CONSUMERS } from "../functions/consumers.ts";
import { deploymentConsumerSets } from "../functions/migrate/sets.ts";
import { migrateDatabase } from "../shared/commands/migrate.ts";
import { JobfenceError } from "../shared/errors/jobfence-error.ts";

const url = process.env.DATABASE_URL;
if (!url) {
  console.error("DATABASE_URL is not set: name the database to migrate, e.g. postgres://user@host:5432/db");
  process.exit(2);
}
try {
  const report = await migrateDatabase({
    databaseUrl: url,
    consumers: CONSUMERS.map((c) => c.definition),
    sets: deploymentConsumerSets(),
    log: (line) => console.log(line),
  });
  console.log(
    report.applied.length === 0
      ? `up to date (${report.alreadyApplied} migrations applied earlier)`
      : `applied ${report.applied.length} migration(s)`,
  );
} catch (error) {
  console.error(error instanceof JobfenceError ? `${error.name}: ${error.message}` : error);
  process.exit(1);
}
