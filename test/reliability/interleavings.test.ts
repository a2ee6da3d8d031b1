/**
 * Interleavings of the real code (docs/reliability.md): fast-check's scheduler orders every
 * statement and SQS call of the real harness, replay, bulk worker, TTL cleanup, backstop drain and
 * outbox relays, against PostgreSQL, and the model's invariants are checked after each run: at most
 * one effect per job (counted in the work's own table), every message ends applied or with exactly
 * one pending dead letter, and no consumer acts for another (every fence, dead letter and effect
 * of a job is its own consumer's); for copies older than their job's fence (family 6), no such copy
 * is sent or applied again once its fence is gone. Each family is a property with a pinned seed
 * (the same runs every time) plus runs from a fresh seed; a failure prints the seed and path that
 * replay it.
 * Family 3 (a failure during a replay) is interleavings-replay-failure.test.ts.
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerFenceTtl } from "../../shared/db/queries/provision-login.ts";
import { ReplayOutlivedError } from "../../shared/errors/dead-letter.ts";
import { TTL_DEFAULTS } from "../../shared/fence/ttl.ts";
import { createWorld, envelope, poisonEnvelope, record, type World } from "./support/interleaving-world.ts";
import { assertInterleavings, interleavingRuns } from "./support/interleavings.ts";

const FILE = "test/reliability/interleavings.test.ts";
let world: World;
beforeAll(async () => {
  world = await createWorld("il");
  // The scheduled relay may take a row at once, as if the relay after COMMIT had had its 30 seconds.
  await world.sql("ALTER TABLE core.outbox ALTER COLUMN next_attempt_at SET DEFAULT now()");
  // As the deployment registers it after migrating: the fence TTL the harness writes (family 6).
  await world.bed.db.withClient(async (c) => {
    await registerFenceTtl(c, "award-points", TTL_DEFAULTS.fenceTtlSeconds);
    await registerFenceTtl(c, "notify-user", TTL_DEFAULTS.fenceTtlSeconds);
  });
  // A follow-up sent whose DELETE was lost (family 6): the outbox keeps the rows of the parents
  // listed here, whoever deletes them.
  await world.sql(`
    CREATE TABLE interleave_effects.keep_outbox (parent_job_id text PRIMARY KEY);
    CREATE FUNCTION interleave_effects.keep_outbox_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
    BEGIN
      IF EXISTS (SELECT 1 FROM interleave_effects.keep_outbox AS k WHERE k.parent_job_id = OLD.parent_job_id) THEN
        RETURN NULL;
      END IF;
      RETURN OLD;
    END $$;
    CREATE TRIGGER interleave_keep_outbox BEFORE DELETE ON core.outbox
      FOR EACH ROW EXECUTE FUNCTION interleave_effects.keep_outbox_row();`);
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

/** How long ago family 6's jobs were applied and their copies first sent: past the fence TTL less its day of margin. */
const OUTLIVED_AGE_DAYS = TTL_DEFAULTS.fenceTtlSeconds / 86_400 + 1;

/** A copy that outlives its job's fence: a backstop drain's, or an outbox row the scheduled relay finds. */
type OldCopy = "drain" | "relay";

/**
 * Family 6: copies outliving their fence (issue 30, class 3). A job applied long ago (its fence
 * expired) has an old copy in the backstop, and a parent's follow-up, applied downstream long ago
 * (its fence expired too), is still in the outbox past its deadline (sent, its DELETE lost). The TTL
 * cleanup races the backstop drain and the scheduled relay recording them; an operator replays
 * each row as soon as it exists and a bulk replay (not forced) takes every row of the run; a late
 * delivery takes whatever was sent. Each copy ends with one dead letter: `outlived` when its write
 * found no fence (the cleanup went first), refused by every replay; otherwise its first kind, having
 * found (and held) the fence, superseded on replay. No copy is sent again; each job applied once.
 */
