/**
 * What every command's action gets, and the one wrapper that runs it: the connection resolved on
 * demand (a usage error is found before any configuration is needed), the exit code recorded, and
 * a refused flag reported by commander with the command's help, exactly like commander's own errors.
 */
import type { Command, OptionValues } from "commander";
import { type Connection, connect } from "./connection.ts";
import { UsageError } from "./errors.ts";
import { EXIT, type OpsIo } from "./io.ts";

/** State of one run of the CLI, shared by the program and its commands. */
export interface Runtime {
  readonly io: OpsIo;
  /** What the run exits with once the action returns. */
  exitCode: number;
}

/** One invocation of a command. */
export interface Invocation {
  readonly io: OpsIo;
  /** The command's arguments, as declared (an optional one missing is undefined). */
  readonly args: readonly (string | undefined)[];
  /** The command's own options (not the global ones). */
  readonly options: OptionValues;
  /** --json: print the API's bodies, one per line, instead of tables. */
  readonly json: boolean;
  /** The API connection; resolved on first use. */
  connect(): Promise<Connection>;
}

/** commander's error code for a usage error the CLI found itself. */
export const USAGE_ERROR_CODE = "ops.usage";

/** Sets `command`'s action to `run`; its result is the run's exit code. */
export function defineAction(
  command: Command,
  runtime: Runtime,
  run: (invocation: Invocation) => Promise<number>,
): Command {
  return command.action(async () => {
    const globals = command.optsWithGlobals();
    let connection: Promise<Connection> | undefined;
    const invocation: Invocation = {
      io: runtime.io,
      args: command.processedArgs as (string | undefined)[],
      options: command.opts(),
      json: globals.json === true,
      connect: () => {
        connection ??= connect({ api: globals.api, token: globals.token }, runtime.io);
        return connection;
      },
    };
    try {
      runtime.exitCode = await run(invocation);
    } catch (error) {
      if (error instanceof UsageError && error.showHelp) {
        // Printed and exited through commander, so the help follows as after its own errors.
        command.error(
          error.message
            .split("\n")
            .map((line) => `error: ${line}`)
            .join("\n"),
          { exitCode: EXIT.usage, code: USAGE_ERROR_CODE },
        );
      }
      throw error;
    }
  });
}
