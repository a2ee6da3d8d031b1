#!/usr/bin/env node
/**
 * The `jobfence` command (package.json `bin`): wires cli/main.ts to the process. `jobfence --help`
 * lists the commands.
 */
import { runJobfence } from "../cli/main.ts";
import { processIo } from "../cli/process-io.ts";

process.exitCode = await runJobfence(process.argv.slice(2), processIo());
