/**
 * `npm start`: the local stack. Today it provides what the foundation has: a PostgreSQL (embedded,
 * kept in .local/pg between runs, or the one DATABASE_URL names) with the jobfence schema and roles
 * applied. The SQS emulator, consumers, dead-letter API and timers join it as their issues land.
 * Writes .local/stack.json and runs until Ctrl-C.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { deploymentMigrationSets } from "../functions/migrate/sets.ts";
import { type RunningPostgres, startEmbeddedPostgres } from "../local/postgres.ts";
import { runMigrations } from "../shared/db/migrate.ts";

const root = join(import.meta.dirname, "..");
const localDir = join(root, ".local");
await mkdir(localDir, { recursive: true });

let embedded: RunningPostgres | undefined;
let databaseUrl = process.env.DATABASE_URL;
if (databaseUrl) {
  console.log("postgres   using DATABASE_URL");
} else {
  embedded = await startEmbeddedPostgres({ dataDir: join(localDir, "pg", "data") });
  databaseUrl = embedded.url;
  console.log(`postgres   embedded, data in .local/pg (${databaseUrl})`);
}

const report = await runMigrations({
  connectionString: databaseUrl,
  sets: deploymentMigrationSets(),
  log: (l) => console.log(`migrate    ${l}`),
});
console.log(`migrate    schema up to date (${report.alreadyApplied + report.applied.length} migrations)`);

const stack = { databaseUrl };
await writeFile(join(localDir, "stack.json"), `${JSON.stringify(stack, null, 2)}\n`);
console.log("ready      wrote .local/stack.json");
console.log(
  "not yet available: the SQS emulator, consumers, dead-letter API and timers (they arrive with the local-stack issue)",
);
console.log("Ctrl-C to stop");

let stopping = false;
async function stop(): Promise<void> {
  if (stopping) return;
  stopping = true;
  console.log("\nstopping");
  await embedded?.stop();
  process.exit(0);
}
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
// Keep the process alive until a signal arrives.
setInterval(() => {}, 1 << 30);
