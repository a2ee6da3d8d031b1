/**
 * Failure groups: the database fingerprints every dead letter's error from its class,
 * its message with ids and numbers normalised away, and the first frame of the consumer's own code;
 * stats and the groups endpoint count them from trigger-kept rows; list, plan and bulk operations
 * filter by group, error class and message.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runBulkOperations } from "../../shared/dead-letters/bulk-worker.ts";
import { BASE, seedDeadLetters } from "../support/api-fixtures.ts";
import { type ApiTestBed, apiTestBed } from "../support/api-harness.ts";
import { expectRefused, SQLSTATE } from "../support/expect-pg.ts";

let bed: ApiTestBed;
beforeAll(async () => {
  bed = await apiTestBed();
});
afterAll(async () => {
  await bed?.close();
});

async function sql<T>(text: string, params: unknown[] = []): Promise<T[]> {
  return bed.db.withClient(async (c) => (await c.query(text, params)).rows as T[]);
}

const stack = (frames: string[]) => ["Error: x", ...frames.map((f) => `    at ${f}`)].join("\n");

describe("the error fingerprint", () => {
  it("ignores ids, numbers and line numbers; keeps the class, the words, the SQLSTATE and the consumer's frame", async () => {
    const fingerprint = async (lastError: Record<string, unknown>) =>
      (
        await sql<{ f: string }>("SELECT encode(core.error_fingerprint($1::jsonb), 'hex') AS f", [
          JSON.stringify(lastError),
        ])
      )[0]?.f;
    const base = {
      class: "InsufficientBalanceError",
      message: "account acct-1842 has 12.50, needs 40 for order-99 (3f2b1c4d-1a2b-4c3d-9e8f-0123456789ab)",
      stack: stack([
        "Parser.parse (/srv/app/node_modules/pg-protocol/dist/parser.js:1:2)",
        "process.processTicksAndRejections (node:internal/process/task_queues:95:5)",
        "async award (/srv/app/functions/award-points/award.ts:41:7)",
        "async run (/srv/app/shared/record/spine.ts:200:3)",
      ]),
    };
    const same = [
      {
        ...base,
        message: "account acct-7 has 0, needs 5 for order-123456 (00000000-0000-4000-8000-000000000000)",
      },
      { ...base, stack: base.stack.replace("/srv/app/", "/var/task/").replace(":41:7", ":43:9") },
      {
        ...base,
        stack: stack([
          "new Promise (<anonymous>)",
          "async award (/elsewhere/functions/award-points/award.ts:1:1)",
        ]),
      },
    ];
    const different = [
      { ...base, class: "Error" },
      { ...base, message: "account acct-1842 is closed" },
      { ...base, stack: stack(["async settle (/srv/app/functions/award-points/award.ts:41:7)"]) },
      { ...base, stack: undefined },
    ];
    const reference = await fingerprint(base);
    expect(reference).toMatch(/^[0-9a-f]{32}$/);
    for (const variant of same) expect(await fingerprint(variant), JSON.stringify(variant)).toBe(reference);
    for (const variant of different)
      expect(await fingerprint(variant), JSON.stringify(variant)).not.toBe(reference);
    // A trailing error code is part of the failure: 23505 and 40001 are not the same one.
    const unique = await fingerprint({ class: "DatabaseError", message: "write failed for 3 [23505]" });
    const serialization = await fingerprint({
      class: "DatabaseError",
      message: "write failed for 3 [40001]",
    });
    expect(unique).not.toBe(serialization);
    expect(await fingerprint({ class: "DatabaseError", message: "write failed for 7 [23505]" })).toBe(unique);
  });

  it("is the database's: no writer can set it or the class column", async () => {
    for (const column of ["error_fingerprint", "error_class"]) {
      await expectRefused(
        bed.db.withClient((c) =>
          c.query(
            `INSERT INTO core.dead_letters (job_id, consumer, queue, payload, attempts, error_kind, last_error,
               correlation_id, body_form, body, ${column})
             VALUES ('fg-x', 'fg', 'q', '{}', 1, 'hard', '{"class":"E","message":"m"}', 'c', 'text', '{}',
               ${column === "error_class" ? "'Forged'" : "'\\x00'::bytea"})`,
          ),
        ),
        SQLSTATE.generatedAlways,
      );
    }
  });
});

describe("groups", () => {
  let ids: string[];
  beforeAll(async () => {
    const queue = (await bed.queue("groups")).url;
    const rows = [
      ...Array.from({ length: 5 }, (_, i) => ({
        consumer: "fg-a",
        job_id: `fg-a-${i}`,
        queue,
        last_error: { class: "LedgerLockedError", message: `ledger row ${i * 17} locked by pid ${1000 + i}` },
        created_at: `2026-11-0${i + 1}T00:00:00Z`,
      })),
      ...Array.from({ length: 3 }, (_, i) => ({
        consumer: "fg-a",
        job_id: `fg-a-rates-${i}`,
        queue,
        error_kind: "hard",
        last_error: {
          class: "RateUnavailableError",
          message: `no FX rate for EUR/${["USD", "GBP", "CHF"][i]}`,
        },
      })),
      {
        consumer: "fg-b",
        job_id: "fg-b-0",
        queue,
        last_error: { class: "LedgerLockedError", message: "ledger row 1 locked by pid 1" },
      },
    ];
    ids = await seedDeadLetters(bed.db, rows);
  });

  it("stats and the groups endpoint count each consumer's groups, with first and last seen and a sample", async () => {
    const groups = await bed.call("GET", `${BASE}/groups?consumer=fg-a`, { token: bed.tokens.read });
    expect(groups.status).toBe(200);
    // The FX messages differ in a word, not an id: three groups of one; the lock errors are one group of five.
    expect(groups.body.items.map((g: { pending: number }) => g.pending)).toEqual([5, 1, 1, 1]);
    const [locks] = groups.body.items;
    expect(locks).toMatchObject({
      consumer: "fg-a",
      error_class: "LedgerLockedError",
      pending: 5,
      total: 5,
      first_seen: "2026-11-01T00:00:00.000000Z",
      last_seen: "2026-11-05T00:00:00.000000Z",
      sample: { id: ids[0], message: "ledger row 0 locked by pid 1000" },
    });
    const stats = await bed.call("GET", `${BASE}/stats`, { token: bed.tokens.read });
    const fgA = stats.body.groups.filter((g: { consumer: string }) => g.consumer === "fg-a");
    expect(fgA).toEqual(groups.body.items);
    // Another consumer's identical failure is its own group.
    const fgB = stats.body.groups.filter((g: { consumer: string }) => g.consumer === "fg-b");
    expect(fgB).toEqual([expect.objectContaining({ group: locks.group, pending: 1 })]);

    const list = await bed.call("GET", `${BASE}?group=${locks.group}&consumer=fg-a`, {
      token: bed.tokens.read,
    });
    expect(list.body.items.map((i: { id: string }) => i.id).sort()).toEqual(ids.slice(0, 5).sort());
    expect(list.body.items.every((i: { group: string }) => i.group === locks.group)).toBe(true);
    const byGroupOnly = await bed.call("GET", `${BASE}?group=${locks.group.toUpperCase()}`, {
      token: bed.tokens.read,
    });
    expect(byGroupOnly.body.items).toHaveLength(6);
    const byClass = await bed.call("GET", `${BASE}?error_class=RateUnavailableError`, {
      token: bed.tokens.read,
    });
    expect(byClass.body.items).toHaveLength(3);
    const byMessage = await bed.call("GET", `${BASE}?message=${encodeURIComponent("eur/gb")}`, {
      token: bed.tokens.read,
    });
    expect(byMessage.body.items.map((i: { job_id: string }) => i.job_id)).toEqual(["fg-a-rates-1"]);
    // LIKE's own characters are literal in a message match.
    for (const literal of ["%%%", "___", "\\\\\\"]) {
      const none = await bed.call("GET", `${BASE}?message=${encodeURIComponent(literal)}`, {
        token: bed.tokens.read,
      });
      expect(none.status).toBe(200);
      expect(none.body.items).toEqual([]);
    }
    for (const bad of ["group=xyz", "group=00", "message=ab", `message=${"m".repeat(201)}`, "error_class="]) {
      expect((await bed.call("GET", `${BASE}?${bad}`, { token: bed.tokens.read })).status, bad).toBe(400);
    }
  });

  it("a group is discarded in bulk by its fingerprint, and its pending count follows; the kept table matches a GROUP BY", async () => {
    const groups = await bed.call("GET", `${BASE}/groups?consumer=fg-a`, { token: bed.tokens.read });
    const locks = groups.body.items[0];
    const started = await bed.call("POST", `${BASE}/discard`, {
      token: bed.tokens.discard,
      body: {
        filter: { consumer: "fg-a", group: locks.group },
        reason: "lock storm during the deploy; retried upstream",
      },
    });
    expect(started.status).toBe(202);
    await runBulkOperations({ pool: bed.opsPool, sqs: bed.sqs }, { budgetMs: 1_500 });
    const after = await bed.call("GET", `${BASE}/groups?consumer=fg-a&include_resolved=true`, {
      token: bed.tokens.read,
    });
    expect(after.body.items.find((g: { group: string }) => g.group === locks.group)).toMatchObject({
      pending: 0,
      total: 5,
    });
    const pendingOnly = await bed.call("GET", `${BASE}/groups?consumer=fg-a`, { token: bed.tokens.read });
    expect(pendingOnly.body.items.map((g: { group: string }) => g.group)).not.toContain(locks.group);
    const drift = await sql(
      `SELECT g.consumer, g.fingerprint FROM core.dead_letter_groups g
         FULL JOIN (SELECT consumer, error_fingerprint AS fingerprint, count(*) AS total,
                           count(*) FILTER (WHERE status = 'pending_review') AS pending,
                           min(created_at) AS first_seen, max(created_at) AS last_seen
                      FROM core.dead_letters GROUP BY 1, 2) d USING (consumer, fingerprint)
        WHERE (g.total, g.pending, g.first_seen, g.last_seen) IS DISTINCT FROM (d.total, d.pending, d.first_seen, d.last_seen)`,
    );
    expect(drift).toEqual([]);
  });
});
