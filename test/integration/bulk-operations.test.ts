/**
 * Bulk replay and bulk discard as durable, paced, audited operations (docs/design.md §6.3), through the real
 * API and the real worker against the SQS emulator: the guard a filter cannot step around, plan
 * tokens bound to their set, sends packed by size, pacing, cancel, what an operation leaves pending
 * and why, and replay's delay and its 502 that names no queue.
 */
import { randomBytes } from "node:crypto";
import { ReceiveMessageCommand, SQSClient } from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LOCAL_REGION } from "../../local/aws-clients.ts";
import { createPool } from "../../shared/db/pool.ts";
import { msUntilDue } from "../../shared/db/queries/bulk-operations.ts";
import { planOperation, readOperation, startOperation } from "../../shared/dead-letters/bulk-operations.ts";
import { runBulkOperations, runChunk } from "../../shared/dead-letters/bulk-worker.ts";
import { issuePlanToken } from "../../shared/dead-letters/plan-token.ts";
import { sealKey } from "../../shared/dead-letters/seal.ts";
import { BASE, expectProblem, resolveDirectly, seedDeadLetters } from "../support/api-fixtures.ts";
import { type ApiTestBed, apiTestBed, TEST_SEAL_KEY } from "../support/api-harness.ts";
import { runUntilFinished } from "../support/bulk.ts";
import { createTestDatabase } from "../support/database.ts";
import { insertFence } from "../support/fixtures.ts";
import { messagesIn, receiveAll } from "../support/sqs.ts";

let bed: ApiTestBed;
beforeAll(async () => {
  bed = await apiTestBed({ bulk: { confirmAbove: 20 } });
});
afterAll(async () => {
  await bed?.close();
});

const worker = () => ({ pool: bed.opsPool, sqs: bed.sqs });

/** Runs the worker until the operation has finished; returns it as the API shows it. */
async function runToEnd(id: string): Promise<Record<string, unknown>> {
  await runUntilFinished(worker(), id);
  return (await bed.call("GET", `${BASE}/operations/${id}`, { token: bed.tokens.read })).body;
}

async function seedQueue(name: string, count: number, extra: Record<string, unknown> = {}) {
  const queueUrl = (await bed.queue(name)).url;
  const ids = await seedDeadLetters(
    bed.db,
    Array.from({ length: count }, (_, i) => ({
      consumer: name,
      job_id: `${name}-${i}`,
      queue: queueUrl,
      ...extra,
    })),
  );
  return { queueUrl, ids };
}

