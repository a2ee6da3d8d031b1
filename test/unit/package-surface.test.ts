/**
 * The package's surface, as package.json publishes it: each entry point of `exports` is the build
 * of one source module the build compiles (tsconfig.build.json), the `jobfence` command is the
 * build of bin/jobfence.ts, the tarball holds only the build, and the licence is Apache-2.0. And
 * the repository's reference consumers use the library as a user does: through the entry points
 * only, never a module behind them.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, posix } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT } from "../support/repository-files.ts";

/** Every module specifier `source` imports or re-exports, type-only ones included. */
function specifiersOf(source: string): string[] {
  return [
    ...source.matchAll(
      /^\s*(?:import|export)\s[^;]*?from\s*["']([^"']+)["']|\bimport\(\s*["']([^"']+)["']\s*\)/gm,
    ),
  ].map((m) => (m[1] ?? m[2]) as string);
}

interface Manifest {
  readonly private?: boolean;
  readonly license?: string;
  readonly exports: Record<string, string | { types: string; default: string }>;
  readonly bin: Record<string, string>;
  readonly files: readonly string[];
}

const manifest = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as Manifest;
const build = JSON.parse(readFileSync(join(ROOT, "tsconfig.build.json"), "utf8")) as {
  compilerOptions: { outDir: string };
  files: readonly string[];
};

/** The source module `./dist/x/y.js` is built from: `x/y.ts`. */
const sourceOf = (built: string) =>
  posix
    .normalize(built)
    .replace(/^dist\//, "")
    .replace(/\.js$/, ".ts");

/** Source modules a user's code may import: the entry points of `exports`. */
const ENTRY_MODULES = new Set(
  Object.values(manifest.exports)
    .filter((target): target is { types: string; default: string } => typeof target === "object")
    .map((target) => sourceOf(target.default)),
);

describe("package.json", () => {
  it("publishes under Apache-2.0, with the licence text beside it, and is not private", () => {
    expect(manifest.license).toBe("Apache-2.0");
    expect(readFileSync(join(ROOT, "LICENSE"), "utf8")).toMatch(
      /Apache License\s+Version 2\.0, January 2004/,
    );
    expect(manifest.private).toBeUndefined();
  });

  it("maps each entry point to the build of a module the build compiles, with its declarations beside it", () => {
    expect([...ENTRY_MODULES].sort()).toEqual(
      [...new Set([...ENTRY_MODULES].filter((m) => build.files.includes(m)))].sort(),
    );
    for (const [entry, target] of Object.entries(manifest.exports)) {
      if (entry === "./package.json") continue;
      expect(typeof target, entry).toBe("object");
      const { types, default: js } = target as { types: string; default: string };
      expect(types, entry).toBe(js.replace(/\.js$/, ".d.ts"));
      expect(existsSync(join(ROOT, sourceOf(js))), `${entry} → ${sourceOf(js)}`).toBe(true);
    }
    expect(Object.keys(manifest.exports)).toEqual(expect.arrayContaining([".", "./middy", "./testing"]));
  });

  it("runs the jobfence command from the build of bin/jobfence.ts, and ships nothing but the build", () => {
    expect(manifest.bin).toEqual({ jobfence: "dist/bin/jobfence.js" });
    expect(build.files).toContain("bin/jobfence.ts");
    expect(readFileSync(join(ROOT, "bin/jobfence.ts"), "utf8")).toMatch(/^#!\/usr\/bin\/env node\n/);
    expect(build.compilerOptions.outDir).toBe("dist");
    expect(manifest.files).toEqual(["dist/", "CHANGELOG.md"]);
  });
});

describe("the reference consumers", () => {
  const consumerFolders = readdirSync(join(ROOT, "functions"), { withFileTypes: true })
    .filter((d) => d.isDirectory() && existsSync(join(ROOT, "functions", d.name, "consumer.ts")))
    .map((d) => `functions/${d.name}`);
  const files = [
    ...consumerFolders.flatMap((folder) =>
      readdirSync(join(ROOT, folder))
        .filter((f) => f.endsWith(".ts"))
        .map((f) => `${folder}/${f}`),
    ),
    // Each consumer's own test (the registry's conformance test is the repository's, not a consumer's).
    ...consumerFolders
      .map((folder) => `test/consumers/${posix.basename(folder)}.test.ts`)
      .filter((file) => existsSync(join(ROOT, file))),
  ];

  it("are found", () => {
    expect(consumerFolders).toEqual(
      expect.arrayContaining(["functions/award-points", "functions/notify-user"]),
    );
  });

  it("import the library only through its entry points, as a service does", () => {
    const behind = files.flatMap((file) =>
      specifiersOf(readFileSync(join(ROOT, file), "utf8"))
        .filter((s) => s.startsWith("."))
        .map((s) => posix.normalize(posix.join(dirname(file), s)))
        .filter((target) => /^(shared|testing|infra)\//.test(target) && !ENTRY_MODULES.has(target))
        .map((target) => `${file} imports ${target}`),
    );
    expect(behind).toEqual([]);
  });
});
