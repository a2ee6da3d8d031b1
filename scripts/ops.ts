/**
 * `npm run ops -- dead-letters <command> …`: the ops CLI for the dead-letter API. The logic is in
 * local/ops-cli.ts; this only wires it to the process. `npm run ops -- --help` lists the commands.
 */
import { runOps } from "../local/ops-cli.ts";

// Piped into `head` and the like: a closed stdout ends the run quietly.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(process.exitCode ?? 0);
  throw error;
});

process.exitCode = await runOps(process.argv.slice(2), {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  env: process.env,
});