describe("the guard", () => {
  it("a filter that matches every pending dead letter, however spelled, needs the plan's token (428)", async () => {
    await seedQueue("guard-all", 3);
    for (const body of [
      {},
      { filter: {} },
      { filter: { created_after: "0001-01-01T00:00:00Z" } },
      { filter: { created_before: "9999-12-31T23:59:59Z" } },
      { filter: { created_after: "1970-01-01T00:00:00Z", created_before: "9999-01-01T00:00:00Z" } },
    ]) {
      const response = await bed.call("POST", `${BASE}/replay`, { token: bed.tokens.replay, body });
      expectProblem(response, 428);
      expect(response.body).toMatchObject({ reason: "confirmation-required" });
      expect(response.body.matched).toBe(response.body.pending_total);
      const discard = await bed.call("POST", `${BASE}/discard`, {
        token: bed.tokens.discard,
        body: { ...body, reason: "everything" },
      });
      expectProblem(discard, 428);
    }
    expect(messagesIn(bed.emulator, "guard-all")).toBe(0);
    const ops = await bed.call("GET", `${BASE}/operations`, { token: bed.tokens.read });
    expect(ops.body.items).toEqual([]);
  });

  it("a set larger than the threshold needs the token; a small one starts without it", async () => {
    await seedQueue("guard-big", 21);
    const big = await bed.call("POST", `${BASE}/replay`, {
      token: bed.tokens.replay,
      body: { filter: { consumer: "guard-big" } },
    });
    expectProblem(big, 428);
    expect(big.body).toMatchObject({ matched: 21, confirm_above: 20 });
    const small = await bed.call("POST", `${BASE}/replay`, {
      token: bed.tokens.replay,
      body: { filter: { consumer: "guard-big", job_id: "guard-big-3" } },
    });
    expect(small.status).toBe(202);
    expect(small.body).toMatchObject({
      kind: "replay",
      status: "running",
      planned: 1,
      submitted_by: "local-replayer",
    });
  });

  it("the plan's token starts exactly its set; another filter, kind or key, an edit, expiry or a changed set is refused", async () => {
    const { ids } = await seedQueue("guard-token", 25);
    const filter = { consumer: "guard-token" };
    const plan = await bed.call("POST", `${BASE}/discard/plan`, {
      token: bed.tokens.discard,
      body: { filter },
    });
    expect(plan.status).toBe(200);
    expect(plan.body).toMatchObject({ kind: "discard", matched: 25, confirmation_required: true });
    expect(plan.body.sample).toHaveLength(10);
    const token: string = plan.body.token;

    const start = (body: Record<string, unknown>) =>
      bed.call("POST", `${BASE}/discard`, { token: bed.tokens.discard, body: { reason: "noise", ...body } });
    expectProblem(await start({ filter: { consumer: "guard-token", tenant_id: "t_42" }, token }), 400);
    expectProblem(
      await bed.call("POST", `${BASE}/replay`, { token: bed.tokens.replay, body: { filter, token } }),
      400,
    );
    // Its MAC edited (two characters that differ from the ones issued, whatever those were).
    const edited = `${token.slice(0, -2)}${token.endsWith("AA") ? "BB" : "AA"}`;
    expectProblem(await start({ filter, token: edited }), 400);
    const foreign = issuePlanToken(
      sealKey(randomBytes(32)),
      {
        kind: "discard",
        matched: 25,
        checksum: "0",
        bound: { createdAt: new Date().toISOString(), id: ids[0] as string },
      },
      filter,
      Date.now(),
    );
    expectProblem(await start({ filter, token: foreign.token }), 400);
    // Expired: a plan made 16 minutes ago.
    const old = await planOperation(
      { pool: bed.opsPool, sealKey: TEST_SEAL_KEY, now: () => Date.now() - 16 * 60_000 },
      "discard",
      filter,
    );
    const expired = await start({ filter, token: old.token });
    expectProblem(expired, 409);
    expect(expired.body.reason).toBe("plan-expired");

    // One row of the set is resolved meanwhile: the set is not the one confirmed.
    await resolveDirectly(bed.db, [ids[4] as string], "discarded");
    const stale = await start({ filter, token });
    expectProblem(stale, 409);
    expect(stale.body).toMatchObject({ reason: "plan-stale", planned: 25, matched: 24 });

    // Planned again: rows recorded after the plan are not part of the operation.
    const again = await bed.call("POST", `${BASE}/discard/plan`, {
      token: bed.tokens.discard,
      body: { filter },
    });
    const late = await seedDeadLetters(bed.db, [{ consumer: "guard-token", job_id: "guard-token-late" }]);
    const started = await start({ filter, token: again.body.token, rate_per_second: 1000 });
    expect(started.status).toBe(202);
    expect(started.body).toMatchObject({
      planned: 24,
      reason: "noise",
      submitted_by: "local-discarder",
      // The row recorded after the plan matches the filter too: counted, and left out.
      newer_not_included: 1,
    });
    const done = await runToEnd(started.body.id);
    expect(done).toMatchObject({ status: "completed", processed: 24, discarded: 24 });
    const rows = await bed.db.withClient(async (c) => {
      const { rows } = await c.query(
        `SELECT status, discard_reason, resolved_by, count(*)::int AS n FROM core.dead_letters
          WHERE consumer = 'guard-token' GROUP BY 1, 2, 3 ORDER BY 1, 2`,
      );
      return rows;
    });
    expect(rows).toEqual([
      { status: "discarded", discard_reason: "noise", resolved_by: "local-discarder", n: 24 },
      { status: "discarded", discard_reason: "resolved by a fixture", resolved_by: "sql-fixture", n: 1 },
      { status: "pending_review", discard_reason: null, resolved_by: null, n: 1 },
    ]);
    expect(late).toHaveLength(1);
  });

  it("each plan starts one operation", async () => {
    await seedQueue("guard-once", 3);
    const filter = { consumer: "guard-once" };
    const plan = await bed.call("POST", `${BASE}/discard/plan`, {
      token: bed.tokens.discard,
      body: { filter },
    });
    const body = { filter, reason: "once", token: plan.body.token };
    expect((await bed.call("POST", `${BASE}/discard`, { token: bed.tokens.discard, body })).status).toBe(202);
    const again = await bed.call("POST", `${BASE}/discard`, { token: bed.tokens.admin, body });
    expectProblem(again, 409);
    expect(again.body.reason).toBe("plan-used");
  });

  it("acts on exactly the rows it started with: one that commits later, even dated before them, is left alone", async () => {
    const queueUrl = (await bed.queue("guard-late")).url;
    const filter = { consumer: "guard-late" };
    await bed.db.withClient(async (late) => {
      // A writer whose transaction began first: its row's created_at is older than the others'.
      await late.query("BEGIN");
      await late.query("SELECT now()");
      await seedDeadLetters(
        bed.db,
        [1, 2, 3].map((i) => ({ consumer: "guard-late", job_id: `gl-${i}`, queue: queueUrl })),
      );
      await late.query(
        `INSERT INTO core.dead_letters (job_id, consumer, queue, payload, attempts, error_kind, last_error,
           correlation_id, body_form, body)
         VALUES ('gl-late', 'guard-late', $1, '{}', 1, 'hard', '{"class":"E","message":"m"}', 'c', 'text', '{}')`,
        [queueUrl],
      );
      const plan = await bed.call("POST", `${BASE}/discard/plan`, {
        token: bed.tokens.discard,
        body: { filter },
      });
      expect(plan.body.matched).toBe(3);
      const started = await bed.call("POST", `${BASE}/discard`, {
        token: bed.tokens.discard,
        body: { filter, reason: "planned three", token: plan.body.token, rate_per_second: 1000 },
      });
      expect(started.status).toBe(202);
      await late.query("COMMIT");
      const done = await runToEnd(started.body.id);
      expect(done).toMatchObject({ status: "completed", planned: 3, processed: 3, discarded: 3 });
    });
    const late = await bed.call("GET", `${BASE}?job_id=gl-late`, { token: bed.tokens.read });
    expect(late.body.items).toEqual([expect.objectContaining({ status: "pending_review" })]);
  });

  it("a bulk discard needs a reason", async () => {
    for (const body of [
      { filter: { consumer: "guard-big" } },
      { filter: { consumer: "guard-big" }, reason: " " },
    ]) {
      expectProblem(await bed.call("POST", `${BASE}/discard`, { token: bed.tokens.discard, body }), 400);
    }
  });
});

