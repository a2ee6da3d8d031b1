/** `npm run send -- <consumer> <payload-json> [options]`: runs local/send.ts against the stack `npm start` runs. */
import { join } from "node:path";
import { runSend } from "../local/send.ts";

process.exitCode = await runSend(process.argv.slice(2), {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  localDir: process.env.JOBFENCE_LOCAL_DIR || join(import.meta.dirname, "..", ".local"),
});
