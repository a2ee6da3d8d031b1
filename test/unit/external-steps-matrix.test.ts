/**
 * The external-steps crash matrix's classification (bench/external-steps/attribution.ts,
 * summary.ts, bench/lib/crash-trials.ts): each job's effects are the provider's ledger entries for
 * it (0 = lost, 1 = once, 2+ = doubled); its calls are the requests that made one of them or,
 * making none, carried a key of it; the rows sum trials per variant and point; the targets hold
 * jobfence to 0 doubled and 0 lost at its worst point and need each control to double at least
 * once, and a variant that did not run never meets.
 */
import { describe, expect, it } from "vitest";
import { tallyByJob } from "../../bench/external-steps/attribution.ts";
import { chargeRequestOf, jobIdOfRequest } from "../../bench/external-steps/charge.ts";
import type { TrialResult } from "../../bench/external-steps/matrix.ts";
import type { LedgerEntry, RequestEntry } from "../../bench/external-steps/provider.ts";
import { crashRows, crashTargets } from "../../bench/external-steps/summary.ts";
import type { Point, VariantKey } from "../../bench/external-steps/systems.ts";
import { classifyEffects, killedRecord } from "../../bench/lib/crash-trials.ts";
import { met } from "../../bench/lib/define.ts";

describe("classifyEffects", () => {
  it("counts a job applied once, twice or more, or never, and only the jobs asked about", () => {
    const applied = new Map([
      ["a", 1],
      ["b", 2],
      ["c", 5],
      ["elsewhere", 3],
    ]);
    expect(classifyEffects(["a", "b", "c", "d"], applied)).toEqual({ jobs: 4, once: 1, doubled: 2, lost: 1 });
    expect(classifyEffects(["a", "a"], applied)).toEqual({ jobs: 1, once: 1, doubled: 0, lost: 0 });
    expect(classifyEffects([], applied)).toEqual({ jobs: 0, once: 0, doubled: 0, lost: 0 });
  });
});

describe("killedRecord", () => {
  it("moves the kill from the first record to the last across trials, the middle for one trial", () => {
    expect([0, 1, 2, 3, 4].map((t) => killedRecord(t, 5, 3))).toEqual([1, 2, 2, 3, 3]);
    expect(killedRecord(0, 1, 3)).toBe(2);
    expect(killedRecord(0, 1, 1)).toBe(1);
  });
});

/** A ledger entry for `jobId`'s charge. */
const effect = (seq: number, jobId: string, key: string | null = null): LedgerEntry => ({
  seq,
  id: `ch_${seq}`,
  kind: "charge",
  key,
  request: chargeRequestOf({ jobId, userId: "u", points: 1 }),
  at: "2026-01-01T00:00:00.000Z",
});
const request = (
  seq: number,
  outcome: RequestEntry["outcome"],
  key: string | null,
  effectId: string | null,
): RequestEntry => ({
  seq,
  method: "POST",
  path: "/v1/charges",
  key,
  outcome,
  status: outcome === "refused" ? 409 : 200,
  effect: effectId,
  at: "2026-01-01T00:00:00.000Z",
});

describe("tallyByJob", () => {
  it("reads the job a charge is for from its request", () => {
    expect(jobIdOfRequest(chargeRequestOf({ jobId: "job-1", userId: "u", points: 2 }))).toBe("job-1");
    expect(jobIdOfRequest({ description: "something else" })).toBeUndefined();
    expect(jobIdOfRequest(null)).toBeUndefined();
  });

  it("gives each job its effects, and its calls by effect made or by key", () => {
    const keys = new Map([
      ["key-a", "a"],
      ["key-b", "b"],
    ]);
    const tally = tallyByJob(
      ["a", "b", "c"],
      // a charged once (keyed), b twice (keyless), another trial's job once.
      [effect(1, "a", "key-a"), effect(2, "b"), effect(3, "b"), effect(4, "other")],
      [
        request(1, "acted", "key-a", "ch_1"),
        request(2, "replayed", "key-a", null),
        request(3, "acted", null, "ch_2"),
        request(4, "acted", null, "ch_3"),
        request(5, "refused", "key-b", null),
        request(6, "failed", null, null),
        request(7, "acted", null, "ch_4"),
      ],
      (key) => keys.get(key),
    );
    expect(Object.fromEntries(tally.byJob)).toEqual({
      a: { effects: 1, calls: 2 },
      b: { effects: 2, calls: 3 },
      c: { effects: 0, calls: 0 },
    });
    // The keyless failed request, and the other job's.
    expect(tally.unattributed).toBe(2);
  });
});

