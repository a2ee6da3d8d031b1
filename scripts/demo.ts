/** `npm run demo`: runs local/demo.ts against the stack that `npm start` is running. */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { runDemo } from "../local/demo.ts";
import { localDirFromEnv, stackFilePath } from "../local/local-dir.ts";
import type { StackInfo } from "../local/stack.ts";

const localDir = localDirFromEnv(process.env);
const stackFile = stackFilePath(localDir);
let info: StackInfo;
try {
  info = JSON.parse(await readFile(stackFile, "utf8")) as StackInfo;
  if (!info.apiUrl || !info.queues) throw new Error("incomplete");
} catch {
  console.error(
    `no running local stack found (${stackFile}): start one with npm start, then run npm run demo`,
  );
  process.exit(2);
}
const readStats = async () =>
  JSON.parse(await readFile(join(localDir, "stats.json"), "utf8").catch(() => "{}"));
const say = (line: string) => console.log(`demo  ${line}`);
try {
  const summary = await runDemo({ info, readStats, say });
  console.log(JSON.stringify(summary, null, 2));
} catch (error) {
  console.error(`demo failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
}
