/**
 * Client CPU per effect of the harness against a bare loop, with the database taken out: a pg.Pool
 * stand-in whose clients answer every statement at once (a resolved promise) with the shapes the
 * harness expects, so what is timed is JavaScript alone: no socket writes, no server woken on the
 * same core, no pg protocol work. The figures are hot (the CPU's caches are ours alone); on a real
 * connection every µs here costs several, the server running between our steps.
 *
 *   harness  benchConsumer (bench/lib/harness-driver.ts) through harnessVariant: SQS batches of 10
 *   bare     harness-driver's bareVariant: BEGIN; awardPoints(...); COMMIT on a pooled client
 *   driver   harnessVariant's own work with a handler that answers at once: building the SQS
 *            events, the Lambda context, counting failures. It is in `harness`, but not the harness's
 *
 * Main-thread CPU (process.threadCpuUsage, user + system) per effect, median over rounds in rotating
 * order after a warm-up round, then one run of `harness` and `bare` under the inspector's sampling
 * profiler: the top modules and functions by self time.
 *
 *   node bench/experiments/harness-cpu.ts [--jobs 20000] [--rounds 5] [--concurrency 8] [--batch 10]
 *     [--mode per-record|batch] [--root DIR] [--top 20] [--no-profile] [--save-profiles DIR] [--json]
 *
 * `--root` runs another checkout's code (bench/lib/harness-driver.ts, or bench/harness-driver.ts
 * in the older layout) on the same fake: run two checkouts alternately to compare them.
 */
import { existsSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import pg from "pg";

const { values: argv } = parseArgs({
  options: {
    jobs: { type: "string", default: "20000" },
    rounds: { type: "string", default: "5" },
    concurrency: { type: "string", default: "8" },
    batch: { type: "string", default: "10" },
    mode: { type: "string", default: "per-record" },
    root: { type: "string", default: path.resolve(import.meta.dirname, "../..") },
    top: { type: "string", default: "20" },
    "no-profile": { type: "boolean", default: false },
    /** Writes DIR/harness.cpuprofile and DIR/bare.cpuprofile, for DevTools. */
    "save-profiles": { type: "string" },
    json: { type: "boolean", default: false },
  },
});
const [JOBS, ROUNDS, CONCURRENCY, BATCH, TOP] = [
  argv.jobs,
  argv.rounds,
  argv.concurrency,
  argv.batch,
  argv.top,
]
  .map(Number)
  .map((n) => (Number.isInteger(n) && n > 0 ? n : Number.NaN)) as [number, number, number, number, number];
if ([JOBS, ROUNDS, CONCURRENCY, BATCH, TOP].some(Number.isNaN))
  throw new Error("options are positive integers");
const ROOT = path.resolve(argv.root);
const MODE = argv.mode as "per-record" | "batch";

// Quiet, as the benchmarks run it (harness-driver sets it too, on import).
process.env.POWERTOOLS_METRICS_DISABLED ??= "true";
const driverPath = ["bench/lib/harness-driver.ts", "bench/harness-driver.ts"]
  .map((p) => path.join(ROOT, p))
  .find((p) => existsSync(p));
if (!driverPath) throw new Error(`no harness-driver.ts under ${ROOT}`);
type Driver = typeof import("../lib/harness-driver.ts");
type Variant = import("../lib/harness-driver.ts").Variant;
const driver = (await import(pathToFileURL(driverPath).href)) as Driver;

// --- The fake database -------------------------------------------------------------------------

type FakeResult = { command: string; rowCount: number; rows: unknown[]; fields: never[] };
const result = (command: string, rows: unknown[] = [], rowCount = rows.length): FakeResult =>
  ({ command, rowCount, rows, fields: [] }) satisfies FakeResult;
let nextXid = 1000;

/**
 * A pooled client that answers at once what the harness and the bare loop send: BEGIN, COMMIT,
 * ROLLBACK, the fence message (shared/db/queries/begin-with-fences.ts: [BEGIN, the scope it
 * began with, the inserted rows' job_id and xid], every fence fresh), the fence COMMIT
 * (shared/fence/fence-transaction.ts: [the check's SELECT, COMMIT, the session resets]) and
 * award-points's statement (functions/award-points/award.ts). The work's statements come as
 * Submittables (shared/fence/work-transaction.ts): each is answered through its callback, as pg
 * answers it at the server's ReadyForQuery.
 */
class FakeClient {
  #status: "I" | "T" = "I";
  /** Queries answered: round trips, had it been a server. */
  queries = 0;
  readonly release: (error?: Error | boolean) => void;
  constructor(release: (error?: Error | boolean) => void) {
    this.release = release;
  }

  getTransactionStatus(): string {
    return this.#status;
  }

  query(config: unknown, values?: unknown): Promise<FakeResult | FakeResult[]> | unknown {
    this.queries += 1;
    const answer = this.#answer(typeof config === "string" ? config : (config as { text: string }).text);
    const submittable = config as { submit?: unknown; callback?: (e: null, r: unknown) => void };
    if (typeof submittable.submit !== "function") {
      // pg's client.query builds a Query for text or a config, as the caller of a Submittable did.
      void new pg.Query(config as pg.QueryConfig, values as unknown[]);
      return Promise.resolve(answer);
    }
    queueMicrotask(() => submittable.callback?.(null, answer));
    return config;
  }

  #answer(text: string): FakeResult | FakeResult[] {
    if (text.startsWith("BEGIN;\n") && text.includes("INSERT INTO core.processed_jobs")) {
      this.#status = "T";
      // One VALUES row per fence, `('<job id>', …)`, joined by ",\n"; the job ids are UUIDs.
      const xid = String(nextXid++);
      const rows: { job_id: string; xid: string }[] = [];
      for (let at = text.indexOf("VALUES ("); at !== -1; at = text.indexOf(",\n(", at + 1)) {
        const start = text.indexOf("'", at) + 1;
        rows.push({ job_id: text.slice(start, text.indexOf("'", start)), xid });
      }
      // Before migration 0023 the message had no scope (a checkout run with --root).
      const scope = text.includes("jobfence.fence_scope") ? [result("SELECT", [{ scope: "award" }])] : [];
      return [result("BEGIN"), ...scope, result("INSERT", rows)];
    }
    if (
      text.startsWith("SELECT core.fence_commit_check(") ||
      text.startsWith("SELECT core.assert_fence_transaction(") ||
      text.startsWith("SELECT;\nCOMMIT")
    ) {
      this.#status = "I";
      const statements = text.split(";\n");
      return [result("SELECT", [{}]), ...statements.slice(1).map((s) => result(s.split(" ")[0] as string))];
    }
    if (text === "BEGIN" || text === "COMMIT" || text === "ROLLBACK") {
      this.#status = text === "BEGIN" ? "T" : "I";
      return result(text);
    }
    if (text.includes("award_points.")) return result("INSERT", [], 1);
    throw new Error(`the fake database does not know: ${text.slice(0, 80)}`);
  }
}

