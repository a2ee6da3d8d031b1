/**
 * `jobfence migrate`: applies jobfence's `core` migrations, and makes sure each named consumer's
 * group role exists, so the service's own migrations (whatever tool runs them) can grant it the
 * tables its work uses. jobfence creates nothing outside `core` but those roles.
 */
import { Command, CommanderError } from "commander";
import pg from "pg";
import { EXIT, LineWriter } from "../ops/io.ts";
import { runMigrations } from "../shared/db/migrate.ts";
import { coreMigrationSet } from "../shared/db/migrations.ts";
import { ensureConsumerRole } from "../shared/db/queries/provision-login.ts";
import { JobfenceError } from "../shared/errors/jobfence-error.ts";
import { databaseUrlOf, withoutPassword } from "./database-url.ts";
import type { JobfenceIo } from "./io.ts";

interface MigrateFlags {
  readonly databaseUrl?: string;
  readonly consumer: string[];
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
    .option(
      "--consumer <name>",
      "a consumer whose group role must exist (repeatable)",
      (value: string, previous: string[]) => [...previous, value],
      [] as string[],
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
  const client = new pg.Client({ connectionString: url, application_name: "jobfence:migrate" });
  try {
    await client.connect();
  } catch (error) {
    client.end().catch(() => {});
    io.err(`jobfence migrate: cannot connect to ${withoutPassword(url)}: ${(error as Error).message}`);
    return EXIT.failed;
  }
  try {
    const report = await runMigrations({ client, sets: [coreMigrationSet()], log: io.out });
    io.out(
      report.applied.length === 0
        ? `core is up to date (${report.alreadyApplied} migrations applied earlier)`
        : `applied ${report.applied.length} core migration(s)`,
    );
    for (const consumer of flags.consumer) {
      io.out(`consumer ${consumer}: group role ${await ensureConsumerRole(client, consumer)}`);
    }
    return EXIT.ok;
  } catch (error) {
    io.err(
      `jobfence migrate: ${error instanceof JobfenceError ? `${error.name}: ${error.message}` : String(error)}`,
    );
    return EXIT.failed;
  } finally {
    await client.end().catch(() => {});
  }
}
