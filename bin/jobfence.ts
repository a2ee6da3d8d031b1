#!/usr/bin/env node
/**
 * The `jobfence` command (package.json `bin`): wires cli/main.ts to the process. `jobfence --help`
 * lists the commands.
 */
import { runJobfence } from "../cli/main.ts";

// Piped into `head` and the like: a closed stdout ends the run quietly.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(process.exitCode ?? 0);
  throw error;
});

process.exitCode = await runJobfence(process.argv.slice(2), {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  env: process.env,
  ...(process.stdout.isTTY
    ? {
        terminal: {
          write: (text: string) => process.stdout.write(text),
          get columns() {
            return process.stdout.columns ?? 80;
          },
        },
      }
    : {}),
});
