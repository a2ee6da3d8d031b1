/**
 * `npm run bench -- --only harness-cpu`: client CPU per effect of the harness against a bare loop,
 * with the database taken out: a pg.Pool stand-in whose clients answer every statement at once
 * (bench/lib/fake-pool.ts), so what is timed is JavaScript alone. The figures are hot (the CPU's
 * caches are ours alone); on a real connection every µs here costs several, the server running
 * between our steps. It breaks down the first of issue 31's targets, which bench/throughput.ts
 * measures on a real database (client CPU per effect, harness ÷ bare).
 *
 *   harness  benchConsumer (bench/lib/harness-driver.ts) through harnessVariant: SQS batches of `batch`
 *   bare     harness-driver's bareVariant: BEGIN; awardPoints(...); COMMIT on a pooled client
 *   driver   harnessVariant's own work with a handler that answers at once: building the SQS
 *            events, the Lambda context, counting failures. It is in `harness`, but not the harness's
 *
 * Main-thread CPU (process.threadCpuUsage, user + system) per effect, median over rounds in rotating
 * order after a warm-up round, then one run of `harness` and `bare` under the inspector's sampling
 * profiler: the top modules and functions by self time. `--root` runs another checkout's
 * bench/lib/harness-driver.ts on the same fake: run two checkouts alternately to compare them.
 */
import { existsSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { z } from "zod";
import { defineBenchmark } from "../lib/define.ts";
import { FakePool } from "../lib/fake-pool.ts";
import {
  compareVariants,
  type PerEffectMeter,
  processCpuMeter,
  type Variant,
} from "../lib/harness-driver.ts";
import { ratio } from "../lib/report.ts";

const options = z.object({
  jobs: z.coerce.number().int().positive().default(20000).describe("jobs per variant per round"),
  reps: z.coerce.number().int().positive().default(5).describe("measured rounds after a warm-up round"),
  concurrency: z.coerce.number().int().positive().default(8).describe("concurrent invocations"),
  batch: z.coerce.number().int().positive().default(10).describe("records per SQS batch"),
  mode: z.enum(["per-record", "batch"]).default("per-record").describe("the harness's commit mode"),
  root: z
    .string()
    .default(path.resolve(import.meta.dirname, "../.."))
    .describe("the checkout whose harness runs"),
  top: z.coerce.number().int().positive().default(20).describe("modules and functions listed by self time"),
  noProfile: z.boolean().default(false).describe("skip the profiled runs"),
  saveProfiles: z
    .string()
    .default("")
    .describe("a folder for harness.cpuprofile and bare.cpuprofile (DevTools)"),
});

type Driver = typeof import("../lib/harness-driver.ts");

type CallFrame = { functionName: string; url: string; lineNumber: number };
type Profile = { nodes: { id: number; callFrame: CallFrame }[]; samples: number[]; timeDeltas: number[] };

/** The module a frame belongs to: a package, a file of the checkout, Node's own, or V8's. */
function moduleOf(root: string, frameUrl: string, fn: string): string {
  if (frameUrl === "") return fn.startsWith("(") ? fn : "(native)";
  const at = frameUrl.lastIndexOf("/node_modules/");
  if (at !== -1) {
    const [scope, name] = frameUrl.slice(at + "/node_modules/".length).split("/");
    return scope?.startsWith("@") ? `${scope}/${name}` : (scope ?? frameUrl);
  }
  if (frameUrl.startsWith("node:")) return frameUrl;
  const file = frameUrl.startsWith("file://") ? new URL(frameUrl).pathname : frameUrl;
  return file.startsWith(root) ? path.relative(root, file) : file;
}

/** One run of `variant` under the sampling profiler: self time by module and by function. */
async function profiled(variant: Variant, driver: Driver, o: z.output<typeof options>) {
  const session = new Session();
  session.connect();
  await session.post("Profiler.enable");
  await session.post("Profiler.setSamplingInterval", { interval: 200 });
  const jobs = driver.makeJobs(o.jobs);
  await session.post("Profiler.start");
  await variant.run(jobs);
  const { profile } = (await session.post("Profiler.stop")) as unknown as { profile: Profile };
  session.disconnect();
  if (o.saveProfiles)
    writeFileSync(path.join(o.saveProfiles, `${variant.label}.cpuprofile`), JSON.stringify(profile));
  const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const [fns, mods] = [new Map<string, number>(), new Map<string, number>()];
  let total = 0;
  profile.samples.forEach((id, i) => {
    const f = frames.get(id);
    const us = profile.timeDeltas[i + 1] ?? 0; // a sample's time runs until the next one
    if (!f || f.functionName === "(idle)" || f.functionName === "(program)") return;
    total += us;
    const mod = moduleOf(o.root, f.url, f.functionName);
    const fn = `${f.functionName || "(anonymous)"} ${mod}:${f.lineNumber + 1}`;
    fns.set(fn, (fns.get(fn) ?? 0) + us);
    mods.set(mod, (mods.get(mod) ?? 0) + us);
  });
  const top = (m: Map<string, number>) =>
    [...m]
      .sort((x, y) => y[1] - x[1])
      .slice(0, o.top)
      .map(([name, us]) => ({ name, usPerEffect: us / o.jobs, share: us / total }));
  return { usPerEffect: total / o.jobs, modules: top(mods), functions: top(fns) };
}

const median = (xs: readonly number[] = []) => [...xs].sort((a, b) => a - b)[xs.length >> 1] ?? Number.NaN;
const f1 = (n: number) => n.toFixed(1);

await defineBenchmark({
  name: "harness-cpu",
  title: "client CPU per effect, harness vs the bare loop, on a database that answers at once",
  method:
    "a pg.Pool stand-in answering every statement at once; main-thread CPU per effect (process.threadCpuUsage), median over rounds in rotating order after a warm-up; then one profiled run each of harness and bare",
  options,
  quick: { jobs: 2000, reps: 2 },
  database: false,
  async setup({ options: o }) {
    const driverPath = path.join(o.root, "bench/lib/harness-driver.ts");
    if (!existsSync(driverPath)) throw new Error(`no bench/lib/harness-driver.ts under ${o.root}`);
    const driver = (await import(pathToFileURL(driverPath).href)) as Driver;
    const pool = new FakePool();
    const fake = pool as unknown as Parameters<Driver["bareVariant"]>[1];
    const answerAtOnce = Object.assign(async () => ({ batchItemFailures: [] }), { consumer: "award-points" });
    const variants: Variant[] = [
      driver.harnessVariant("harness", fake, "postgres://fake@127.0.0.1:1/fake", {
        commitMode: o.mode,
        batchSize: o.batch,
        concurrency: o.concurrency,
      }),
      driver.bareVariant("bare", fake, o.concurrency),
      {
        label: "driver",
        // harnessVariant's own work around a handler that answers at once (no record fails).
        run: async (jobs) => ({
          applied: jobs.length,
          ms: await driver.runConcurrently(driver.batchesOf(jobs, o.batch), o.concurrency, (records) =>
            driver.invokeBatch(answerAtOnce as unknown as Parameters<Driver["invokeBatch"]>[0], records, 0),
          ),
        }),
      },
    ];
    return { driver, pool, variants };
  },
  async run({ options: o, table }, { driver, pool, variants }) {
    const thread: PerEffectMeter = {
      read: () => {
        const { user, system } = process.threadCpuUsage();
        return user + system;
      },
      perEffect: {},
    };
    const all = processCpuMeter();
    const queries: PerEffectMeter = { read: () => pool.queries, perEffect: {} };
    await compareVariants(variants, { reps: o.reps, jobs: o.jobs, meters: [thread, all, queries] });
    const cpu = (label: string) => median(thread.perEffect[label]);
    table(
      `CPU per effect, µs, median over ${o.reps} rounds (${o.mode}, batches of ${o.batch}, concurrency ${o.concurrency}, ${o.root})`,
      ["variant", "main thread", "each round", "all threads", "queries"],
      variants.map(({ label }) => [
        label,
        f1(cpu(label)),
        (thread.perEffect[label] ?? []).map(f1).join(", "),
        f1(median(all.perEffect[label])),
        String(median(queries.perEffect[label])),
      ]),
    );
    const profiles: Record<string, Awaited<ReturnType<typeof profiled>>> = o.noProfile
      ? {}
      : {
          harness: await profiled(variants[0] as Variant, driver, o),
          bare: await profiled(variants[1] as Variant, driver, o),
        };
    for (const [label, p] of Object.entries(profiles)) {
      for (const [by, rows] of Object.entries({ module: p.modules, function: p.functions })) {
        table(
          `${label}: self time by ${by}, µs per effect (${f1(p.usPerEffect)} sampled, the profiler's own cost included)`,
          ["µs", "share", by],
          rows.map((r) => [f1(r.usPerEffect), `${(r.share * 100).toFixed(1)} %`, r.name]),
        );
      }
    }
    return {
      us: { harness: cpu("harness"), bare: cpu("bare"), driver: cpu("driver") },
      samples: { thread: thread.perEffect, all: all.perEffect, queries: queries.perEffect },
      profiles,
    };
  },
  verdict: ({ us }) => ({
    targets: [],
    notes: [
      `harness ÷ bare with no database: ${ratio(us.harness / us.bare)}; the harness's own JavaScript ${f1(us.harness - us.driver - us.bare)} µs per effect (harness − driver − bare), which a real connection's protocol and kernel work multiply (bench/throughput.ts has the target on a real database)`,
    ],
  }),
});
