/**
 * Interleavings, family 3: a delivery's failure during an operator's decision. A replayed message
 * that fails again (poison, a permanent error, its last attempt) while its replay, or the bulk
 * chunk that sent it, has not committed; a late copy of a dead-lettered message failing during a
 * discard or a bulk discard chunk; the backstop's copy of an applied job recorded during the
 * replay that supersedes its row. Whatever the order the scheduler picks, the message ends applied,
 * or with exactly one pending dead letter, or with the operator's decision (a discard) recorded.
 * The harness, replay, bulk worker and drain are the real ones, against PostgreSQL
 * (support/interleavings.ts has how the scheduler reaches them).
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createWorld, envelope, poisonEnvelope, record, type World } from "./support/interleaving-world.ts";
import { assertInterleavings, interleavingRuns } from "./support/interleavings.ts";

let world: World;
beforeAll(async () => {
  world = await createWorld("il-replay-failure");
});
afterAll(async () => {
  await world?.close();
});

const FAILURES = ["poison", "permanent", "transient"] as const;
const DECISIONS = ["replay", "bulk-replay", "discard", "bulk-discard", "supersede"] as const;

/** One race: the decision on a job's pending dead letter, and a failing delivery of the job. */
async function race(
  s: fc.Scheduler,
  failure: (typeof FAILURES)[number],
  decision: (typeof DECISIONS)[number],
): Promise<void> {
  const { il } = world;
  const jobId = world.jobId(`${decision}-${failure}`);
  const body = failure === "poison" && decision !== "supersede" ? poisonEnvelope(jobId) : envelope(jobId);
  let id: string;
  if (decision === "supersede") {
    // The job applied, and the backstop's copy of it recorded as `unrecorded`: a replay supersedes it.
    expect(await world.invoke("setup", [record(body)])).toEqual([]);
    await world.drain("setup", record(body));
  } else {
    if (failure !== "poison") world.failing.set(jobId, failure);
    expect(await world.invoke("setup", [record(body)])).toEqual([]);
  }
  const before = await world.fate(jobId);
  expect(before.deadLetters.filter((d) => d.status === "pending_review")).toHaveLength(1);
  id = (before.deadLetters[0] as { id: string }).id;
  if (decision === "bulk-replay" || decision === "bulk-discard")
    await world.startBulk(decision === "bulk-replay" ? "replay" : "discard", jobId);

  const sentBefore = il.sentTo(world.queue.url);
  const decide = () => {
    if (decision === "bulk-replay" || decision === "bulk-discard") return world.bulkChunk("worker");
    if (decision === "discard") return world.discard("operator", id);
    return world.replay("operator", id);
  };
  const fail = async () => {
    if (decision === "supersede") return world.drain("backstop", record(body));
    if (decision === "replay" || decision === "bulk-replay") {
      // The replayed message, delivered as soon as it is on the queue.
      if (await il.when(() => il.sentTo(world.queue.url) > sentBefore))
        return world.deliverFromQueue("container");
      return 0;
    }
    // A late copy of the message the dead letter recorded.
    return world.invoke("container", [record(body, { receiveCount: 2 })]);
  };
  const results = await il.run(s, { decide, fail });
  await world.settle();
  world.failing.delete(jobId);

  const fate = await world.fate(jobId);
  const pending = fate.deadLetters.filter((d) => d.status === "pending_review");
  const context = JSON.stringify({ decision, failure, results, fate, trace: il.trace }, errorText, 1);
  expect(
    fate.deadLetters.every((d) => d.consumer === "award-points"),
    context,
  ).toBe(true);
  expect(
    fate.fences.every((f) => f.consumer === "award-points"),
    context,
  ).toBe(true);
  if (decision === "supersede") {
    expect({ effects: fate.effects, fences: fate.fences.length }, context).toEqual({ effects: 1, fences: 1 });
    return;
  }
  expect({ effects: fate.effects, fences: fate.fences.length }, context).toEqual({ effects: 0, fences: 0 });
  if (decision === "replay" || decision === "bulk-replay") {
    // The replay sent the message and it failed again: that failure is pending, whatever the order.
    expect(pending.length, `exactly one pending dead letter\n${context}`).toBe(1);
  } else {
    // Either order is a serial one: the copy's failure recorded and then discarded with its row, or
    // the row discarded and the copy's failure pending in a row of its own.
    const discarded = fate.deadLetters.some((d) => d.status === "discarded");
    expect(
      pending.length === 1 || (pending.length === 0 && discarded),
      `one pending or discarded\n${context}`,
    ).toBe(true);
  }
}

/** JSON of errors: their class and message. */
function errorText(_key: string, value: unknown): unknown {
  return value instanceof Error ? `${value.name}: ${value.message}` : value;
}

describe("interleavings: a delivery's failure during a replay, a bulk chunk, a discard or a supersede", () => {
  it("ends applied, or with exactly one pending dead letter, or discarded by the operator", async () => {
    await assertInterleavings(
      "test/reliability/interleavings-replay-failure.test.ts",
      fc.asyncProperty(
        fc.scheduler(),
        fc.constantFrom(...FAILURES),
        fc.constantFrom(...DECISIONS),
        (s, failure, decision) => race(s, failure, decision),
      ),
      interleavingRuns(30_3, { pinned: 8, generated: 2 }, { pinned: 100, generated: 100 }),
    );
  }, 600_000);
});