/** A pg.Pool stand-in: `connect` hands out an idle fake client (made when none is idle). */
class FakePool {
  readonly #all: FakeClient[] = [];
  readonly #idle: FakeClient[] = [];

  connect(): Promise<FakeClient> {
    let client = this.#idle.pop();
    if (!client) {
      const made: FakeClient = new FakeClient(() => this.#idle.push(made));
      this.#all.push(made);
      client = made;
    }
    return Promise.resolve(client);
  }

  on(): this {
    return this;
  }

  get queries(): number {
    return this.#all.reduce((n, c) => n + c.queries, 0);
  }
}

// --- The variants, timed -----------------------------------------------------------------------

const pool = new FakePool();
const fake = pool as unknown as Parameters<Driver["bareVariant"]>[1];
const url = "postgres://fake@127.0.0.1:1/fake";
const quickHandler = Object.assign(async () => ({ batchItemFailures: [] }), { consumer: "award-points" });
const variants: Variant[] = [
  driver.harnessVariant("harness", fake, url, {
    commitMode: MODE,
    batchSize: BATCH,
    concurrency: CONCURRENCY,
  }),
  driver.bareVariant("bare", fake, CONCURRENCY),
  {
    label: "driver",
    run: async (jobs) => {
      const batches = driver.batchesOf(jobs, BATCH);
      const handler = quickHandler as unknown as Parameters<Driver["invokeBatch"]>[0];
      // As harnessVariant does: each batch's expected failures counted from its bodies.
      const failing = new Set<string>();
      const ms = await driver.runConcurrently(batches, CONCURRENCY, (records) =>
        driver.invokeBatch(
          handler,
          records,
          records.filter((r) => failing.has(JSON.parse(r.body).job_id)).length,
        ),
      );
      return { ms, applied: jobs.length };
    },
  },
];
const byLabel = (label: string) => variants.find((v) => v.label === label) as Variant;
const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1] as number;

/** One run on fresh jobs: main-thread and all-threads CPU per effect (µs), queries per effect. */
async function timed(variant: Variant): Promise<{ thread: number; process: number; queries: number }> {
  const jobs = driver.makeJobs(JOBS);
  const [thread, all, queries] = [process.threadCpuUsage(), process.cpuUsage(), pool.queries];
  const { applied } = await variant.run(jobs);
  const [t, a] = [process.threadCpuUsage(thread), process.cpuUsage(all)];
  if (applied !== JOBS) throw new Error(`${variant.label}: applied ${applied} of ${JOBS}`);
  const per = (us: NodeJS.CpuUsage) => (us.user + us.system) / applied;
  return { thread: per(t), process: per(a), queries: (pool.queries - queries) / applied };
}

