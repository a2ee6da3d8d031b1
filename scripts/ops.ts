/**
 * `npm run ops -- dead-letters <command> …`: the ops CLI for the dead-letter API. The tool is its
 * own folder, ops/; this only wires it to the process. `npm run ops -- --help` lists the commands.
 */
import { runOps } from "../ops/cli.ts";

// Piped into `head` and the like: a closed stdout ends the run quietly.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(process.exitCode ?? 0);
  throw error;
});

process.exitCode = await runOps(process.argv.slice(2), {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  env: process.env,
  // Only a terminal gets a progress bar redrawn in place; a pipe or a file gets plain lines.
  ...(process.stdout.isTTY
    ? {
        terminal: {
          write: (text: string) => process.stdout.write(text),
          // Read at each redraw: the window may be resized while watching.
          get columns() {
            return process.stdout.columns ?? 80;
          },
        },
      }
    : {}),
});