describe("running an operation", () => {
  it("replays, supersedes the applied, leaves conflicts and refused sends pending with the reason, and never runs twice", async () => {
    const { queueUrl, ids } = await seedQueue("run-mixed", 6);
    const missing = `${bed.emulator.endpoint}/000000000000/run-no-such-queue`;
    const [gone] = await seedDeadLetters(bed.db, [
      { consumer: "run-mixed", job_id: "run-mixed-gone", queue: missing },
    ]);
    await bed.db.withClient(async (c) => {
      await insertFence(c, "run-mixed-1", { consumer: "run-mixed" });
    });
    const filter = { consumer: "run-mixed" };
    const plan = await bed.call("POST", `${BASE}/replay/plan`, {
      token: bed.tokens.replay,
      body: { filter },
    });
    expect(plan.body).toMatchObject({ matched: 7, superseded: 1, would_send: 6 });
    const started = await bed.call("POST", `${BASE}/replay`, {
      token: bed.tokens.replay,
      body: { filter, token: plan.body.token, rate_per_second: 1000 },
    });
    expect(started.status).toBe(202);
    const done = await runToEnd(started.body.id);
    expect(done).toMatchObject({ status: "completed", processed: 7, replayed: 5, superseded: 1, failed: 1 });
    expect(done.skipped).toEqual([
      {
        dead_letter_id: gone,
        reason: "send-failed",
        detail: expect.stringContaining("SQS refused"),
        at: expect.any(String),
      },
    ]);
    expect(JSON.stringify(done)).not.toContain(missing);
    expect(await receiveAll(bed.sqs, queueUrl)).toHaveLength(5);
    // Nothing more happens on further runs.
    await runBulkOperations(worker(), { budgetMs: 300 });
    expect(messagesIn(bed.emulator, "run-mixed")).toBe(5);
    expect(ids).toHaveLength(6);
  });

  it("ten messages near SQS's size limit are packed by size, not by count, and all replayed", async () => {
    const big = "x".repeat(300 * 1024);
    const { queueUrl } = await seedQueue("run-large", 10, {
      payload: { job_id: "j", tenant_id: "t_42", payload: { user_id: "u1", points: 5, note: big } },
    });
    const started = await bed.call("POST", `${BASE}/replay`, {
      token: bed.tokens.replay,
      body: { filter: { consumer: "run-large" }, rate_per_second: 1000 },
    });
    expect(started.status).toBe(202);
    const done = await runToEnd(started.body.id);
    expect(done).toMatchObject({ status: "completed", processed: 10, replayed: 10, failed: 0 });
    const received = await receiveAll(bed.sqs, queueUrl);
    expect(received).toHaveLength(10);
    expect(received.every((m) => (m.Body ?? "").length > 300 * 1024)).toBe(true);
  });

  it("a message over 1 MiB is sent alone, refused by SQS and left pending; the others are replayed", async () => {
    const { queueUrl } = await seedQueue("run-oversize", 3);
    const [huge] = await seedDeadLetters(bed.db, [
      {
        consumer: "run-oversize",
        job_id: "run-oversize-huge",
        queue: queueUrl,
        payload: { job_id: "j", tenant_id: "t_42", payload: { note: "x".repeat(1_048_577) } },
      },
    ]);
    const started = await bed.call("POST", `${BASE}/replay`, {
      token: bed.tokens.replay,
      body: { filter: { consumer: "run-oversize" }, rate_per_second: 1000 },
    });
    expect(started.status).toBe(202);
    const done = await runToEnd(started.body.id);
    expect(done).toMatchObject({ status: "completed", processed: 4, replayed: 3, failed: 1 });
    // No message over 1 MiB can be sent: SQS refuses it as the sender's fault, not as one to retry.
    expect(done.skipped).toEqual([
      {
        dead_letter_id: huge,
        reason: "send-failed",
        detail: expect.stringMatching(
          /^SQS refused the message: (AWS\.SimpleQueueService\.)?InvalidParameterValue$/,
        ),
        at: expect.any(String),
      },
    ]);
    expect(await receiveAll(bed.sqs, queueUrl)).toHaveLength(3);
  });

  it("is paced: rows per second never exceed the rate", async () => {
    await seedQueue("run-paced", 30);
    const filter = { consumer: "run-paced" };
    const plan = await bed.call("POST", `${BASE}/discard/plan`, {
      token: bed.tokens.discard,
      body: { filter },
    });
    const started = await bed.call("POST", `${BASE}/discard`, {
      token: bed.tokens.discard,
      body: { filter, reason: "paced", rate_per_second: 10, token: plan.body.token },
    });
    expect(started.status).toBe(202);
    const begun = Date.now();
    const done = await runToEnd(started.body.id);
    const elapsed = Date.now() - begun;
    expect(done).toMatchObject({ status: "completed", discarded: 30 });
    // Three chunks of ten at ten a second: the third may not start before two seconds have passed.
    expect(elapsed).toBeGreaterThanOrEqual(1_900);
  });

  it("can be cancelled by someone allowed its kind; what ran stays done, nothing more runs", async () => {
    await seedQueue("run-cancel", 12);
    const started = await bed.call("POST", `${BASE}/discard`, {
      token: bed.tokens.discard,
      body: { filter: { consumer: "run-cancel" }, reason: "stop me", rate_per_second: 4 },
    });
    const id: string = started.body.id;
    expect(await runChunk(worker())).toMatchObject({ kind: "ran", rows: 4 });
    expectProblem(await bed.call("POST", `${BASE}/operations/${id}/cancel`, { token: bed.tokens.read }), 403);
    expectProblem(
      await bed.call("POST", `${BASE}/operations/${id}/cancel`, { token: bed.tokens.replay }),
      403,
    );
    const cancelled = await bed.call("POST", `${BASE}/operations/${id}/cancel`, {
      token: bed.tokens.discard,
    });
    expect(cancelled.status).toBe(200);
    expect(cancelled.body).toMatchObject({
      status: "cancelled",
      cancelled_by: "local-discarder",
      processed: 4,
    });
    await runBulkOperations(worker(), { budgetMs: 1_500 });
    expect(await readOperation(bed.opsPool, id)).toMatchObject({ status: "cancelled", processed: 4 });
    const again = await bed.call("POST", `${BASE}/operations/${id}/cancel`, { token: bed.tokens.discard });
    expectProblem(again, 409);
    expect(again.body).toMatchObject({ reason: "operation-finished", operation_status: "cancelled" });
    expectProblem(
      await bed.call("POST", `${BASE}/operations/00000000-0000-4000-8000-000000000000/cancel`, {
        token: bed.tokens.admin,
      }),
      404,
    );
  });

  it("a chunk SQS cannot be reached for is retried with backoff, not marked failed, and completes later", async () => {
    const { queueUrl } = await seedQueue("run-unreachable", 3);
    const op = await startOperation(
      { pool: bed.opsPool, sealKey: TEST_SEAL_KEY },
      { kind: "replay", filter: { consumer: "run-unreachable" }, rate_per_second: 1000, delay_seconds: 0 },
      "tester",
    );
    // A client whose requests all fail to connect: every queue is unreachable.
    const dead = new SQSClient({
      region: LOCAL_REGION,
      endpoint: "http://127.0.0.1:9",
      credentials: { accessKeyId: "x", secretAccessKey: "y" },
      maxAttempts: 1,
    });
    expect(await runChunk({ pool: bed.opsPool, sqs: dead })).toEqual({ kind: "failed", operationId: op.id });
    const after = await readOperation(bed.opsPool, op.id);
    expect(after).toMatchObject({ status: "running", processed: 0, failed: 0 });
    expect(after.last_error).toMatch(/could not be reached/);
    expect(Date.parse(after.next_run_at)).toBeGreaterThan(Date.now());
    const pending = await bed.call("GET", `${BASE}?consumer=run-unreachable&status=pending_review`, {
      token: bed.tokens.read,
    });
    expect(pending.body.items).toHaveLength(3);
    dead.destroy();
    // Once due again, a worker that reaches SQS finishes it.
    for (let i = 0; i < 3 && (await readOperation(bed.opsPool, op.id)).status === "running"; i++) {
      await runBulkOperations(worker(), { budgetMs: 3_000 });
    }
    expect(await readOperation(bed.opsPool, op.id)).toMatchObject({ status: "completed", replayed: 3 });
    expect(await receiveAll(bed.sqs, queueUrl)).toHaveLength(3);
  });
});

