/**
 * The `jobfence` command of the published package:
 *
 *   jobfence migrate [--database-url <url>]   the `core` migrations (jobfence owns no other schema)
 *   jobfence doctor  [--database-url <url>]   checks the database against what the migrations intend
 *   jobfence ops dead-letters <command> …     the dead-letter API from a terminal (ops/cli.ts)
 *
 * {@link runJobfence} runs it in-process with its output captured, for tests; `bin/jobfence.ts`
 * wires it to the process. Exit codes: 0 done (no findings); 1 failed (or findings); 2 usage.
 */
import { join } from "node:path";
import { localDirFromEnv, stackFilePath } from "../local/local-dir.ts";
import { runOps } from "../ops/cli.ts";
import { EXIT } from "../ops/io.ts";
import { runDoctorCommand } from "./doctor.ts";
import type { JobfenceIo } from "./io.ts";
import { runMigrateCommand } from "./migrate.ts";

const USAGE = `Usage: jobfence <command> [options]

Commands:
  migrate    apply jobfence's core migrations (schema core) to $DATABASE_URL or --database-url
  doctor     check roles, grants, policies and migrations of a jobfence database
  ops        manage dead letters through the dead-letter API (jobfence ops --help)
  version    print the package's version

Run jobfence <command> --help for a command's options.`;

/** Runs `jobfence <argv…>`; resolves to the exit code. */
export async function runJobfence(argv: readonly string[], io: JobfenceIo): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case "migrate":
      return runMigrateCommand(rest, io);
    case "doctor":
      return runDoctorCommand(rest, io);
    case "ops":
      return runOps(rest, {
        ...io,
        program: "jobfence ops",
        stackFile: io.stackFile ?? stackFilePath(localDirFromEnv(io.env, io.cwd ?? process.cwd())),
      });
    case "version":
    case "--version":
      io.out(await packageVersion());
      return EXIT.ok;
    case undefined:
    case "help":
    case "--help":
    case "-h":
      for (const line of USAGE.split("\n")) (command === undefined ? io.err : io.out)(line);
      return command === undefined ? EXIT.usage : EXIT.ok;
    default:
      io.err(`jobfence: unknown command ${JSON.stringify(command)}`);
      for (const line of USAGE.split("\n")) io.err(line);
      return EXIT.usage;
  }
}

/**
 * The version in jobfence's package.json: one folder up from this module in the repository, two
 * in the package (`dist/cli/`).
 */
async function packageVersion(): Promise<string> {
  const { readFile } = await import("node:fs/promises");
  for (const up of ["..", "../.."]) {
    try {
      const manifest = JSON.parse(await readFile(join(import.meta.dirname, up, "package.json"), "utf8")) as {
        name?: unknown;
        version?: unknown;
      };
      if (manifest.name === "jobfence" && typeof manifest.version === "string") return manifest.version;
    } catch {
      // not there: look further up
    }
  }
  return "unknown";
}