async function copiesOutlivingFences(
  s: fc.Scheduler,
  copies: OldCopy[],
  operators: ("replay" | "bulk-replay")[],
  late: boolean,
  cleanupAfter: number,
): Promise<void> {
  const { il } = world;
  const ageFence = (jobId: string) =>
    world.sql(
      `UPDATE core.processed_jobs SET processed_at = now() - make_interval(days => $2), expires_at = now() - interval '1 minute'
        WHERE job_id = $1`,
      [jobId, OUTLIVED_AGE_DAYS],
    );
  const jobs: Partial<Record<OldCopy, { jobId: string; consumer: string; recordedAs: string }>> = {};
  const actors: Record<string, () => Promise<unknown>> = {
    // It starts once the others have taken `cleanupAfter` steps (or can take no more): a writer
    // needs several statements before its insert, the cleanup one.
    cleanup: async () => {
      await il.when(() => il.trace.length >= cleanupAfter);
      return world.cleanup("cleanup");
    },
  };
  const done = { drain: !copies.includes("drain"), relay: !copies.includes("relay") };
  const writer = (copy: OldCopy, act: () => Promise<unknown>) => async () => {
    try {
      return await act();
    } finally {
      done[copy] = true;
    }
  };

  // Only a failed run leaves a bulk operation running (its chunk rolled back, to be tried again
  // later): ended here, so the runs fast-check shrinks to fail for their own reason, not in settle().
  await world.sql(
    "UPDATE core.bulk_operations SET status = 'cancelled', cancelled_by = 'interleavings', finished_at = now() WHERE status = 'running'",
  );
  let parentId = "";
  if (copies.includes("drain")) {
    const jobId = world.jobId("outlived");
    const body = envelope(jobId);
    expect(await world.invoke("setup", [record(body)])).toEqual([]);
    await ageFence(jobId);
    // The backstop's copy: SQS's SentTimestamp is when it was first sent.
    const copy = record(body);
    const sentAt = String(Date.now() - OUTLIVED_AGE_DAYS * 86_400_000);
    const oldCopy = { ...copy, attributes: { ...copy.attributes, SentTimestamp: sentAt } };
    jobs.drain = { jobId, consumer: "award-points", recordedAs: "unrecorded" };
    actors.drain = writer("drain", () => world.drain("backstop", oldCopy));
  }
  if (copies.includes("relay")) {
    parentId = world.jobId("outlived-parent");
    await world.sql("INSERT INTO interleave_effects.keep_outbox (parent_job_id) VALUES ($1)", [parentId]);
    expect(await world.invoke("setup", [record(envelope(parentId))])).toEqual([]);
    await world.sql("DELETE FROM interleave_effects.keep_outbox WHERE parent_job_id = $1", [parentId]);
    // Applied downstream (with the follow-ups of any other setup job), its fence then aged below.
    while ((await world.deliverFollowUps("setup")) > 0);
    expect(await world.downstreamEffects(parentId)).toBe(1);
    const [row] = await world.sql<{ job_id: string }>(
      "SELECT job_id FROM core.outbox WHERE parent_job_id = $1",
      [parentId],
    );
    const jobId = row?.job_id as string;
    await world.sql(
      `UPDATE core.outbox SET created_at = now() - make_interval(days => $2),
              send_by = now() - make_interval(days => $2 - 1), next_attempt_at = now()
        WHERE parent_job_id = $1`,
      [parentId, OUTLIVED_AGE_DAYS],
    );
    await ageFence(jobId);
    jobs.relay = { jobId, consumer: "notify-user", recordedAs: "undelivered" };
    actors.relay = writer("relay", () => world.sweep("relay"));
  }

  const sentBefore = il.sentTo(world.queue.url) + il.sentTo(world.followUpQueue.url);
  const sentSince = () => il.sentTo(world.queue.url) + il.sentTo(world.followUpQueue.url) - sentBefore;
  const runStart = (await world.sql<{ now: Date }>("SELECT now() AS now"))[0]?.now as Date;
  if (operators.includes("replay")) {
    actors.replay = async () => {
      const outcomes: unknown[] = [];
      for (const copy of copies) {
        await il.when(() => done[copy]);
        for (const id of await world.pendingDeadLetters("operator", jobs[copy]?.jobId as string))
          outcomes.push(await world.replay("operator", id).catch((error: unknown) => error));
      }
      return outcomes;
    };
  }
  if (operators.includes("bulk-replay")) {
    actors.bulk = async () => {
      await il.when(() => done.drain && done.relay);
      await world.startBulk("replay", { created_after: runStart.toISOString() });
      for (let chunk = 0; chunk < 5; chunk++) {
        const ran = (await world.bulkChunk("worker")) as { kind: string };
        if (ran.kind === "failed") throw new Error("a bulk replay chunk failed and rolled back");
        if (ran.kind === "idle") break;
      }
    };
  }
  if (late) {
    actors.late = async () =>
      (await il.when(() => sentSince() > 0))
        ? (await world.deliverFromQueue("late")) + (await world.deliverFollowUps("late"))
        : 0;
  }
  const results = await il.run(s, actors);
  const runContext = contextOf({ copies, operators, late, cleanupAfter, results });
  expect(sentSince(), `an old copy was sent again\n${runContext}`).toBe(0);
  // Every replay decided without sending: superseded, refused as outlived, or resolved by the other operator first.
  const replays = results.replay?.ok ? (results.replay.value as unknown[]) : [];
  expect(results.replay?.ok ?? true, runContext).toBe(true);
  for (const outcome of replays) {
    if (outcome instanceof Error)
      expect(["ReplayOutlivedError", "DeadLetterConflictError"], runContext).toContain(outcome.name);
    else expect(outcome, runContext).toMatchObject({ status: "superseded" });
  }
  // The bulk replay ran to its end, or the single replay resolved what it planned on first
  // (nothing left pending to plan, or its start found the planned set changed).
  if (results.bulk && !results.bulk.ok)
    expect(String(results.bulk.error), runContext).toMatch(/no pending dead letter|PlanStaleError/);
  await world.settle();

  const effectsOf = (copy: OldCopy, jobId: string) =>
    copy === "drain" ? world.fate(jobId).then((f) => f.effects) : world.downstreamEffects(parentId);
  for (const copy of copies) {
    const { jobId, consumer, recordedAs } = jobs[copy] as NonNullable<(typeof jobs)[OldCopy]>;
    const fate = await world.fate(jobId);
    const context = contextOf({
      copies,
      operators,
      late,
      cleanupAfter,
      copy,
      results,
      fate,
      sent: sentSince(),
    });
    expect(
      [...fate.fences.map((f) => f.consumer), ...fate.deadLetters.map((d) => d.consumer)].every(
        (c) => c === consumer,
      ),
      context,
    ).toBe(true);
    expect(await effectsOf(copy, jobId), `applied once\n${context}`).toBe(1);
    expect(fate.deadLetters, `one dead letter for the old copy\n${context}`).toHaveLength(1);
    const row = fate.deadLetters[0] as (typeof fate.deadLetters)[number];
    if (row.error_kind === "outlived") {
      expect(row.fence_seen, context).toBe(false);
      expect(row.status, `an outlived copy is never replayed (unforced)\n${context}`).toBe("pending_review");
      await expect(world.replay("after", row.id), context).rejects.toBeInstanceOf(ReplayOutlivedError);
      // The operator's decision: with nothing to tell whether it was applied, it is discarded.
      await world.discard("after", row.id);
    } else {
      expect(row.error_kind, context).toBe(recordedAs);
      expect(
        row.fence_seen,
        `a copy older than its fence's lifetime found no fence, yet is not outlived\n${context}`,
      ).toBe(true);
      expect(["pending_review", "superseded"], context).toContain(row.status);
      if (row.status === "pending_review") {
        expect(
          fate.fences,
          `the cleanup deleted a fence a pending dead letter holds\n${context}`,
        ).toHaveLength(1);
        expect(await world.replay("after", row.id), context).toMatchObject({ status: "superseded" });
      }
    }
    expect(await effectsOf(copy, jobId), `applied once\n${context}`).toBe(1);
  }
  expect(sentSince(), `an old copy was sent again\n${runContext}`).toBe(0);
  if (parentId) {
    expect(
      await world.sql("SELECT job_id FROM core.outbox WHERE parent_job_id = $1", [parentId]),
      runContext,
    ).toEqual([]);
  }
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

  it("family 6: a copy outliving its fence is recorded outlived and never sent again, whatever the cleanup's order", async () => {
    await assertInterleavings(
      FILE,
      fc.asyncProperty(
        fc.scheduler(),
        fc.subarray(["drain", "relay"] as OldCopy[], { minLength: 1 }),
        fc.subarray(["replay", "bulk-replay"] as ("replay" | "bulk-replay")[]),
        fc.boolean(),
        fc.nat({ max: 8 }),
        copiesOutlivingFences,
      ),
      interleavingRuns(30_6, { pinned: 12, generated: 2 }, { pinned: 60, generated: 60 }),
    );
  }, 600_000);
});
