/**
 * The migration history against the migrations this code ships: every migration of every set
 * applied, none edited since (checksum), none the code does not know. The same rules the runner
 * enforces before it applies anything (shared/db/migrate.ts), reported instead of refused. Pure.
 */
import type { AppliedMigrationRow } from "../db/catalog.ts";
import type { MigrationSet } from "../db/migrations.ts";
import { CHECK, type Finding } from "./findings.ts";

function label(set: string, version: number, name: string): string {
  return `${set}/${String(version).padStart(4, "0")}_${name}`;
}

/** Every difference between `history` and `sets`. */
export function checkMigrations(
  history: readonly AppliedMigrationRow[],
  sets: readonly MigrationSet[],
): Finding[] {
  const findings: Finding[] = [];
  for (const set of sets) {
    const applied = new Map(history.filter((h) => h.set === set.name).map((h) => [h.version, h]));
    const known = new Map(set.migrations.map((m) => [m.version, m]));
    for (const m of set.migrations) {
      const row = applied.get(m.version);
      if (!row) {
        findings.push({
          check: CHECK.migrations,
          where: `migration ${label(set.name, m.version, m.name)}`,
          what: "is not applied",
          todo: "run the migrations (a deploy runs them; by hand `jobfence migrate`, or in the jobfence repository `npm run migrate` or `npm start`)",
        });
      } else if (row.checksum !== m.checksum) {
        findings.push({
          check: CHECK.migrations,
          where: `migration ${label(set.name, m.version, m.name)}`,
          what: `was applied from another text (checksum ${row.checksum.slice(0, 12)}…, the file's is ${m.checksum.slice(0, 12)}…): the file was edited after it ran`,
          todo: "restore the file as it was applied and put the change in a new migration; the runner refuses to migrate until then",
        });
      }
    }
    for (const row of applied.values()) {
      if (known.has(row.version)) continue;
      findings.push({
        check: CHECK.migrations,
        where: `migration ${label(set.name, row.version, row.name)}`,
        what: "is applied but this code does not have it: the database was migrated by newer code",
        todo: "run the doctor (and deploy) from the code that migrated it",
      });
    }
  }
  const names = new Set(sets.map((s) => s.name));
  for (const set of [...new Set(history.map((h) => h.set))].sort()) {
    if (names.has(set)) continue;
    findings.push({
      check: CHECK.migrations,
      where: `migration set ${set}`,
      what: "is applied but the deployment has no such set (functions/migrate/sets.ts)",
      todo: "add the set back to the deployment, or, if its consumer was removed for good, drop its schema and delete its rows from core.schema_migrations",
    });
  }
  return findings;
}
