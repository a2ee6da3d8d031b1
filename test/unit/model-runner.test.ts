/**
 * The model's runner (scripts/model.ts) stays in step with the model (model/*.pml) and its map in
 * docs/reliability.md, without SPIN: every witness switch the model reads is run, and only those;
 * every scenario and probe it defines is run; every assertion names an invariant the runner knows.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { INVARIANTS, PROBES, panVerdict, SCENARIOS, WITNESSES } from "../../scripts/model.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const MODEL_DIR = join(ROOT, "model");
const files = readdirSync(MODEL_DIR).filter((f) => f.endsWith(".pml"));
const sources = new Map(files.map((f) => [f, readFileSync(join(MODEL_DIR, f), "utf8")]));
const all = [...sources.values()].join("\n");
const main = sources.get("jobfence.pml") ?? "";

function sorted(values: Iterable<string | number>): string[] {
  return [...new Set([...values].map(String))].sort();
}

describe("npm run model and the model", () => {
  it("runs exactly the witness switches the model reads", () => {
    const read = [...all.matchAll(/#if(?:n?def)?\s+(?:.*defined\()?\s*(W\d\w*)/g)].map((m) => m[1] as string);
    const alsoInDefined = [...all.matchAll(/defined\((W\d\w*)\)/g)].map((m) => m[1] as string);
    expect(sorted([...read, ...alsoInDefined])).toEqual(sorted(WITNESSES.map((w) => w.flag)));
  });

  it("runs every scenario the model builds, each witness and probe in one of them", () => {
    const built = [...main.matchAll(/#(?:el)?if SCENARIO == (\d+)/g)].map((m) => Number(m[1]));
    expect(sorted(SCENARIOS.map((s) => s.id))).toEqual(sorted(built));
    const ids = new Set(SCENARIOS.map((s) => s.id));
    for (const { scenario } of [...WITNESSES, ...PROBES]) expect(ids.has(scenario)).toBe(true);
  });

  it("runs the step's witnesses and probes in a scenario that has the step (model/step.pml)", () => {
    const blocks = main.split(/^#(?:el)?if SCENARIO == /m).slice(1);
    const withSteps = blocks
      .filter((b) => /^#define WITH_STEPS\b/m.test(b.slice(0, b.search(/^#(?:elif|endif)/m))))
      .map((b) => Number.parseInt(b, 10));
    expect(withSteps.length).toBeGreaterThan(0);
    const step = sources.get("step.pml") ?? "";
    const flags = new Set([...step.matchAll(/#ifn?def\s+(W\d\w*)/g)].map((m) => m[1]));
    const stepWitnesses = WITNESSES.filter((w) => flags.has(w.flag));
    expect(stepWitnesses.map((w) => w.flag).sort()).toEqual(["W10", "W8", "W9"]);
    for (const w of stepWitnesses) expect(withSteps).toContain(w.scenario);
    const guarded = main.slice(main.indexOf("#ifdef WITH_STEPS\n#define P_"));
    const stepProbes = [...guarded.slice(0, guarded.indexOf("#endif")).matchAll(/^#define (P_\w+)/gm)];
    expect(stepProbes.length).toBeGreaterThan(0);
    for (const [, macro] of stepProbes) {
      expect(withSteps).toContain(PROBES.find((p) => p.macro === macro)?.scenario);
    }
  });

  it("runs every probe the model defines", () => {
    const defined = [...main.matchAll(/^#define (P_\w+)/gm)].map((m) => m[1] as string);
    expect(sorted(PROBES.map((p) => p.macro))).toEqual(sorted(defined));
  });

  it("knows the invariant every assertion names", () => {
    const named = [...all.matchAll(/assert\((\w+) &&/g)].map((m) => m[1] as string);
    expect(named.length).toBeGreaterThan(0);
    expect(sorted(named)).toEqual(sorted([...INVARIANTS, "model_bound", "model_probe"]));
    for (const w of WITNESSES) expect(INVARIANTS).toContain(w.breaks);
  });

  it("is mapped in docs/reliability.md: every witness, model file and invariant", () => {
    const doc = readFileSync(join(ROOT, "docs", "reliability.md"), "utf8");
    const section = doc.slice(doc.indexOf("## The model"));
    expect(section.length).toBeGreaterThan(0);
    for (const w of WITNESSES) expect(section).toContain(`\`${w.flag}\``);
    for (const f of files) expect(section).toContain(`model/${f}`);
    for (const i of INVARIANTS) expect(section).toContain(`\`${i}\``);
  });
});

describe("panVerdict", () => {
  it("reads a full search without errors as holding, with its state count", () => {
    const out = "State-vector 180 byte, depth reached 120, errors: 0\n   504142 states, stored\n";
    expect(panVerdict(out)).toEqual({ kind: "holds", states: 504142 });
  });

  it("names the invariant of the first violated assertion", () => {
    const out =
      "pan:1: assertion violated (one_effect_per_job&&(applied[j]<=1)) (at depth 92)\nerrors: 1\n  55 states, stored";
    expect(panVerdict(out)).toEqual({ kind: "violated", assertion: "one_effect_per_job" });
    expect(panVerdict("pan:1: assertion violated (model_probe&& !((lost>0))) (at depth 3)")).toEqual({
      kind: "violated",
      assertion: "model_probe",
    });
  });

  it("reports a deadlock and a search that was cut short, never as holding", () => {
    expect(panVerdict("pan:1: invalid end state (at depth 87)\nerrors: 1\n 82 states, stored")).toEqual({
      kind: "invalid-end-state",
    });
    expect(panVerdict("error: max search depth too small\nerrors: 0\n 10 states, stored").kind).toBe(
      "incomplete",
    );
    expect(panVerdict("pan: reached -DMEMLIM bound\nerrors: 0\n 10 states, stored").kind).toBe("incomplete");
  });
});
