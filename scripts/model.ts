/**
 * `npm run model`: checks the Promela model of the protocol (model/jobfence.pml) exhaustively with
 * SPIN, in every scenario, then every regression witness (a historical defect put back, which must
 * yield a counterexample naming the invariant it breaks), then the reachability probes (end states
 * that must be reachable, so that a model which holds is not holding because a path went missing).
 * docs/reliability.md, "The model", maps the model to the code.
 *
 * Each check is `spin -a`, `gcc -DSAFETY -DCOLLAPSE` (exhaustive, lossless: never BITSTATE or hash
 * compaction) and `./pan`, in a temporary directory. One line per check.
 *
 * Exit codes: 0 every scenario holds, every witness is caught and every probe reached; 1 otherwise;
 * 2 `spin` or `gcc` is missing.
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The model's entry file; it includes the others in model/. */
export const MODEL_FILE = fileURLToPath(new URL("../model/jobfence.pml", import.meta.url));

/** The invariants the model asserts (each assert names one: pan's report says which broke). */
export const INVARIANTS = [
  "one_effect_per_job",
  "every_message_ends",
  "no_consumer_acts_for_another",
  "one_external_effect_per_job",
  "work_sees_the_effect",
] as const;

/** One of {@link INVARIANTS}. */
export type Invariant = (typeof INVARIANTS)[number];

/** A world the model builds (`-DSCENARIO=n`); the real protocol must hold in each. */
export interface Scenario {
  readonly id: number;
  readonly name: string;
}

/** Every scenario of model/jobfence.pml. */
export const SCENARIOS: readonly Scenario[] = [
  { id: 1, name: "deliveries of a conflict (two bodies under one job id)" },
  { id: 5, name: "deliveries of duplicates (a visibility lapse, a lost COMMIT answer)" },
  { id: 6, name: "a step: an external call before the fence, checkpointed, the provider's window" },
  { id: 2, name: "replays, bulk chunks and discards of a failing job" },
  { id: 3, name: "the TTL: cleanup, backstop drain, replays" },
  { id: 4, name: "the outbox: relay after COMMIT, scheduled relay and sweep, a forger" },
];

/** A historical defect put back (`-D<flag>`), checked in the scenario that exposes it. */
export interface Witness {
  readonly flag: string;
  readonly name: string;
  readonly scenario: number;
  /** The invariant its counterexample must break. */
  readonly breaks: Invariant;
}

/** Every regression witness: each must be caught. */
export const WITNESSES: readonly Witness[] = [
  { flag: "W1", name: "the folded second failure", scenario: 1, breaks: "every_message_ends" },
  { flag: "W2", name: "replay after the TTL", scenario: 3, breaks: "one_effect_per_job" },
  { flag: "W3", name: "the cleanup racing a dead-letter write", scenario: 3, breaks: "one_effect_per_job" },
  { flag: "W4", name: "a failure during a replay", scenario: 2, breaks: "every_message_ends" },
  {
    flag: "W5_DRAIN",
    name: "copies outliving the fence (a backstop copy drained late)",
    scenario: 3,
    breaks: "one_effect_per_job",
  },
  {
    flag: "W5_RELAY",
    name: "copies outliving the fence (an outbox row sent late)",
    scenario: 4,
    breaks: "one_effect_per_job",
  },
  { flag: "W6", name: "the forged undelivered row", scenario: 4, breaks: "no_consumer_acts_for_another" },
  {
    flag: "W7",
    name: "a FIFO replay retried after a lost answer",
    scenario: 2,
    breaks: "every_message_ends",
  },
  {
    flag: "W8",
    name: "a step's key not derived from the job (a fresh key per attempt)",
    scenario: 6,
    breaks: "one_external_effect_per_job",
  },
  {
    flag: "W9",
    name: "a step's result not checkpointed before the fence",
    scenario: 6,
    breaks: "one_external_effect_per_job",
  },
  {
    flag: "W10",
    name: "a step called again after the provider's window, its first call's outcome unknown",
    scenario: 6,
    breaks: "one_external_effect_per_job",
  },
];

