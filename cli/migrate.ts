/**
 * `jobfence migrate`: applies jobfence's `core` migrations, and makes sure each named consumer's
 * group role exists, so the service's own migrations (whatever tool runs them) can grant it the
 * tables its work uses. jobfence creates nothing outside `core` but those roles.
 */
import { Command, CommanderError } from "commander";
import { EXIT, LineWriter } from "../ops/io.ts";
import { migrateDatabase } from "../shared/commands/migrate.ts";
import { JobfenceError } from "../shared/errors/jobfence-error.ts";
import { type ConsumerFlags, consumersOf, repeatable } from "./consumers.ts";
import { databaseUrlOf, withoutPassword } from "./database-url.ts";
import type { JobfenceIo } from "./io.ts";

interface MigrateFlags extends ConsumerFlags {
  readonly databaseUrl?: string;
}

/** Runs `jobfence migrate <argv…>`; resolves to the exit code. */
export async function runMigrateCommand(argv: readonly string[], io: JobfenceIo): Promise<number> {
  const out = new LineWriter(io.out);
  const err = new LineWriter(io.err);
  const command = new Command("jobfence migrate")
    .description(
      "Apply jobfence's core migrations (schema core) and create each named consumer's group role. " +
        "Your own tables stay with your own migration tool: grant them to the roles this prints.",
    )
    .option("--database-url <url>", "the database, as a user that may create roles (else $DATABASE_URL)")
    .option("--consumer <name>", "a consumer whose group role must exist (repeatable)", repeatable, [])
    .option(
      "--definitions <module>",
      "a module exporting consumer definitions: each one's group role must exist (repeatable)",
      repeatable,
      [],
    )
    .helpOption("-h, --help", "show help")
    .configureOutput({ writeOut: (text) => out.write(text), writeErr: (text) => err.write(text) })
    .exitOverride();
  let flags: MigrateFlags;
  try {
    command.parse(argv, { from: "user" });
    flags = command.opts<MigrateFlags>();
  } catch (error) {
    out.flush();
    err.flush();
    if (error instanceof CommanderError) return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    throw error;
  }
  const url = databaseUrlOf(flags.databaseUrl, io.env);
  if (url === undefined) {
    io.err("jobfence migrate: name the database with --database-url <url> or DATABASE_URL");
    return EXIT.usage;
  }
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
    const message =
      error instanceof JobfenceError ? `${error.name}: ${error.message}` : (error as Error).message;
    io.err(`jobfence migrate: ${withoutPassword(url)}: ${message}`);
    return EXIT.failed;
  }
}
