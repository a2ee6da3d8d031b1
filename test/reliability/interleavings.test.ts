/**
 * Interleavings of the real code (docs/reliability.md): fast-check's scheduler orders every
 * statement and SQS call of the real harness, replay, bulk worker, TTL cleanup, backstop drain and
 * outbox relays, against PostgreSQL, and the model's invariants are checked after each run: at most
 * one effect per job (counted in the work's own table), every message ends applied or with exactly
 * one pending dead letter, and no consumer acts for another (every fence, dead letter and effect
 * of a job is its own consumer's). Each family is a property with a pinned seed (the same runs
 * every time) plus runs from a fresh seed; a failure prints the seed and path that replay it.
 * Family 3 (a failure during a replay) is interleavings-replay-failure.test.ts.
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createWorld, envelope, poisonEnvelope, record, type World } from "./support/interleaving-world.ts";
import { assertInterleavings, interleavingRuns } from "./support/interleavings.ts";

const FILE = "test/reliability/interleavings.test.ts";
let world: World;
beforeAll(async () => {
  world = await createWorld("il");
  // The scheduled relay may take a row at once, as if the relay after COMMIT had had its 30 seconds.
  await world.sql("ALTER TABLE core.outbox ALTER COLUMN next_attempt_at SET DEFAULT now()");
});
afterAll(async () => {
  await world?.close();
});

/** JSON of errors: their class and message. */
function errorText(_key: string, value: unknown): unknown {
  return value instanceof Error ? `${value.name}: ${value.message}` : value;
}

function contextOf(what: Record<string, unknown>): string {
  return JSON.stringify({ ...what, trace: world.il.trace }, errorText, 1);
}

/** No consumer acts for another: every fence and dead letter of an award-points job is award-points'. */
function ownedByAwardPoints(fate: Awaited<ReturnType<World["fate"]>>, context: string): void {
  expect(
    [...fate.fences.map((f) => f.consumer), ...fate.deadLetters.map((d) => d.consumer)].every(
      (c) => c === "award-points",
    ),
    context,
  ).toBe(true);
}

/**
 * Family 1: the TTL cleanup racing dead-letter writes that name an applied job whose fence has
 * expired (the backstop drain's `unrecorded` copy, a poison copy through the harness). A write that
 * found the fence holds it until it commits, so the cleanup never deletes a fence a pending dead
 * letter found: its replay supersedes it instead of applying the job again.
 */
async function cleanupVersusDeadLetterWrite(s: fc.Scheduler, writers: ("drain" | "poison")[]): Promise<void> {
  const jobId = world.jobId("cleanup");
  const body = envelope(jobId);
  expect(await world.invoke("setup", [record(body)])).toEqual([]);
  await world.sql(
    "UPDATE core.processed_jobs SET processed_at = now() - interval '8 days', expires_at = now() - interval '1 minute' WHERE job_id = $1",
    [jobId],
  );
  const actors: Record<string, () => Promise<unknown>> = { cleanup: () => world.cleanup("cleanup") };
  if (writers.includes("drain")) actors.drain = () => world.drain("backstop", record(body));
  if (writers.includes("poison"))
    actors.poison = () => world.invoke("container", [record(poisonEnvelope(jobId))]);
  const results = await world.il.run(s, actors);
  await world.settle();

  const fate = await world.fate(jobId);
  const context = contextOf({ writers, results, fate });
  ownedByAwardPoints(fate, context);
  expect(fate.effects, context).toBe(1);
  const pending = fate.deadLetters.filter((d) => d.status === "pending_review");
  // Each copy ends with its own pending dead letter (their bodies differ).
  expect(pending.map((d) => d.error_kind).sort(), context).toEqual(
    writers.map((w) => (w === "drain" ? "unrecorded" : "poison")).sort(),
  );
  if (pending.some((d) => d.fence_seen)) {
    expect(fate.fences, `a fence a pending dead letter found was deleted\n${context}`).toHaveLength(1);
  }
  for (const row of pending.filter((d) => d.error_kind === "unrecorded" && d.fence_seen)) {
    expect(await world.replay("after", row.id), context).toMatchObject({ status: "superseded" });
  }
  expect((await world.fate(jobId)).effects, context).toBe(1);
}

/**
 * Family 2: a replay (single, or a bulk chunk) racing a late delivery of the same job (a
 * redelivery of the message it recorded, or a producer's duplicate) and the delivery of the
 * replayed message: one effect, and any dead letter still pending names an applied job (a replay
 * of it supersedes).
 */
