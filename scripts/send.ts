/** `npm run send -- <consumer> <payload-json> [options]`: runs local/send.ts against the stack `npm start` runs. */
import { localDirFromEnv } from "../local/local-dir.ts";
import { runSend } from "../local/send.ts";

process.exitCode = await runSend(process.argv.slice(2), {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  localDir: localDirFromEnv(process.env),
});
