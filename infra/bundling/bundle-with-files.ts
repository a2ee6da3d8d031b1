/**
 * Bundles an entry point whose modules find files next to themselves through
 * `new URL("./migrations/", import.meta.url)` (the migration sets). In a single-file bundle every
 * module shares one `import.meta.url`, so the core set and a consumer's set would both read
 * `./migrations/` beside the bundle. This esbuild run (esbuild's plugin API, which NodejsFunction
 * does not expose) rewrites `import.meta.url` in each of jobfence's modules to the URL of that
 * module's own directory inside the bundle, and copies every `migrations/*.sql` (and the few other
 * files modules read, SHIPPED_FILES: the committed descriptions of `core` and of each consumer's
 * schemas) to the same relative place.
 *
 * jobfence's modules are those under ROOT, the folder two above this script: the repository with
 * its `.ts` sources, or the built package's `dist/` with its `.js` (the same layout), wherever it is
 * installed (under a `node_modules/` itself); packages below ROOT's own `node_modules/` are not.
 *
 * Usage (run by the construct at synth): node <this script> <absolute entry> <outdir> [esbuild target]
 */
import { cpSync, existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, extname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const ROOT = fileURLToPath(new URL("../..", import.meta.url)).replace(/\/$/, "");
/** The target when none is given: the default runtime's (FUNCTION_DEFAULTS). */
const DEFAULT_TARGET = "node24";
const BANNER = "import { createRequire } from 'module'; const require = createRequire(import.meta.url);";

/** Folders whose `migrations/` directories ship with the bundle. */
const MIGRATION_PARENTS = ["shared/db", ...readdirSync(join(ROOT, "functions")).map((f) => `functions/${f}`)];
/**
 * Single files that ship too, at the same relative place: the committed descriptions the doctor
 * reads, of `core` and of each consumer's schemas (`functions/<consumer>/schema.txt`, where
 * committed: the doctor reports one that is not).
 */
const SHIPPED_FILES = [
  "shared/db/core-catalog.txt",
  ...MIGRATION_PARENTS.map((parent) => `${parent}/schema.txt`).filter((file) => existsSync(join(ROOT, file))),
];

/** Whether `path` is one of jobfence's own modules (not a package of ROOT's own node_modules). */
function isOwnModule(path: string): boolean {
  const inside = relative(ROOT, path);
  return !inside.startsWith("..") && !inside.split(/[\\/]/).includes("node_modules");
}

async function main(entry: string, outdir: string, target: string): Promise<void> {
  await build({
    entryPoints: [entry],
    outfile: join(outdir, "index.mjs"),
    bundle: true,
    platform: "node",
    format: "esm",
    target,
    mainFields: ["module", "main"],
    banner: { js: BANNER },
    external: ["pg-native"],
    minify: true,
    sourcemap: true,
    sourcesContent: false,
    logLevel: "warning",
    plugins: [
      {
        name: "module-relative-import-meta-url",
        setup(b) {
          b.onLoad({ filter: /\.(ts|js)$/ }, (args) => {
            if (!isOwnModule(args.path)) return undefined;
            const text = readFileSync(args.path, "utf8");
            if (!text.includes("import.meta.url")) return undefined;
            const dir = `./${relative(ROOT, dirname(args.path))}/`;
            return {
              contents: text.replaceAll(
                "import.meta.url",
                `new URL(${JSON.stringify(dir)}, import.meta.url).href`,
              ),
              loader: extname(args.path) === ".ts" ? "ts" : "js",
            };
          });
        },
      },
    ],
  });
  for (const parent of MIGRATION_PARENTS) {
    const source = join(ROOT, parent, "migrations");
    if (existsSync(source)) cpSync(source, join(outdir, parent, "migrations"), { recursive: true });
  }
  for (const file of SHIPPED_FILES) cpSync(join(ROOT, file), join(outdir, file));
}

const [entry, outdir, target = DEFAULT_TARGET] = process.argv.slice(2);
if (!entry || !outdir) throw new Error("usage: bundle-with-files <absolute entry> <outdir> [esbuild target]");
await main(entry, outdir, target);