describe("the pace's floor", () => {
  it("a rate below 0.01 rows per second is refused as a bad request naming the field, never started, never a database error", async () => {
    await seedQueue("floor", 2);
    const count = async () =>
      (await bed.db.withClient((c) => c.query("SELECT count(*)::int AS n FROM core.bulk_operations"))).rows[0]
        .n;
    const before = await count();
    for (const [kind, body] of [
      ["replay", { filter: { consumer: "floor" } }],
      ["discard", { filter: { consumer: "floor" }, reason: "floor" }],
    ] as const) {
      // 1e-40 was accepted (202) and then failed every chunk; 1e-46 underflowed `real` (a raw sqlstate).
      for (const rate of [1e-40, 1e-46, 5e-324, 0.0099, 0, -1]) {
        const response = await bed.call("POST", `${BASE}/${kind}`, {
          token: kind === "replay" ? bed.tokens.replay : bed.tokens.discard,
          body: { ...body, rate_per_second: rate },
        });
        expectProblem(response, 400);
        expect(response.body.errors, JSON.stringify(response.body)).toEqual([
          expect.objectContaining({ location: "body", field: "rate_per_second" }),
        ]);
        expect(JSON.stringify(response.body)).not.toMatch(/sqlstate|22003|22008|interval/i);
      }
    }
    expect(await count()).toBe(before);
  });

  it("the floor itself is taken, and its first chunk is paced 100 seconds, not overflowed", async () => {
    await seedQueue("floor-ok", 2);
    const started = await bed.call("POST", `${BASE}/discard`, {
      token: bed.tokens.discard,
      body: { filter: { consumer: "floor-ok" }, reason: "at the floor", rate_per_second: 0.01 },
    });
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    expect(started.body.rate_per_second).toBeCloseTo(0.01, 6);
    const id: string = started.body.id;
    const progress = async () =>
      (
        await bed.db.withClient((c) =>
          c.query<{ processed: number; status: string; pause: number }>(
            `SELECT processed::int AS processed, status,
                    extract(epoch FROM next_run_at - now())::float8 AS pause
               FROM core.bulk_operations WHERE id = $1`,
            [id],
          ),
        )
      ).rows[0];
    // Other files' operations may be due as well: run chunks until this one has done its first.
    for (let i = 0; i < 50 && (await progress())?.processed === 0; i++) await runChunk(worker());
    const after = await progress();
    expect(after).toMatchObject({ processed: 1, status: "running" });
    expect(after?.pause).toBeGreaterThan(90);
    expect(after?.pause).toBeLessThanOrEqual(100.5);
  });

  it("the table refuses a rate below the floor whoever writes it (the ops login's INSERT)", async () => {
    await expect(
      bed.opsPool.query(
        `INSERT INTO core.bulk_operations (kind, filter, reason, delay_seconds, rate_per_second, planned, submitted_by)
         VALUES ('discard', '{}', 'below', 0, 0.001, 1, 'tester')`,
      ),
    ).rejects.toMatchObject({ code: "23514", constraint: "bulk_operations_rate" });
    // 0.01 is stored as the `real` nearest it, 0.0099999998, and is still at the floor.
    await expect(
      bed.opsPool.query(
        `INSERT INTO core.bulk_operations (kind, filter, reason, delay_seconds, rate_per_second, planned, submitted_by)
         VALUES ('discard', '{}', 'at the floor', 0, 0.01, 1, 'tester') RETURNING id`,
      ),
    ).resolves.toMatchObject({ rowCount: 1 });
  });
});

