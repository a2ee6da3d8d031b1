/**
 * Reading the numbered SQL migrations shipped with the library. Pure file handling: which
 * migrations exist, in which order, with which checksum. Applying them is `migrate.ts`.
 */
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { MigrationFileError } from "../errors/migration.ts";

/** One migration file: `NNNN_description.sql`. */
export interface Migration {
  /** The number in the file name; migrations apply in ascending order. */
  readonly version: number;
  /** The description part of the file name. */
  readonly name: string;
  /** The SQL text, applied in one transaction. */
  readonly sql: string;
  /** SHA-256 of the SQL text, recorded when applied so a later edit is detected. */
  readonly checksum: string;
}

/** The folder holding the library's own migrations. */
export const MIGRATIONS_DIR = fileURLToPath(new URL("./migrations/", import.meta.url));

/**
 * An independently numbered series of migrations with its own history: the library's `core`, and
 * one per application that keeps its own tables beside it (the reference consumer's ledger).
 */
export interface MigrationSet {
  /** The set's name in the history table. */
  readonly name: string;
  readonly migrations: readonly Migration[];
  /**
   * The consumer whose own tables the set holds. Before applying it the runner ensures that
   * consumer's group role (`consumerRoleName`, e.g. `jobfence_consumer_award_points`), so its
   * migrations grant to that role and no other consumer reaches the tables. @default none (core)
   */
  readonly consumer?: string;
}

/** The library's own schema: fences, dead letters, roles. */
export function coreMigrationSet(): MigrationSet {
  return { name: "core", migrations: loadMigrations(MIGRATIONS_DIR) };
}

const FILE_NAME = /^(\d{4})_([a-z0-9_]+)\.sql$/;
const LOOKS_LIKE_MIGRATION = /^\d|\.sql$/i;

/** SHA-256 (hex) of a migration's text. */
export function checksumOf(sql: string): string {
  return createHash("sha256").update(sql, "utf8").digest("hex");
}

/**
 * Loads every migration of `dir` (a file whose name starts with a digit or ends in `.sql`), sorted
 * by version. Refuses one whose name does not follow the pattern, a repeated version, or a gap in the numbering (a gap usually means a lost file).
 */
export function loadMigrations(dir: string): Migration[] {
  const migrations: Migration[] = [];
  // A file that looks like a migration is held to the pattern, so a mistyped one (`0003_x.SQL`,
  // `0004_y.sql.txt`) is refused rather than silently left unapplied; notes beside them are not.
  for (const file of readdirSync(dir, { withFileTypes: true })
    .filter((entry) => entry.isFile() && LOOKS_LIKE_MIGRATION.test(entry.name))
    .map((entry) => entry.name)
    .sort()) {
    const match = FILE_NAME.exec(file);
    if (!match) {
      throw new MigrationFileError(`migration file ${file} does not match NNNN_description.sql`);
    }
    const sql = readFileSync(`${dir}/${file}`, "utf8");
    migrations.push({ version: Number(match[1]), name: match[2] as string, sql, checksum: checksumOf(sql) });
  }
  migrations.forEach((m, i) => {
    if (m.version !== i + 1) {
      throw new MigrationFileError(
        `migration versions must run 1, 2, 3… without gaps or repeats; found ${m.version} at position ${i + 1}`,
      );
    }
  });
  return migrations;
}
