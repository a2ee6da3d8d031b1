/**
 * The ops CLI (`npm run ops -- dead-letters …`): the dead-letter management API (docs/api.md) from a
 * terminal, against the local stack or a deployed API. `scripts/ops.ts` is its thin entry point;
 * {@link runOps} runs it in-process with its output captured, for tests.
 *
 * Exit codes: 0 done; 1 the API refused or could not be reached, or a watched operation did not do
 * all it planned; 2 usage or configuration error (bad flags, no API URL, no token).
 *
 * Values that come from dead letters (job ids, payloads, error messages) were written by whoever
 * produced the message: human output escapes control and bidi characters so a crafted value cannot
 * rewrite the operator's terminal. `--json` prints the API's bodies verbatim.
 */
import { Command, CommanderError } from "commander";
import type { Runtime } from "./command.ts";
import { registerDiscard } from "./commands/discard.ts";
import { registerGroups } from "./commands/groups.ts";
import { registerList } from "./commands/list.ts";
import { registerOpenApi } from "./commands/openapi.ts";
import { registerOperations } from "./commands/operations.ts";
import { registerReplay } from "./commands/replay.ts";
import { registerShow } from "./commands/show.ts";
import { registerStats } from "./commands/stats.ts";
import { CliFailure, UsageError } from "./errors.ts";
import { programOf } from "./format.ts";
import { EXIT, LineWriter, type OpsIo } from "./io.ts";

export { EXIT, type OpsIo, type Terminal } from "./io.ts";

const ENVIRONMENT_HELP = `
Environment:
  JOBFENCE_API_URL    API base URL when --api is not given (else apiUrl of .local/stack.json)
  JOBFENCE_TOKEN      bearer token when --token is not given (else the local stack's admin token)
  JOBFENCE_LOCAL_DIR  where the local stack's stack.json is (default .local), as for npm start

Exit codes: 0 done; 1 the API refused or could not be reached, or a watched operation did not do
all it planned; 2 usage or configuration error.`;

/** The program: global connection and output flags, and the dead-letters commands. */
function program(runtime: Runtime, out: LineWriter, err: LineWriter): Command {
  // Set before the subcommands are made: commander copies these settings into each of them.
  const root = new Command(programOf(runtime.io))
    .usage("dead-letters <command> [options]")
    .description("Manage dead letters through the jobfence management API.")
    .option("--api <url>", "API base URL (else $JOBFENCE_API_URL, else apiUrl of .local/stack.json)")
    .option("--token <jwt>", "bearer token (else $JOBFENCE_TOKEN, else the local stack's admin token)")
    .option("--json", "print the API's JSON response(s), one per line, instead of tables")
    .helpOption("-h, --help", "show help")
    .configureOutput({ writeOut: (text) => out.write(text), writeErr: (text) => err.write(text) })
    .configureHelp({ showGlobalOptions: true })
    .showHelpAfterError()
    // Throw instead of process.exit: runOps maps every outcome to an exit code, in-process.
    .exitOverride()
    .addHelpText("after", ENVIRONMENT_HELP);

  const deadLetters = root
    .command("dead-letters")
    .alias("dl")
    .summary("inspect, replay and discard dead letters; follow bulk operations")
    .description("Inspect, replay and discard dead letters; follow bulk operations.")
    .usage("<command> [options]");
  registerList(deadLetters, runtime);
  registerShow(deadLetters, runtime);
  registerStats(deadLetters, runtime);
  registerGroups(deadLetters, runtime);
  registerReplay(deadLetters, runtime);
  registerDiscard(deadLetters, runtime);
  registerOperations(deadLetters, runtime);
  registerOpenApi(deadLetters, runtime);
  deadLetters.addHelpText("after", ENVIRONMENT_HELP);
  return root;
}

/** Runs the CLI with `argv` (without node and script); resolves to the exit code. */
export async function runOps(argv: readonly string[], io: OpsIo): Promise<number> {
  const out = new LineWriter(io.out);
  const err = new LineWriter(io.err);
  const runtime: Runtime = { io, exitCode: EXIT.ok };
  try {
    // A fresh program per run: commander keeps parsed values on its command objects.
    await program(runtime, out, err).parseAsync([...argv], { from: "user" });
    return runtime.exitCode;
  } catch (error) {
    out.flush();
    return report(error, io);
  } finally {
    out.flush();
    err.flush();
  }
}

/** The exit code of a run that threw; prints what commander has not printed already. */
function report(error: unknown, io: OpsIo): number {
  if (error instanceof CommanderError) return exitCodeOf(error);
  if (error instanceof UsageError) {
    // "(…)" lines explain the line before them; the others are errors of their own.
    for (const line of error.message.split("\n")) io.err(line.startsWith("(") ? line : `error: ${line}`);
    return EXIT.usage;
  }
  if (error instanceof CliFailure) {
    for (const line of error.lines) io.err(line);
    return EXIT.failed;
  }
  io.err(`error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  return EXIT.failed;
}

/** commander has printed the help or the error; this is only its exit code. */
function exitCodeOf(error: CommanderError): number {
  if (error.code === "commander.helpDisplayed" || error.code === "commander.version") return EXIT.ok;
  // `help` asked for is 0; the help shown because no command was given is a usage error.
  if (error.code === "commander.help") return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
  // Every other one is about the command line: unknown option or command, missing or excess
  // argument, conflicting options, or a flag the CLI refused itself (USAGE_ERROR_CODE).
  return EXIT.usage;
}