describe("replay overrides and errors", () => {
  it("a replay may be delayed (DelaySeconds); the envelope is sent unchanged", async () => {
    const { queueUrl, ids } = await seedQueue("delay-one", 1);
    const replay = await bed.call("POST", `${BASE}/${ids[0]}/replay`, {
      token: bed.tokens.replay,
      body: { delay_seconds: 2 },
    });
    expect(replay.status).toBe(200);
    const now = await bed.sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, WaitTimeSeconds: 0 }));
    expect(now.Messages ?? []).toHaveLength(0);
    const later = await bed.sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, WaitTimeSeconds: 4 }));
    expect(later.Messages).toHaveLength(1);
    for (const delay of [-1, 901, 1.5, "5"]) {
      expectProblem(
        await bed.call("POST", `${BASE}/${ids[0]}/replay`, {
          token: bed.tokens.replay,
          body: { delay_seconds: delay },
        }),
        400,
      );
    }
  });

  it("a delay is refused for FIFO queues, single and bulk", async () => {
    const fifo = (await bed.queue("delay-fifo.fifo", { FifoQueue: "true" })).url;
    const [id] = await seedDeadLetters(bed.db, [{ consumer: "delay-fifo", job_id: "df-1", queue: fifo }]);
    expectProblem(
      await bed.call("POST", `${BASE}/${id}/replay`, {
        token: bed.tokens.replay,
        body: { delay_seconds: 5 },
      }),
      400,
    );
    expectProblem(
      await bed.call("POST", `${BASE}/replay/plan`, {
        token: bed.tokens.replay,
        body: { filter: { consumer: "delay-fifo" }, delay_seconds: 5 },
      }),
      400,
    );
    expectProblem(
      await bed.call("POST", `${BASE}/replay`, {
        token: bed.tokens.replay,
        body: { filter: { consumer: "delay-fifo" }, delay_seconds: 5 },
      }),
      400,
    );
  });

  it("a 502 says what failed without the queue URL or SQS's text, and carries a correlation id", async () => {
    const missing = `${bed.emulator.endpoint}/000000000000/no-such-replay-queue`;
    const [id] = await seedDeadLetters(bed.db, [{ consumer: "upstream", job_id: "up-1", queue: missing }]);
    const replay = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay });
    expectProblem(replay, 502);
    expect(replay.body.detail).toMatch(/does not exist/);
    expect(replay.body.correlation_id).toEqual(expect.any(String));
    const text = JSON.stringify(replay.body);
    expect(text).not.toContain("no-such-replay-queue");
    expect(text).not.toContain(bed.emulator.endpoint);
    expect(text).not.toMatch(/NonExistentQueue|QueueDoesNotExist/);
  });
});

