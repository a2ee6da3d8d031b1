/**
 * `npm run ops -- dead-letters <command> …`: the ops CLI for the dead-letter API. The tool is its
 * own folder, ops/; this only wires it to the process (as `jobfence ops` does in the package).
 * `npm run ops -- --help` lists the commands.
 */
import { processIo } from "../cli/process-io.ts";
import { runOps } from "../ops/cli.ts";

process.exitCode = await runOps(process.argv.slice(2), processIo());