type Samples = { thread: number[]; process: number[]; queries: number[] };
const samples: Record<string, Samples> = Object.fromEntries(
  variants.map((v) => [v.label, { thread: [], process: [], queries: [] }]),
);
for (let round = 0; round <= ROUNDS; round++) {
  for (let i = 0; i < variants.length; i++) {
    const variant = variants[(i + round) % variants.length] as Variant;
    const s = await timed(variant);
    if (round === 0) continue; // warm-up: JIT, caches
    for (const key of ["thread", "process", "queries"] as const) samples[variant.label]?.[key].push(s[key]);
  }
}
const cpu = (label: string, key: keyof Samples = "thread") => median(samples[label]?.[key] ?? []);

// --- Where the time goes: self time by module and by function ----------------------------------

type CallFrame = { functionName: string; url: string; lineNumber: number };
type Profile = { nodes: { id: number; callFrame: CallFrame }[]; samples: number[]; timeDeltas: number[] };

/** The module a frame belongs to: a package, a file of the checkout, Node's own, or V8's. */
function moduleOf(frameUrl: string, fn: string): string {
  if (frameUrl === "") return fn.startsWith("(") ? fn : "(native)";
  const at = frameUrl.lastIndexOf("/node_modules/");
  if (at !== -1) {
    const [scope, name] = frameUrl.slice(at + "/node_modules/".length).split("/");
    return scope?.startsWith("@") ? `${scope}/${name}` : (scope ?? frameUrl);
  }
  if (frameUrl.startsWith("node:")) return frameUrl;
  const file = frameUrl.startsWith("file://") ? new URL(frameUrl).pathname : frameUrl;
  return file.startsWith(ROOT) ? path.relative(ROOT, file) : file;
}

async function profiled(variant: Variant) {
  const session = new Session();
  session.connect();
  await session.post("Profiler.enable");
  await session.post("Profiler.setSamplingInterval", { interval: 200 });
  const jobs = driver.makeJobs(JOBS);
  await session.post("Profiler.start");
  await variant.run(jobs);
  const { profile } = (await session.post("Profiler.stop")) as unknown as { profile: Profile };
  session.disconnect();
  if (argv["save-profiles"]) {
    writeFileSync(path.join(argv["save-profiles"], `${variant.label}.cpuprofile`), JSON.stringify(profile));
  }
  const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const [fns, mods] = [new Map<string, number>(), new Map<string, number>()];
  let total = 0;
  profile.samples.forEach((id, i) => {
    const f = frames.get(id);
    const us = profile.timeDeltas[i + 1] ?? 0; // a sample's time runs until the next one
    if (!f || f.functionName === "(idle)" || f.functionName === "(program)") return;
    total += us;
    const mod = moduleOf(f.url, f.functionName);
    const fn = `${f.functionName || "(anonymous)"} ${mod}:${f.lineNumber + 1}`;
    fns.set(fn, (fns.get(fn) ?? 0) + us);
    mods.set(mod, (mods.get(mod) ?? 0) + us);
  });
  const top = (m: Map<string, number>) =>
    [...m]
      .sort((x, y) => y[1] - x[1])
      .slice(0, TOP)
      .map(([name, us]) => ({ name, usPerEffect: us / JOBS, share: us / total }));
  return { usPerEffect: total / JOBS, modules: top(mods), functions: top(fns) };
}
const profiles = argv["no-profile"]
  ? undefined
  : { harness: await profiled(byLabel("harness")), bare: await profiled(byLabel("bare")) };

// --- Report ------------------------------------------------------------------------------------

const ratio = cpu("harness") / cpu("bare");
/** The harness's own: what `harness` costs beyond the benchmark's driver and the bare loop. */
const harnessOwnUs = cpu("harness") - cpu("driver") - cpu("bare");
if (argv.json) {
  console.log(JSON.stringify({ root: ROOT, mode: MODE, jobs: JOBS, samples, ratio, harnessOwnUs, profiles }));
} else {
  const f = (n: number) => n.toFixed(1);
  console.log(
    `fake database, ${MODE}, batches of ${BATCH}, concurrency ${CONCURRENCY}, ${JOBS} jobs (${ROOT})`,
  );
  console.log(
    `CPU per effect over ${ROUNDS} rounds: median main thread µs [each round]; all threads; queries`,
  );
  for (const { label } of variants) {
    const rounds = samples[label]?.thread.map(f).join(", ");
    console.log(
      `  ${label.padEnd(8)}${f(cpu(label)).padStart(7)} [${rounds}]; ${f(cpu(label, "process"))}; ${cpu(label, "queries")}`,
    );
  }
  console.log(
    `harness / bare ${ratio.toFixed(1)}×; the harness's own ${f(harnessOwnUs)} µs (harness − driver − bare)`,
  );
  for (const [label, p] of Object.entries(profiles ?? {})) {
    console.log(`\n${label}: ${f(p.usPerEffect)} µs per effect sampled (the profiler's own cost included)`);
    for (const [by, rows] of Object.entries({ module: p.modules, function: p.functions })) {
      console.log(`  by ${by}, self:`);
      for (const r of rows)
        console.log(
          `  ${f(r.usPerEffect).padStart(7)} µs ${(r.share * 100).toFixed(1).padStart(5)}%  ${r.name}`,
        );
    }
  }
}