/** A trial of 3 jobs: `killed` effects for the killed job, 1 for the others. */
function trial(variant: VariantKey, point: Point, killed: number): TrialResult {
  const others = 2;
  return {
    variant,
    point,
    nth: 2,
    provider: {
      jobs: 3,
      once: others + (killed === 1 ? 1 : 0),
      doubled: killed > 1 ? 1 : 0,
      lost: killed === 0 ? 1 : 0,
    },
    effects: others + killed,
    calls: others + Math.max(killed, 1),
    unattributed: 0,
    killedEffects: killed,
    killedCalls: Math.max(killed, 1),
    database: { jobs: 3, once: 3, doubled: 0, lost: 0 },
    neverAcked: 0,
    killedAfterMs: 10,
  };
}

describe("crashRows and crashTargets", () => {
  const expected = { K1: 1, K2: 2, K3: 2, K4: 1 } as const;
  const controls = (["bare", "powertools"] as const).flatMap((variant) =>
    (Object.keys(expected) as Point[]).map((point) =>
      trial(variant, point, variant === "powertools" && point === "K3" ? 1 : expected[point]),
    ),
  );

  it("sums a variant's trials at each point", () => {
    const rows = crashRows([trial("bare", "K2", 2), trial("bare", "K2", 3), ...controls], ["bare"]);
    expect(rows.map((r) => r.point)).toEqual(["K1", "K2", "K3", "K4"]);
    expect(rows[1]).toMatchObject({
      trials: 3,
      jobs: 9,
      effects: 6 + 2 + 3 + 2,
      doubled: 3,
      once: 6,
      lost: 0,
      killedEffects: "2×2, 3×1",
      databaseNotOnce: 0,
    });
    expect(rows[0]).toMatchObject({ trials: 1, doubled: 0, killedEffects: "1×1" });
  });

  it("meets every target when jobfence charges each job once and both controls double", () => {
    const jobfence = (["K1", "K2", "K3", "K4"] as const).map((point) => trial("jobfence", point, 1));
    const targets = crashTargets(crashRows([...jobfence, ...controls], ["jobfence", "bare", "powertools"]));
    expect(targets.map((t) => [t.measured, met(t)])).toEqual([
      [0, true],
      [0, true],
      [2, true],
      [1, true],
    ]);
  });

  it("misses when jobfence doubles or loses a job at any one point, naming where", () => {
    const jobfence = [trial("jobfence", "K1", 1), trial("jobfence", "K2", 2), trial("jobfence", "K3", 0)];
    const [doubled, lost] = crashTargets(
      crashRows([...jobfence, ...controls], ["jobfence", "bare", "powertools"]),
    );
    expect(doubled).toMatchObject({ measured: 1, cause: "jobfence job.step K2: 1 of 3" });
    expect(lost).toMatchObject({ measured: 1, cause: "jobfence job.step K3: 1 of 3" });
    expect([doubled, lost].map((t) => t && met(t))).toEqual([false, false]);
  });

  it("misses a control that never doubled, and a variant that did not run", () => {
    const onceEverywhere = (["K1", "K2", "K3", "K4"] as const).map((point) => trial("bare", point, 1));
    const targets = crashTargets(crashRows(onceEverywhere, ["bare"]));
    expect(targets.map((t) => [t.measured, met(t)])).toEqual([
      [Number.NaN, false],
      [Number.NaN, false],
      [0, false],
      [Number.NaN, false],
    ]);
    expect(targets[0]?.cause).toBe("jobfence job.step did not run");
    expect(targets[2]?.cause).toMatch(/cannot see a double/);
  });
});