/** An end state of the real model that must be reachable (`-DPROBE=<macro>`). */
export interface Probe {
  readonly macro: string;
  readonly scenario: number;
}

/** Every reachability probe of model/jobfence.pml. */
export const PROBES: readonly Probe[] = [
  { macro: "P_conflict", scenario: 1 },
  { macro: "P_exhausted", scenario: 1 },
  { macro: "P_interrupted", scenario: 1 },
  { macro: "P_lost_commit_applied", scenario: 5 },
  { macro: "P_replayed_applied", scenario: 2 },
  { macro: "P_failed_again_after_replay", scenario: 2 },
  { macro: "P_discarded", scenario: 2 },
  { macro: "P_bulk_replayed_applied", scenario: 2 },
  { macro: "P_replay_retried_after_lost_answer", scenario: 2 },
  { macro: "P_unrecorded_superseded_after_ttl", scenario: 3 },
  { macro: "P_outlived_backstop_copy", scenario: 3 },
  { macro: "P_fence_deleted", scenario: 3 },
  { macro: "P_outlived_outbox_row", scenario: 4 },
  { macro: "P_undelivered_replayed", scenario: 4 },
  { macro: "P_step_replayed_by_provider", scenario: 6 },
  { macro: "P_step_result_reused_after_window", scenario: 6 },
  { macro: "P_step_interrupted_unrecorded", scenario: 6 },
  { macro: "P_step_outcome_unknown", scenario: 6 },
];

/** What pan said about one check. */
export type PanVerdict =
  | { readonly kind: "holds"; readonly states: number }
  | { readonly kind: "violated"; readonly assertion: string }
  | { readonly kind: "invalid-end-state" }
  | { readonly kind: "incomplete"; readonly why: string };

/** Reads pan's report: a full search with no error, the first violated assertion's name, or why it is not conclusive. */
export function panVerdict(output: string): PanVerdict {
  const violated = /assertion violated \(\s*!?\(*\s*([A-Za-z_]\w*)/.exec(output);
  if (violated?.[1]) return { kind: "violated", assertion: violated[1] };
  if (/invalid end state/.test(output) && !/errors: 0\b/.test(output)) return { kind: "invalid-end-state" };
  if (/max search depth too small/.test(output))
    return { kind: "incomplete", why: "max search depth too small" };
  if (/out of memory|reached -DMEMLIM bound/.test(output))
    return { kind: "incomplete", why: "out of memory" };
  const states = /(\d+) states, stored/.exec(output);
  if (/errors: 0\b/.test(output) && states?.[1]) return { kind: "holds", states: Number(states[1]) };
  return { kind: "incomplete", why: "pan's report was not understood" };
}

interface Check {
  readonly label: string;
  readonly defines: readonly string[];
  /** Searches expected to end at a counterexample are short: compiling pan unoptimised is faster. */
  readonly optimise: boolean;
  /** Whether the verdict is the expected one, and the line to print. */
  readonly judge: (v: PanVerdict) => { ok: boolean; text: string };
}

function describe(v: PanVerdict): string {
  switch (v.kind) {
    case "holds":
      return `holds (${v.states.toLocaleString("en")} states)`;
    case "violated":
      return `caught: ${v.assertion}`;
    case "invalid-end-state":
      return "caught: a deadlock (invalid end state)";
    case "incomplete":
      return `inconclusive: ${v.why}`;
  }
}

function checks(): Check[] {
  const model = SCENARIOS.map(
    (s): Check => ({
      label: `model, scenario ${s.id}, ${s.name}`,
      defines: [`-DSCENARIO=${s.id}`],
      optimise: true,
      judge: (v) => ({ ok: v.kind === "holds", text: describe(v) }),
    }),
  );
  const witnesses = WITNESSES.map(
    (w): Check => ({
      label: `witness ${w.flag}, ${w.name}`,
      defines: [`-DSCENARIO=${w.scenario}`, `-D${w.flag}`],
      optimise: false,
      judge: (v) => {
        const ok = v.kind === "violated" && v.assertion === w.breaks;
        return { ok, text: ok ? describe(v) : `${describe(v)} (expected caught: ${w.breaks})` };
      },
    }),
  );
  const probes = PROBES.map(
    (p): Check => ({
      label: `probe ${p.macro}, scenario ${p.scenario}`,
      defines: [`-DSCENARIO=${p.scenario}`, `-DPROBE=${p.macro}`],
      optimise: false,
      judge: (v) => {
        const ok = v.kind === "violated" && v.assertion === "model_probe";
        return { ok, text: ok ? "reached" : `not reached: ${describe(v)}` };
      },
    }),
  );
  return [...model, ...witnesses, ...probes];
}

function run(
  command: string,
  args: readonly string[],
  cwd: string,
): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.on("error", reject);
    child.on("close", (code) => resolve({ code: code ?? 1, output }));
  });
}