describe("a worker with nothing left to run", () => {
  it("returns at once, however long its budget: no operation, or only finished ones, is nothing due", {
    timeout: 60_000,
  }, async () => {
    // A database of its own: the other tests here leave operations running.
    const own = await createTestDatabase();
    const pool = createPool({ connectionString: own.url, role: "jobfence_ops", max: 2 });
    try {
      const deps = { pool, sqs: bed.sqs };
      const budgetMs = 10_000;
      expect(await msUntilDue(pool)).toBeUndefined();
      let began = Date.now();
      expect(await runBulkOperations(deps, { budgetMs })).toEqual({ chunks: 0, rows: 0, failedChunks: 0 });
      expect(Date.now() - began, "ms the worker stayed with nothing to run").toBeLessThan(budgetMs / 2);

      // One operation, which the run finishes: the worker leaves then, not at the end of its budget.
      const { url: queueUrl } = await bed.queue("idle-worker");
      await seedDeadLetters(own, [{ consumer: "idle-worker", job_id: "idle-worker-1", queue: queueUrl }]);
      const bulkDeps = { pool, sealKey: TEST_SEAL_KEY };
      const filter = { consumer: "idle-worker" };
      const operation = await startOperation(
        bulkDeps,
        {
          kind: "replay",
          filter,
          token: (await planOperation(bulkDeps, "replay", filter)).token ?? undefined,
          rate_per_second: 1000,
          delay_seconds: 0,
        },
        "idle-worker-test",
      );
      began = Date.now();
      expect(await runBulkOperations(deps, { budgetMs })).toMatchObject({
        chunks: 1,
        rows: 1,
        failedChunks: 0,
      });
      expect(Date.now() - began, "ms the worker stayed after its only operation finished").toBeLessThan(
        budgetMs / 2,
      );
      expect(await readOperation(pool, operation.id)).toMatchObject({ status: "completed", replayed: 1 });
      expect(await msUntilDue(pool)).toBeUndefined();
    } finally {
      await pool.end();
      await own.drop();
    }
  });
});
