/**
 * The state both fence-storage measurements start from: a connection, pgstattuple when the server
 * has it, the migrated fence table seeded with `rows` fences, and the function checker on it.
 */
import { int, secs } from "../lib/report.ts";
import type { Cleanups } from "../lib/support.ts";
import { createChecker } from "./checks.ts";
import { connect, seedFences } from "./seed.ts";
import { enablePgstattuple } from "./sizes.ts";

export async function prepareSeededTable(url: string, name: string, rows: number, cleanups: Cleanups) {
  const db = await connect(url, name, cleanups);
  const pgstattuple = await enablePgstattuple(db);
  console.log(`pgstattuple ${pgstattuple ? "available (leaf density shown)" : "not available"}`);
  const seeded = await seedFences(db, rows);
  console.log(
    `seeded core.processed_jobs: ${int(rows)} rows in ${secs(seeded.seedMs)} (with VACUUM ANALYZE)`,
  );
  const check = await createChecker(url, db, seeded.cutoff, cleanups);
  return { db, pgstattuple, seeded, check };
}