/** Builds and runs pan for one set of defines; pan's report. */
async function verify(defines: readonly string[], optimise: boolean): Promise<PanVerdict> {
  const dir = await mkdtemp(join(tmpdir(), "jobfence-model-"));
  try {
    const spin = await run("spin", [...defines, "-a", MODEL_FILE], dir);
    if (spin.code !== 0) return { kind: "incomplete", why: `spin failed: ${spin.output.trim()}` };
    // SAFETY: no cycle detection (the invariants are safety properties); COLLAPSE: lossless state
    // compression. MEMLIM bounds memory; a search that hits it is reported inconclusive.
    const gcc = await run(
      "gcc",
      [optimise ? "-O2" : "-O0", "-w", "-DSAFETY", "-DCOLLAPSE", "-DMEMLIM=1536", "-o", "pan", "pan.c"],
      dir,
    );
    if (gcc.code !== 0) return { kind: "incomplete", why: `gcc failed: ${gcc.output.trim()}` };
    const pan = await run("./pan", ["-m20000"], dir);
    return panVerdict(pan.output);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function missingTools(): string[] {
  return ["spin", "gcc"].filter((tool) => {
    const probe = spawnSync(tool, [tool === "spin" ? "-V" : "--version"], { stdio: "ignore" });
    return probe.error !== undefined;
  });
}

async function main(): Promise<number> {
  const missing = missingTools();
  if (missing.length > 0) {
    console.error(
      `npm run model needs ${missing.join(" and ")} on PATH: on Debian or Ubuntu, apt-get install -y spin gcc`,
    );
    return 2;
  }
  const started = performance.now();
  const all = checks();
  const lines: string[] = new Array(all.length);
  let failed = 0;
  let next = 0;
  // Two at a time at most: each pan takes a core and up to MEMLIM of memory.
  const workers = Math.max(1, Math.min(2, availableParallelism()));
  await Promise.all(
    Array.from({ length: workers }, async () => {
      for (let i = next++; i < all.length; i = next++) {
        const check = all[i] as Check;
        const t = performance.now();
        const verdict = await verify(check.defines, check.optimise);
        const { ok, text } = check.judge(verdict);
        if (!ok) failed++;
        lines[i] =
          `${ok ? "ok  " : "FAIL"} ${check.label}: ${text} [${((performance.now() - t) / 1000).toFixed(1)} s]`;
      }
    }),
  );
  for (const line of lines) console.log(line);
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  console.log(
    failed === 0
      ? `model: every scenario holds, ${WITNESSES.length} witnesses caught, ${PROBES.length} probes reached (${seconds} s)`
      : `model: ${failed} of ${all.length} checks failed (${seconds} s)`,
  );
  return failed === 0 ? 0 : 1;
}

if (import.meta.main) process.exitCode = await main();
