/**
 * `jobfence migrate`: applies jobfence's `core` migrations, and makes sure each named consumer's
 * group role exists, so the service's own migrations (whatever tool runs them) can grant it the
 * tables its work uses. jobfence creates nothing outside `core` but those roles.
 */
import { EXIT } from "../ops/io.ts";
import { migrateDatabase } from "../shared/commands/migrate.ts";
import { withoutPassword } from "../shared/db/connection-text.ts";
import { consumersOf } from "./consumers.ts";
import { databaseCommand, describeError, parseDatabaseCommand } from "./database-command.ts";
import type { JobfenceIo } from "./io.ts";

/** Runs `jobfence migrate <argv…>`; resolves to the exit code. */
export async function runMigrateCommand(argv: readonly string[], io: JobfenceIo): Promise<number> {
  const command = databaseCommand(
    "migrate",
    "Apply jobfence's core migrations (schema core) and create each named consumer's group role. " +
      "Your own tables stay with your own migration tool: grant them to the roles this prints.",
    {
      consumer: "a consumer whose group role must exist (repeatable)",
      definitions: "a module exporting consumer definitions: each one's group role must exist (repeatable)",
    },
  );
  const parsed = parseDatabaseCommand(command, argv, io);
  if (typeof parsed === "number") return parsed;
  const { flags, url } = parsed;
  try {
    const report = await migrateDatabase({
      databaseUrl: url,
      consumers: await consumersOf(flags, io.cwd ?? process.cwd()),
      log: io.out,
    });
    io.out(
      report.applied.length === 0
        ? `core is up to date (${report.alreadyApplied} migrations applied earlier)`
        : `applied ${report.applied.length} core migration(s)`,
    );
    for (const role of report.consumerRoles) io.out(`consumer group role: ${role}`);
    return EXIT.ok;
  } catch (error) {
    io.err(`jobfence migrate: ${withoutPassword(url)}: ${describeError(error)}`);
    return EXIT.failed;
  }
}
