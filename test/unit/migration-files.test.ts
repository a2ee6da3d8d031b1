import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { checksumOf, coreMigrationSet, loadMigrations } from "../../shared/db/migrations.ts";
import { MigrationFileError } from "../../shared/errors/migration.ts";

function folder(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), "jf-migrations-"));
  for (const [name, sql] of Object.entries(files)) writeFileSync(join(dir, name), sql);
  return dir;
}

describe("migration files", () => {
  it("the shipped migrations load in order, numbered from 1 without gaps", () => {
    const { migrations } = coreMigrationSet();
    expect(migrations.length).toBeGreaterThanOrEqual(3);
    expect(migrations.map((m) => m.version)).toEqual(migrations.map((_, i) => i + 1));
    for (const m of migrations) expect(m.checksum).toBe(checksumOf(m.sql));
  });

  it("orders by version and ignores files that are not migrations", () => {
    const dir = folder({ "0002_b.sql": "select 2", "0001_a.sql": "select 1", "README.md": "notes" });
    expect(loadMigrations(dir).map((m) => [m.version, m.name])).toEqual([
      [1, "a"],
      [2, "b"],
    ]);
  });

  it.each([
    ["a badly named file", { "0001_a.sql": "", "2_b.sql": "" }],
    ["a migration with an upper-case extension", { "0001_a.sql": "", "0002_b.SQL": "" }],
    ["a migration with a second extension", { "0001_a.sql": "", "0002_b.sql.txt": "" }],
    ["a gap in the numbering", { "0001_a.sql": "", "0003_c.sql": "" }],
    ["a repeated version", { "0001_a.sql": "", "0001_b.sql": "" }],
    ["numbering that does not start at 1", { "0002_b.sql": "" }],
  ])("refuses %s", (_, files) => {
    expect(() => loadMigrations(folder(files))).toThrow(MigrationFileError);
  });

  it("any change to the text changes the checksum", () => {
    expect(checksumOf("select 1")).not.toBe(checksumOf("select 1 "));
  });
});
