/**
 * Escalation (docs/design.md §8.2): one summary alert per run when any dead letter has waited for review longer
 * than the threshold; silence otherwise; never one alert per row.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { localEventBridgeClient } from "../../local/aws-clients.ts";
import { createPool } from "../../shared/db/pool.ts";
import {
  DEAD_LETTERS_ESCALATED,
  ESCALATION_ACTOR,
  escalateStaleDeadLetters,
  resolveHealedDeadLetters,
} from "../../shared/dead-letters/escalation.ts";
import { type ConsumerTestBed, consumerTestBed, OPS_BUS } from "../support/consumer-harness.ts";
import { insertDeadLetter } from "../support/fixtures.ts";

let bed: ConsumerTestBed;
let opsPool: ReturnType<typeof createPool>;
beforeAll(async () => {
  bed = await consumerTestBed();
  opsPool = createPool({ connectionString: bed.db.url, role: "jobfence_ops" });
});
afterAll(async () => {
  await opsPool?.end();
  await bed?.close();
});
beforeEach(async () => {
  bed.sink.events.length = 0;
  bed.sink.setMode("accept");
  // Dead letters cannot be deleted (by design): each test uses its own consumers instead.
});

/** A pending dead letter created `ageDays` ago. */
async function pendingAged(
  consumer: string,
  ageDays: number,
  overrides: Parameters<typeof insertDeadLetter>[1] = {},
): Promise<string> {
  return bed.db.withClient(async (c) => {
    const id = await insertDeadLetter(c, { consumer, ...overrides });
    await c.query(
      "ALTER TABLE core.dead_letters DISABLE TRIGGER dead_letters_guard_update; " +
        `UPDATE core.dead_letters SET created_at = now() - make_interval(days => ${Number(ageDays)}) WHERE id = '${id}'; ` +
        "ALTER TABLE core.dead_letters ENABLE TRIGGER dead_letters_guard_update;",
    );
    return id;
  });
}

const escalate = () =>
  escalateStaleDeadLetters({
    db: opsPool,
    eventBridge: localEventBridgeClient(bed.sink.endpoint),
    opsBusName: OPS_BUS,
  });

