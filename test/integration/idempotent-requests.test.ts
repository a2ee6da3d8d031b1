/**
 * Idempotent requests to the ops API (issue 34, item 5), through the real HTTP adapter, the
 * jobfence_ops pool and the SQS emulator: at most one running bulk operation per kind and filter,
 * however many identical starts arrive at once; and the `Idempotency-Key` of every POST (a repeat
 * gets the first response and does nothing, another request under the key is refused, keys are per
 * caller, a repeat in flight is told to retry, a dead process's claim is taken over, keys expire and
 * are cleaned up).
 */
import { randomUUID } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runMigrations } from "../../shared/db/migrate.ts";
import { coreMigrationSet } from "../../shared/db/migrations.ts";
import { claimIdempotencyKey } from "../../shared/db/queries/idempotency-keys.ts";
import { IDEMPOTENCY, requestDigest } from "../../shared/dead-letters/idempotency.ts";
import { runFenceCleanup } from "../../shared/fence/cleanup.ts";
import { PERMISSION } from "../../shared/http/auth.ts";
import { BASE, expectProblem, seedDeadLetters } from "../support/api-fixtures.ts";
import { type ApiResponse, type ApiTestBed, apiTestBed } from "../support/api-harness.ts";
import { createTestDatabase } from "../support/database.ts";
import { messagesIn } from "../support/sqs.ts";

let bed: ApiTestBed;
beforeAll(async () => {
  bed = await apiTestBed({ bulk: { confirmAbove: 20 } });
  // A dead letter no test's filter matches: a small set is never every pending one, which needs a plan.
  await seedDeadLetters(bed.db, [{ consumer: "bystander", job_id: "bystander-1" }]);
});
afterAll(async () => {
  await bed?.close();
});

/** Pending dead letters of a consumer of their own, on a real queue of that name. */
async function seedQueue(name: string, count: number): Promise<{ queueUrl: string; ids: string[] }> {
  const queueUrl = (await bed.queue(name)).url;
  const ids = await seedDeadLetters(
    bed.db,
    Array.from({ length: count }, (_, i) => ({ consumer: name, job_id: `${name}-${i}`, queue: queueUrl })),
  );
  return { queueUrl, ids };
}

async function sql<T extends Record<string, unknown>>(text: string, params: unknown[] = []): Promise<T[]> {
  return bed.db.withClient(async (c) => (await c.query<T>(text, params)).rows);
}

const statusOf = async (id: string) =>
  (await sql<{ status: string }>("SELECT status FROM core.dead_letters WHERE id = $1", [id]))[0]?.status;

const keyed = (key: string, headers: Record<string, string> = {}) => ({ ...headers, "idempotency-key": key });

/** Asserts that `repeat` is `first` given again: same status and body, marked as a replay. */
function expectReplayOf(repeat: ApiResponse, first: ApiResponse): void {
  expect(repeat.status).toBe(first.status);
  expect(repeat.body).toEqual(first.body);
  expect(repeat.headers.get("idempotent-replayed")).toBe("true");
  expect(first.headers.get("idempotent-replayed")).toBeNull();
}

/** Moves a key's row back in time by `seconds` (its claim and its expiry together). */
async function age(key: string, seconds: number): Promise<void> {
  const rows = await sql(
    `UPDATE core.idempotency_keys
        SET created_at = created_at - make_interval(secs => $2),
            expires_at = expires_at - make_interval(secs => $2),
            completed_at = completed_at - make_interval(secs => $2)
      WHERE key = $1 RETURNING key`,
    [key, seconds],
  );
  expect(rows.length).toBeGreaterThan(0);
}