async function replayVersusLateRetry(
  s: fc.Scheduler,
  replayer: "replay" | "bulk-replay",
  late: "redelivery" | "duplicate",
): Promise<void> {
  const { il } = world;
  const jobId = world.jobId("late");
  const body = envelope(jobId);
  world.failing.set(jobId, "transient");
  const original = record(body);
  expect(await world.invoke("setup", [original])).toEqual([]);
  world.failing.delete(jobId);
  const [row] = (await world.fate(jobId)).deadLetters;
  expect(row?.status).toBe("pending_review");
  if (replayer === "bulk-replay") await world.startBulk("replay", jobId);
  const sentBefore = il.sentTo(world.queue.url);
  const lateRecord =
    late === "redelivery"
      ? { ...original, attributes: { ...original.attributes, ApproximateReceiveCount: "2" } }
      : record(body);
  const results = await il.run(s, {
    replay: () =>
      replayer === "replay"
        ? world.replay("operator", (row as { id: string }).id)
        : world.bulkChunk("worker"),
    late: () => world.invoke("late", [lateRecord]),
    replayed: async () =>
      (await il.when(() => il.sentTo(world.queue.url) > sentBefore))
        ? world.deliverFromQueue("container")
        : 0,
  });
  await world.settle();

  const fate = await world.fate(jobId);
  const context = contextOf({ replayer, late, results, fate });
  ownedByAwardPoints(fate, context);
  expect({ effects: fate.effects, fences: fate.fences.length }, context).toEqual({ effects: 1, fences: 1 });
  for (const pending of fate.deadLetters.filter((d) => d.status === "pending_review")) {
    expect(await world.replay("after", pending.id), context).toMatchObject({ status: "superseded" });
  }
  expect((await world.fate(jobId)).effects, context).toBe(1);
}

/**
 * Family 4: two or three deliveries of one job through the harness at once (each a container of its
 * own; the same body, or another job under the same id), while the TTL cleanup deletes other jobs'
 * expired fences: one effect, the job applied with one of the bodies, each other body one pending
 * `conflict` dead letter, every delivery acked, the live fence kept.
 */
async function duplicatesStorm(s: fc.Scheduler, variants: number[]): Promise<void> {
  const jobId = world.jobId("storm");
  await world.sql(
    `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, processed_at, expires_at)
     SELECT $1 || '-expired-' || n, core.consumer_id('award-points'), 't-il', now() - interval '8 days', now() - interval '1 hour'
       FROM generate_series(1, 2) AS n`,
    [jobId],
  );
  const actors: Record<string, () => Promise<unknown>> = { cleanup: () => world.cleanup("cleanup") };
  variants.forEach((variant, i) => {
    actors[`container-${i}`] = () => world.invoke(`container-${i}`, [record(envelope(jobId, variant))]);
  });
  const results = await world.il.run(s, actors);
  await world.settle();

  const fate = await world.fate(jobId);
  const context = contextOf({ variants, results, fate });
  ownedByAwardPoints(fate, context);
  for (const [name, result] of Object.entries(results)) {
    if (name.startsWith("container-"))
      expect(result, `every delivery acked\n${context}`).toEqual({ ok: true, value: [] });
  }
  expect({ effects: fate.effects, fences: fate.fences.length }, context).toEqual({ effects: 1, fences: 1 });
  const [applied] = await world.sql<{ points: number }>(
    "SELECT points FROM award_points.ledger WHERE job_id = $1",
    [jobId],
  );
  const appliedVariant = Number(applied?.points) - 10;
  const others = [...new Set(variants)].filter((v) => v !== appliedVariant);
  expect(variants, context).toContain(appliedVariant);
  const pending = fate.deadLetters.filter((d) => d.status === "pending_review");
  expect(
    pending.map((d) => d.error_kind),
    `one pending conflict per other body\n${context}`,
  ).toEqual(others.map(() => "conflict"));
  const [expired] = await world.sql<{ n: number }>(
    "SELECT count(*)::int AS n FROM core.processed_jobs WHERE starts_with(job_id, $1 || '-expired-')",
    [jobId],
  );
  expect(Number(expired?.n), `the cleanup deleted the expired fences\n${context}`).toBe(0);
}