describe("escalation of stale pending dead letters", () => {
  it("stays silent when nothing pending is older than 3 days", async () => {
    await pendingAged("esc-fresh", 2);
    await pendingAged("esc-fresh", 0);
    expect(await escalate()).toBeUndefined();
    expect(bed.sink.events).toEqual([]);
  });

  it("fires once with one stale pending dead letter, naming its consumer and the oldest", async () => {
    const id = await pendingAged("esc-one", 4);
    const summary = await escalate();
    expect(summary).toMatchObject({ threshold_days: 3, total: 1, oldest: { consumer: "esc-one", id } });
    expect(bed.sink.events).toHaveLength(1);
    expect(bed.sink.events[0]).toMatchObject({
      eventBusName: OPS_BUS,
      source: "jobfence",
      detailType: DEAD_LETTERS_ESCALATED,
      detail: { total: 1, consumers: [{ consumer: "esc-one", count: 1, oldest_id: id }] },
    });
  });

  it("summarises many stale rows across consumers in one event, never one per row", async () => {
    const oldest = await pendingAged("esc-many-a", 30);
    for (let i = 0; i < 25; i++) await pendingAged("esc-many-a", 5);
    for (let i = 0; i < 10; i++) await pendingAged("esc-many-b", 4);
    // Resolved stale rows are not pending: they do not count.
    const resolved = await pendingAged("esc-many-c", 10);
    await bed.db.withClient((c) =>
      c.query(
        "UPDATE core.dead_letters SET status = 'replayed', resolved_at = now(), resolved_by = 'ops' WHERE id = $1",
        [resolved],
      ),
    );

    const summary = await escalate();
    expect(bed.sink.events).toHaveLength(1);
    expect(summary?.oldest).toMatchObject({ consumer: "esc-many-a", id: oldest });
    const counts = Object.fromEntries((summary?.consumers ?? []).map((c) => [c.consumer, c.count]));
    expect(counts["esc-many-a"]).toBe(26);
    expect(counts["esc-many-b"]).toBe(10);
    expect(counts["esc-many-c"]).toBeUndefined();
  });

  it("a refused alert is an error the scheduler sees (the run is retried), not a silent success", async () => {
    await pendingAged("esc-refused", 5);
    bed.sink.setMode("reject-entries");
    await expect(escalate()).rejects.toThrow(/refused the DeadLettersEscalated event/);
  });

  it("first resolves as superseded, by itself, the pending dead letters whose job was applied after all", async () => {
    const healed = await pendingAged("esc-healed", 5);
    // Poison whose job id was read from its envelope: the job applied by a corrected resend heals it.
    const poison = await pendingAged("esc-healed", 5, {
      error_kind: "poison",
      attempts: 1,
      message_attributes: { message_id: "2f6c1e0a-0000-4000-8000-000000000001" },
    });
    // Poison whose job id is its SQS message id standing in: it names no job, whatever has that id.
    const standIn = "2f6c1e0a-0000-4000-8000-000000000002";
    const anonymous = await pendingAged("esc-healed", 5, {
      job_id: standIn,
      error_kind: "poison",
      attempts: 1,
      message_attributes: { message_id: standIn },
    });
    const unapplied = await pendingAged("esc-healed", 5);
    // The work committed the fence's transaction itself: the fence exists, the effect may be half done.
    const foreign = await pendingAged("esc-healed", 5, {
      error_kind: "hard",
      last_error: { class: "ForeignTransactionError", message: "the work ended the fence's transaction" },
    });
    await bed.db.withClient(async (c) => {
      // The fences of the first two jobs exist: a replay committed its effect but crashed before
      // resolving the dead letter (or the producer sent the job again).
      const ids = [healed, poison, anonymous, foreign];
      await c.query(
        `SELECT core.ensure_consumer_role(consumer) FROM (SELECT DISTINCT consumer FROM core.dead_letters WHERE id = ANY ($1::uuid[])) AS d`,
        [ids],
      );
      await c.query(
        `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, processed_at, expires_at)
         SELECT d.job_id, core.consumer_id(d.consumer), 't', now(), now() + interval '7 days'
           FROM core.dead_letters AS d WHERE d.id = ANY ($1::uuid[])`,
        [ids],
      );
    });
    expect(await resolveHealedDeadLetters(opsPool)).toBe(2);
    const rows = await bed.db.withClient(async (c) => {
      const { rows } = await c.query<{ id: string; status: string; resolved_by: string | null }>(
        "SELECT id, status, resolved_by FROM core.dead_letters WHERE consumer = 'esc-healed'",
      );
      return new Map(rows.map((r) => [r.id, r]));
    });
    expect(rows.get(healed)).toMatchObject({ status: "superseded", resolved_by: ESCALATION_ACTOR });
    expect(rows.get(unapplied)).toMatchObject({ status: "pending_review", resolved_by: null });
    expect(rows.get(poison)).toMatchObject({ status: "superseded", resolved_by: ESCALATION_ACTOR });
    // Poison with no job id of its own is a finding about a message, whatever has that id.
    expect(rows.get(anonymous)).toMatchObject({ status: "pending_review", resolved_by: null });
    // A job whose work committed on its own is for a person, fence or not.
    expect(rows.get(foreign)).toMatchObject({ status: "pending_review", resolved_by: null });
    // A second run finds nothing more to do; the summary counts only what is still pending.
    expect(await resolveHealedDeadLetters(opsPool)).toBe(0);
    const summary = await escalate();
    const listed = summary?.consumers.find((c) => c.consumer === "esc-healed");
    expect(listed?.count).toBe(3);
  });
});
