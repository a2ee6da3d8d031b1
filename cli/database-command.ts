/**
 * What `jobfence migrate` and `jobfence doctor` share: the flags that name the database and the
 * service's consumers, parsed by commander with its output routed to the command's io, and the
 * database they name (`--database-url`, else `DATABASE_URL`).
 */
import { Command, CommanderError } from "commander";
import { EXIT, LineWriter } from "../ops/io.ts";
import { withoutPassword } from "../shared/db/connection-text.ts";
import { JobfenceError } from "../shared/errors/jobfence-error.ts";
import type { ConsumerFlags } from "./consumers.ts";
import type { JobfenceIo } from "./io.ts";

/** The flags both commands take. */
export interface DatabaseCommandFlags extends ConsumerFlags {
  readonly databaseUrl?: string;
}

const repeatable = (value: string, previous: string[]): string[] => [...previous, value];

/**
 * A `jobfence <name>` command with `--database-url`, `--consumer` and `--definitions`; `extend`
 * adds the command's own options.
 */
export function databaseCommand(
  name: string,
  description: string,
  consumers: { readonly consumer: string; readonly definitions: string },
  extend: (command: Command) => Command = (command) => command,
): Command {
  return extend(
    new Command(`jobfence ${name}`)
      .description(description)
      .option("--database-url <url>", "the database (else $DATABASE_URL)")
      .option("--consumer <name>", consumers.consumer, repeatable, [])
      .option("--definitions <module>", consumers.definitions, repeatable, []),
  ).helpOption("-h, --help", "show help");
}

/**
 * Parses `argv` with `command`; resolves to its flags and database URL, or to the exit code when
 * the run ends here (help printed, a usage error, no database named).
 */
export function parseDatabaseCommand<F extends DatabaseCommandFlags>(
  command: Command,
  argv: readonly string[],
  io: JobfenceIo,
): { readonly flags: F; readonly url: string } | number {
  const out = new LineWriter(io.out);
  const err = new LineWriter(io.err);
  command
    .configureOutput({ writeOut: (text) => out.write(text), writeErr: (text) => err.write(text) })
    .exitOverride();
  let flags: F;
  try {
    command.parse(argv, { from: "user" });
    flags = command.opts<F>();
  } catch (error) {
    out.flush();
    err.flush();
    if (error instanceof CommanderError) return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    throw error;
  }
  const url = flags.databaseUrl ?? io.env.DATABASE_URL;
  if (url === undefined || url === "") {
    io.err(`${command.name()}: name the database with --database-url <url> or DATABASE_URL`);
    return EXIT.usage;
  }
  if (!isConnectionString(url)) {
    io.err(
      `${command.name()}: the database must be a connection string, postgres://user:password@host:port/database; got ${JSON.stringify(withoutPassword(url))}`,
    );
    return EXIT.usage;
  }
  return { flags, url };
}

/** Whether `url` reads as a PostgreSQL connection string (a URL of the postgres or postgresql scheme, with a host). */
function isConnectionString(url: string): boolean {
  try {
    const parsed = new URL(url);
    return (parsed.protocol === "postgres:" || parsed.protocol === "postgresql:") && parsed.hostname !== "";
  } catch {
    return false;
  }
}

/** What went wrong, in one line: a jobfence error by its name, anything else by its message or text. */
export function describeError(error: unknown): string {
  if (error instanceof JobfenceError) return `${error.name}: ${error.message}`;
  if (error instanceof Error) return error.message;
  return String(error);
}