describe("one running bulk operation per kind and filter", () => {
  it("ten token-less starts of one set at once: exactly one 202, nine 409 operation-running naming it", async () => {
    const { queueUrl } = await seedQueue("race-replay", 5);
    // Half of them spell the filter with its keys the other way round: the same filter.
    const responses = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        bed.call("POST", `${BASE}/replay`, {
          token: bed.tokens.replay,
          body: {
            filter:
              i % 2 === 0
                ? { consumer: "race-replay", queue: queueUrl }
                : { queue: queueUrl, consumer: "race-replay" },
            rate_per_second: 10,
          },
        }),
      ),
    );
    const started = responses.filter((r) => r.status === 202);
    expect(started, JSON.stringify(responses.map((r) => [r.status, r.body]))).toHaveLength(1);
    const winner = started[0]?.body.id;
    for (const refused of responses.filter((r) => r.status !== 202)) {
      expectProblem(refused, 409);
      expect(refused.body).toMatchObject({ reason: "operation-running", operation_id: winner });
    }
    const operations = await sql<{ id: string; status: string }>(
      "SELECT id, status FROM core.bulk_operations WHERE filter->>'consumer' = 'race-replay'",
    );
    expect(operations).toEqual([{ id: winner, status: "running" }]);
  });

  it("a start while one runs is refused; another kind, another filter, or the same after a cancel starts", async () => {
    const { ids } = await seedQueue("race-cancel", 3);
    const filter = { consumer: "race-cancel" };
    const first = await bed.call("POST", `${BASE}/replay`, { token: bed.tokens.replay, body: { filter } });
    expect(first.status).toBe(202);
    const again = await bed.call("POST", `${BASE}/replay`, {
      token: bed.tokens.replay,
      body: { filter, rate_per_second: 7, delay_seconds: 3 },
    });
    expectProblem(again, 409);
    expect(again.body).toMatchObject({ reason: "operation-running", operation_id: first.body.id });

    const narrower = await bed.call("POST", `${BASE}/replay`, {
      token: bed.tokens.replay,
      body: { filter: { ...filter, job_id: "race-cancel-1" } },
    });
    expect(narrower.status).toBe(202);
    const discard = await bed.call("POST", `${BASE}/discard`, {
      token: bed.tokens.discard,
      body: { filter, reason: "noise" },
    });
    expect(discard.status).toBe(202);

    const cancel = await bed.call("POST", `${BASE}/operations/${first.body.id}/cancel`, {
      token: bed.tokens.replay,
    });
    expect(cancel.status).toBe(200);
    const after = await bed.call("POST", `${BASE}/replay`, { token: bed.tokens.replay, body: { filter } });
    expect(after.status).toBe(202);
    expect(after.body.id).not.toBe(first.body.id);
    expect(await statusOf(ids[0] as string)).toBe("pending_review");
  });

  it("migration 0028 keeps the oldest of running duplicates made before it and cancels the others", async () => {
    const db = await createTestDatabase({ empty: true });
    try {
      const shipped = coreMigrationSet().migrations;
      await runMigrations({
        connectionString: db.url,
        sets: [{ name: "core", migrations: shipped.filter((m) => m.version < 28) }],
      });
      const before = await db.withClient(async (c) => {
        const insert = (filter: string, kind = "replay", at = "now()") =>
          c.query<{ id: string }>(
            `INSERT INTO core.bulk_operations (kind, filter, reason, rate_per_second, planned, submitted_by, submitted_at)
             VALUES ($1, $2::jsonb, CASE WHEN $1 = 'discard' THEN 'noise' END, 10, 1, 'someone', ${at}) RETURNING id`,
            [kind, filter],
          );
        return {
          oldest: (await insert('{"consumer":"a","queue":"q"}', "replay", "now() - interval '2 minutes'"))
            .rows[0]?.id,
          later: (await insert('{"queue":"q","consumer":"a"}', "replay", "now() - interval '1 minute'"))
            .rows[0]?.id,
          latest: (await insert('{"consumer":"a","queue":"q"}')).rows[0]?.id,
          otherKind: (await insert('{"consumer":"a","queue":"q"}', "discard")).rows[0]?.id,
          otherFilter: (await insert('{"consumer":"b"}')).rows[0]?.id,
        };
      });
      await runMigrations({ connectionString: db.url });
      const after = await db.withClient(
        async (c) =>
          (
            await c.query<{ id: string; status: string; cancelled_by: string | null }>(
              "SELECT id, status, cancelled_by FROM core.bulk_operations",
            )
          ).rows,
      );
      const statusOfOperation = (id: string | undefined) => after.find((r) => r.id === id);
      expect(statusOfOperation(before.oldest)).toMatchObject({ status: "running", cancelled_by: null });
      expect(statusOfOperation(before.later)).toMatchObject({ status: "cancelled" });
      expect(statusOfOperation(before.latest)).toMatchObject({ status: "cancelled" });
      expect(statusOfOperation(before.otherKind)).toMatchObject({ status: "running" });
      expect(statusOfOperation(before.otherFilter)).toMatchObject({ status: "running" });
    } finally {
      await db.drop();
    }
  });
});

