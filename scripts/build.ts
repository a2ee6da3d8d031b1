/**
 * `npm run build`: the published package, in `dist/`. TypeScript compiles the entry points
 * (tsconfig.build.json) and everything they import into ESM JavaScript with `.d.ts` beside it,
 * keeping the repository's folder layout, so a module that finds a file beside itself
 * (`new URL("./migrations/", import.meta.url)`) finds it in the package too. Then:
 *
 * - the declarations' relative `.ts` specifiers become `.js` (TypeScript rewrites them in the
 *   JavaScript only), so a consumer on TypeScript 5 with `moduleResolution` `node16`, `nodenext`
 *   or `bundler` reads them as it reads any package's;
 * - the files modules read at run time are copied to the same relative place: each folder's
 *   `*.sql` and `*.txt` and its `migrations/` (the `core` migrations, the committed catalog);
 * - the output is checked: no import of a relative `.ts` specifier is left in any `.js` or `.d.ts`.
 *
 * Nothing else is in `dist/`: what `npm pack` ships is the entry points and what they reach.
 *
 * Usage: node scripts/build.ts [--out-dir <dir>]   (default dist/)
 */
import { execFileSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
/** Where the build goes: dist/, or `--out-dir <dir>` (a test's scratch copy of the package). */
const outDirFlag = process.argv.indexOf("--out-dir");
const DIST = outDirFlag === -1 ? join(ROOT, "dist") : resolve(process.argv[outDirFlag + 1] ?? "");
/** What a module reads beside itself at run time. */
const ASSET = /\.(sql|txt)$/;
/**
 * A relative `.ts` specifier where a module is imported or re-exported (`from "…"`, `import "…"`,
 * `import("…")`, in code or in a type), in any quote. Text that merely mentions a `.ts` path (a
 * message, generated source) is left alone.
 */
const TS_IMPORT = /(\bfrom\s*|\bimport\s*\(?\s*)(["'])(\.{1,2}\/[^"'\n]*?)\.ts\2/g;

function files(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: "utf8" })
    .map((entry) => join(dir, entry))
    .filter((path) => statSync(path).isFile());
}

/** Compiles with the repository's TypeScript. */
function compile(): void {
  rmSync(DIST, { recursive: true, force: true });
  execFileSync(
    join(ROOT, "node_modules/.bin/tsc"),
    ["-p", join(ROOT, "tsconfig.build.json"), "--outDir", DIST],
    {
      cwd: ROOT,
      stdio: "inherit",
    },
  );
}

/** Rewrites the declarations' relative `.ts` specifiers to `.js`. */
function rewriteDeclarations(): number {
  let rewritten = 0;
  for (const path of files(DIST).filter((file) => file.endsWith(".d.ts"))) {
    const text = readFileSync(path, "utf8");
    const next = text.replace(
      TS_IMPORT,
      (_, before: string, quote: string, stem: string) => `${before}${quote}${stem}.js${quote}`,
    );
    if (next !== text) {
      writeFileSync(path, next);
      rewritten += 1;
    }
  }
  return rewritten;
}

/** Copies each compiled folder's run-time files (and its `migrations/`) from the sources. */
function copyAssets(): number {
  let copied = 0;
  const compiledFolders = new Set(files(DIST).map((file) => relative(DIST, dirname(file))));
  for (const folder of compiledFolders) {
    const source = join(ROOT, folder);
    if (!existsSync(source)) continue;
    const candidates = readdirSync(source, { withFileTypes: true }).flatMap((entry) =>
      entry.isDirectory() && entry.name === "migrations"
        ? readdirSync(join(source, entry.name)).map((name) => join(folder, entry.name, name))
        : entry.isFile()
          ? [join(folder, entry.name)]
          : [],
    );
    for (const file of candidates.filter((candidate) => ASSET.test(candidate))) {
      mkdirSync(dirname(join(DIST, file)), { recursive: true });
      copyFileSync(join(ROOT, file), join(DIST, file));
      copied += 1;
    }
  }
  return copied;
}

/** The specifiers a consumer's Node or TypeScript could not resolve. */
function leftoverSpecifiers(): string[] {
  return files(DIST)
    .filter((file) => file.endsWith(".js") || file.endsWith(".d.ts"))
    .flatMap((file) =>
      [...readFileSync(file, "utf8").matchAll(TS_IMPORT)].map(
        (match) => `${relative(ROOT, file)}: ${match[0]}`,
      ),
    );
}

compile();
const declarations = rewriteDeclarations();
const assets = copyAssets();
const leftovers = leftoverSpecifiers();
if (leftovers.length > 0) {
  console.error(
    `build: ${leftovers.length} relative .ts specifier(s) left in dist/:\n${leftovers.join("\n")}`,
  );
  process.exit(1);
}
const modules = files(DIST).filter((file) => file.endsWith(".js")).length;
console.log(
  `build: ${modules} modules, ${declarations} declaration files rewritten, ${assets} files copied, in ${relative(ROOT, DIST) || "."}`,
);