/**
 * Family 5: the outbox. A job delivered twice at once (its follow-up written once, by the delivery
 * that applied it), the relay after COMMIT racing the scheduled relay (its rows due at once) and
 * the downstream consumer delivering each copy the relays send: the follow-up is applied exactly
 * once downstream, the outbox ends empty, nothing is dead-lettered.
 */
async function outboxRelays(s: fc.Scheduler, parents: number, downstream: number): Promise<void> {
  const { il } = world;
  const jobId = world.jobId("outbox");
  const body = envelope(jobId);
  const sentBefore = il.sentTo(world.followUpQueue.url);
  const actors: Record<string, () => Promise<unknown>> = { sweep: () => world.sweep("relay") };
  for (let i = 0; i < parents; i++)
    actors[`parent-${i}`] = () => world.invoke(`container-${i}`, [record(body)]);
  for (let k = 1; k <= downstream; k++) {
    actors[`downstream-${k}`] = async () =>
      (await il.when(() => il.sentTo(world.followUpQueue.url) >= sentBefore + k))
        ? world.deliverFollowUps(`downstream-${k}`)
        : 0;
  }
  const results = await il.run(s, actors);
  await world.settle();

  const fate = await world.fate(jobId);
  const followUps = await world.sql<{ job_id: string }>(
    "SELECT job_id FROM interleave_effects.notifications WHERE correlation_id = $1",
    [`corr-${jobId}`],
  );
  const followUpFate = followUps[0] ? await world.fate(followUps[0].job_id) : undefined;
  const outbox = await world.sql("SELECT target, job_id FROM core.outbox WHERE parent_job_id = $1", [jobId]);
  const context = contextOf({ parents, downstream, results, fate, followUps, followUpFate, outbox });
  ownedByAwardPoints(fate, context);
  expect(
    { effects: fate.effects, fences: fate.fences.length, deadLetters: fate.deadLetters.length },
    context,
  ).toEqual({
    effects: 1,
    fences: 1,
    deadLetters: 0,
  });
  expect(followUps.length, `the follow-up applied exactly once downstream\n${context}`).toBe(1);
  expect(
    followUpFate?.fences.map((f) => f.consumer),
    context,
  ).toEqual(["notify-user"]);
  expect(followUpFate?.deadLetters, context).toEqual([]);
  expect(outbox, context).toEqual([]);
}

describe("interleavings of the real code", () => {
  it("family 1: the TTL cleanup never deletes a fence a concurrently written pending dead letter found", async () => {
    await assertInterleavings(
      FILE,
      fc.asyncProperty(
        fc.scheduler(),
        fc.subarray(["drain", "poison"] as ("drain" | "poison")[], { minLength: 1 }),
        cleanupVersusDeadLetterWrite,
      ),
      interleavingRuns(30_1, { pinned: 4, generated: 1 }, { pinned: 60, generated: 60 }),
    );
  }, 600_000);

  it("family 2: a replay racing a late delivery of the same job applies it once", async () => {
    await assertInterleavings(
      FILE,
      fc.asyncProperty(
        fc.scheduler(),
        fc.constantFrom("replay", "bulk-replay") as fc.Arbitrary<"replay" | "bulk-replay">,
        fc.constantFrom("redelivery", "duplicate") as fc.Arbitrary<"redelivery" | "duplicate">,
        replayVersusLateRetry,
      ),
      interleavingRuns(30_2, { pinned: 4, generated: 1 }, { pinned: 60, generated: 60 }),
    );
  }, 600_000);

  it("family 4: a duplicates storm with the TTL cleanup applies one body once and records each other as a conflict", async () => {
    await assertInterleavings(
      FILE,
      fc.asyncProperty(
        fc.scheduler(),
        fc.array(fc.constantFrom(0, 1), { minLength: 2, maxLength: 3 }),
        duplicatesStorm,
      ),
      interleavingRuns(30_4, { pinned: 4, generated: 1 }, { pinned: 60, generated: 60 }),
    );
  }, 600_000);

  it("family 5: the relay after COMMIT, the scheduled relay and a duplicate parent apply each follow-up once downstream", async () => {
    await assertInterleavings(
      FILE,
      fc.asyncProperty(
        fc.scheduler(),
        fc.integer({ min: 1, max: 2 }),
        fc.integer({ min: 1, max: 2 }),
        outboxRelays,
      ),
      interleavingRuns(30_5, { pinned: 4, generated: 1 }, { pinned: 60, generated: 60 }),
    );
  }, 600_000);
});