describe("Idempotency-Key", () => {
  it("a single replay repeated with its key gets the first response again, marked replayed, and sends no second message", async () => {
    const {
      ids: [id],
    } = await seedQueue("key-replay", 1);
    const key = randomUUID();
    const first = await bed.call("POST", `${BASE}/${id}/replay`, {
      token: bed.tokens.replay,
      headers: keyed(key),
    });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ id, status: "replayed", message_id: expect.any(String) });
    expect(messagesIn(bed.emulator, "key-replay")).toBe(1);

    const repeat = await bed.call("POST", `${BASE}/${id}/replay`, {
      token: bed.tokens.replay,
      headers: keyed(key),
    });
    expectReplayOf(repeat, first);
    // The same request spelled otherwise: the body validates to the same (delay_seconds defaults to 0).
    const spelled = await bed.call("POST", `${BASE}/${(id as string).toUpperCase()}/replay`, {
      token: bed.tokens.replay,
      headers: keyed(key),
      body: { delay_seconds: 0 },
    });
    expectReplayOf(spelled, first);
    expect(messagesIn(bed.emulator, "key-replay")).toBe(1);

    // Without the key, a repeat is a new request, refused by the dead letter's state.
    const unkeyed = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay });
    expectProblem(unkeyed, 409);
    expect(messagesIn(bed.emulator, "key-replay")).toBe(1);
  });

  it("a bulk start and a cancel repeated with their keys get their first responses, not a 409", async () => {
    await seedQueue("key-bulk", 2);
    const startKey = randomUUID();
    const start = () =>
      bed.call("POST", `${BASE}/discard`, {
        token: bed.tokens.discard,
        headers: keyed(startKey),
        body: { filter: { consumer: "key-bulk" }, reason: "noise" },
      });
    const first = await start();
    expect(first.status).toBe(202);
    expectReplayOf(await start(), first);
    const plans = await sql("SELECT id FROM core.bulk_operations WHERE filter->>'consumer' = 'key-bulk'");
    expect(plans).toHaveLength(1);

    const cancelKey = randomUUID();
    const cancel = () =>
      bed.call("POST", `${BASE}/operations/${first.body.id}/cancel`, {
        token: bed.tokens.discard,
        headers: keyed(cancelKey),
      });
    const cancelled = await cancel();
    expect(cancelled.status).toBe(200);
    expectReplayOf(await cancel(), cancelled);
  });

  it("the same key with another request is refused 422 and does nothing", async () => {
    const {
      ids: [x, y],
    } = await seedQueue("key-reuse", 2);
    const key = randomUUID();
    const first = await bed.call("POST", `${BASE}/${x}/discard`, {
      token: bed.tokens.admin,
      headers: keyed(key),
      body: { reason: "first" },
    });
    expect(first.status).toBe(200);
    for (const [path, body] of [
      [`${BASE}/${x}/discard`, { reason: "another reason" }],
      [`${BASE}/${y}/discard`, { reason: "first" }],
      [`${BASE}/${y}/replay`, {}],
      [`${BASE}/discard/plan`, { filter: { consumer: "key-reuse" } }],
    ] as const) {
      const refused = await bed.call("POST", path, { token: bed.tokens.admin, headers: keyed(key), body });
      expectProblem(refused, 422);
      expect(refused.body).toMatchObject({ reason: "idempotency-key-reused" });
      expect(refused.body.detail).toContain("discardDeadLetter");
    }
    expect(await statusOf(y as string)).toBe("pending_review");
    expect(messagesIn(bed.emulator, "key-reuse")).toBe(0);
  });

  it("another caller's same key is a key of its own", async () => {
    const {
      ids: [x, y],
    } = await seedQueue("key-actors", 2);
    const alice = await bed.issuer.sign("alice", [PERMISSION.discard]);
    const bob = await bed.issuer.sign("bob", [PERMISSION.discard]);
    const key = "shared-key-1";
    const discard = (token: string, id: string | undefined, reason: string) =>
      bed.call("POST", `${BASE}/${id}/discard`, { token, headers: keyed(key), body: { reason } });
    const byAlice = await discard(alice, x, "alice's");
    expect(byAlice.status).toBe(200);
    const byBob = await discard(bob, y, "bob's");
    expect(byBob.status).toBe(200);
    expect(byBob.headers.get("idempotent-replayed")).toBeNull();
    expect(
      await sql("SELECT resolved_by FROM core.dead_letters WHERE id = ANY($1) ORDER BY resolved_by", [
        [x, y],
      ]),
    ).toEqual([{ resolved_by: "alice" }, { resolved_by: "bob" }]);
    expectReplayOf(await discard(bob, y, "bob's"), byBob);
    expectReplayOf(await discard(alice, x, "alice's"), byAlice);
    // Bob's key is bound to Bob's first request: Alice's request sent by Bob under it is another one.
    expectProblem(await discard(bob, x, "alice's"), 422);
  });

  it("a repeat while the first runs is 409 idempotency-key-in-progress; once it is answered, the repeat gets its answer", async () => {
    const {
      ids: [id],
    } = await seedQueue("key-in-flight", 1);
    const key = randomUUID();
    const holder = new pg.Client({ connectionString: bed.db.url });
    await holder.connect();
    try {
      // A concurrent decision holds the dead letter: the first request waits on it.
      await holder.query("BEGIN");
      await holder.query("SELECT id FROM core.dead_letters WHERE id = $1 FOR UPDATE", [id]);
      const firstCall = bed.call("POST", `${BASE}/${id}/replay`, {
        token: bed.tokens.replay,
        headers: keyed(key),
      });
      for (let i = 0; i < 100; i++) {
        if ((await sql("SELECT 1 FROM core.idempotency_keys WHERE key = $1", [key])).length > 0) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const repeat = await bed.call("POST", `${BASE}/${id}/replay`, {
        token: bed.tokens.replay,
        headers: keyed(key),
      });
      expectProblem(repeat, 409);
      expect(repeat.body).toMatchObject({ reason: "idempotency-key-in-progress" });
      expect(repeat.headers.get("retry-after")).toBe("1");
      await holder.query("COMMIT");
      const first = await firstCall;
      expect(first.status).toBe(200);
      expectReplayOf(
        await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay, headers: keyed(key) }),
        first,
      );
      expect(messagesIn(bed.emulator, "key-in-flight")).toBe(1);
    } finally {
      await holder.end();
    }
  });

  it("a request that fails keeps nothing under its key: a retry is evaluated afresh", async () => {
    const key = randomUUID();
    const start = () =>
      bed.call("POST", `${BASE}/discard`, {
        token: bed.tokens.discard,
        headers: keyed(key),
        body: { filter: { consumer: "key-retry" }, reason: "noise" },
      });
    const nothing = await start();
    expectProblem(nothing, 409);
    expect(nothing.body.reason).toBe("nothing-matched");
    expect(await sql("SELECT 1 FROM core.idempotency_keys WHERE key = $1", [key])).toEqual([]);
    await seedQueue("key-retry", 1);
    const started = await start();
    expect(started.status).toBe(202);
    expectReplayOf(await start(), started);
  });

  it("an unanswered claim is taken over by the same request once older than the API's timeout, never before, never by another request", async () => {
    const {
      ids: [id],
    } = await seedQueue("key-abandoned", 1);
    const key = randomUUID();
    const path = `${BASE}/${id}/discard`;
    // What a process that died after claiming the key leaves: a claim with no response.
    const claim = await claimIdempotencyKey(
      bed.opsPool,
      {
        actor: "local-discarder",
        key,
        operation: "discardDeadLetter",
        digest: requestDigest("POST", path, { reason: "gone" }),
      },
      IDEMPOTENCY.staleAfterSeconds,
    );
    expect(claim).toEqual(expect.any(String));
    const discard = (reason: string) =>
      bed.call("POST", path, { token: bed.tokens.discard, headers: keyed(key), body: { reason } });
    expectProblem(await discard("gone"), 409);
    await age(key, IDEMPOTENCY.staleAfterSeconds - 5);
    expectProblem(await discard("gone"), 409);
    await age(key, 10);
    expectProblem(await discard("another"), 422);
    const taken = await discard("gone");
    expect(taken.status).toBe(200);
    expect(taken.body).toMatchObject({ id, status: "discarded", reason: "gone" });
    expectReplayOf(await discard("gone"), taken);
    const [row] = await sql<{ claim: string }>("SELECT claim FROM core.idempotency_keys WHERE key = $1", [
      key,
    ]);
    expect(row?.claim).not.toBe(claim);
  });

  it("keys expire after 24 hours: an expired key is free for another request, and the cleanup deletes it", async () => {
    const {
      ids: [x, y],
    } = await seedQueue("key-expiry", 2);
    const key = randomUUID();
    const live = randomUUID();
    const discard = (id: string | undefined, k = key) =>
      bed.call("POST", `${BASE}/${id}/discard`, {
        token: bed.tokens.discard,
        headers: keyed(k),
        body: { reason: "old" },
      });
    expect((await discard(x)).status).toBe(200);
    await age(key, 24 * 3600 - 60);
    expectProblem(await discard(y), 422);
    await age(key, 61);
    const reused = await discard(y);
    expect(reused.status).toBe(200);
    expect(reused.headers.get("idempotent-replayed")).toBeNull();
    expect(await statusOf(y as string)).toBe("discarded");

    await age(key, 24 * 3600 + 1);
    // A live key beside it, which the cleanup keeps.
    const {
      ids: [z],
    } = await seedQueue("key-expiry-live", 1);
    expect((await discard(z, live)).status).toBe(200);
    const cleanup = new pg.Client({ connectionString: bed.db.url });
    await cleanup.connect();
    try {
      await cleanup.query("SET ROLE jobfence_cleanup");
      const report = await runFenceCleanup({ db: cleanup, budgetMs: 10_000, pauseMs: 0 });
      expect(report.idempotencyKeysDeleted).toBeGreaterThanOrEqual(1);
    } finally {
      await cleanup.end();
    }
    expect(await sql("SELECT key FROM core.idempotency_keys WHERE key = ANY($1)", [[key, live]])).toEqual([
      { key: live },
    ]);
  });

  it("the header is validated on every POST: empty, over 255 characters, a space or a non-ASCII character is 400 naming it, and nothing happens", async () => {
    const {
      ids: [id],
    } = await seedQueue("key-invalid", 1);
    for (const value of ["", "x".repeat(256), "two words", "clé"]) {
      const response = await bed.call("POST", `${BASE}/${id}/discard`, {
        token: bed.tokens.discard,
        headers: { "idempotency-key": value },
        body: { reason: "invalid key" },
      });
      expectProblem(response, 400);
      expect(response.body.errors).toEqual([
        { location: "header", field: "Idempotency-Key", message: expect.any(String) },
      ]);
    }
    expect(await statusOf(id as string)).toBe("pending_review");
    const longest = await bed.call("POST", `${BASE}/${id}/discard`, {
      token: bed.tokens.discard,
      headers: keyed("~".repeat(255)),
      body: { reason: "valid key" },
    });
    expect(longest.status).toBe(200);
  });
});
