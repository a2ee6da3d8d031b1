/** The process's own streams and environment as a command's io: what bin/jobfence.ts and `npm run ops` run with. */
import type { JobfenceIo } from "./io.ts";

/**
 * Standard output and error, the environment, and standard output as a terminal when it is one
 * (only a terminal gets a progress bar redrawn in place; a pipe or a file gets plain lines). A
 * closed standard output (piped into `head`) ends the run quietly.
 */
export function processIo(): JobfenceIo {
  process.stdout.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code === "EPIPE") process.exit(process.exitCode ?? 0);
    throw error;
  });
  return {
    out: (line) => process.stdout.write(`${line}\n`),
    err: (line) => process.stderr.write(`${line}\n`),
    env: process.env,
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
  };
}
