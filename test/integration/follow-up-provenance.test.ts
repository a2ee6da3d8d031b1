/**
 * The provenance of follow-ups (migration 0019): no consumer can make another consumer, or an
 * operator, act on an outbox row it forged. Each scenario logs in as a real login of consumer A
 * (award-points, which declares notify-user as its one follow-up target) made by
 * core.provision_login, and tries every argument it controls: a target A does not declare, a job
 * id deriveJobId does not give, a body of another job, a forged parent, B's rows through every
 * relay function, and its own work's fence transaction to lose another job's committed follow-up.
 * The replay side: an undelivered dead letter whose provenance fails is refused, single (409
 * `unproven-follow-up`) and bulk (skipped, with the reason), and a proven one is replayed.
 *
 * Only the SQL and the library of before the migration are used here, so every scenario runs (and
 * fails for its own reason) against the code before it.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runMigrations } from "../../shared/db/migrate.ts";
import { coreMigrationSet } from "../../shared/db/migrations.ts";
import { beginWithFences, type FencesInserted } from "../../shared/db/queries/begin-with-fences.ts";
import {
  consumerRoleName,
  ensureConsumerRole,
  provisionLogin,
  registerConsumerQueues,
} from "../../shared/db/queries/provision-login.ts";
import { canonicalJson } from "../../shared/envelope/canonical-json.ts";
import { deriveJobId } from "../../shared/producer/job-id.ts";
import { type ApiTestBed, apiTestBed } from "../support/api-harness.ts";
import { runBulkToEnd } from "../support/bulk.ts";
import { createTestDatabase } from "../support/database.ts";
import { commitFences } from "../support/fences.ts";
import { queueDepth } from "../support/sqs.ts";

const A = "award-points";
const B = "notify-user";
/** A consumer of the database that A does not declare as a target. */
const C = "record-payment";
const BASE = "/v1/core/dead-letters";
const FINGERPRINT = Buffer.alloc(16, 7);

let bed: ApiTestBed;
let notifyQueue: string;
const logins: pg.Client[] = [];
let asA: pg.Client;
let asB: pg.Client;

/** A real login of `consumer`, made as the deployment makes one. */
async function login(consumer: string): Promise<pg.Client> {
  const username = `jft_prov_${consumer.replace(/-/g, "_")}_${randomBytes(3).toString("hex")}`;
  const password = randomBytes(12).toString("hex");
  await bed.db.withClient((c) => provisionLogin(c, { consumer, username, password }));
  const url = new URL(bed.db.url);
  url.username = username;
  url.password = password;
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  logins.push(client);
  return client;
}

beforeAll(async () => {
  bed = await apiTestBed();
  await bed.db.withClient(async (c) => {
    await ensureConsumerRole(c, C);
    notifyQueue = (await bed.queue("notify-user-provenance")).url;
    await registerConsumerQueues(c, B, [notifyQueue]);
  });
  asA = await login(A);
  asB = await login(B);
});
afterAll(async () => {
  await Promise.all(logins.map((c) => c.end()));
  await bed?.close();
});

let serial = 0;
/** A fresh parent job id. */
const parentId = (label: string) => `prov-${label}-${++serial}`;

/** What a legitimate follow-up of A's job `parent` to `target` looks like. */
function followUp(parent: string, overrides: Record<string, unknown> = {}) {
  const target = (overrides.target as string | undefined) ?? B;
  const key = (overrides.key as string | number | undefined) ?? 0;
  const jobId = (overrides.job_id as string | undefined) ?? deriveJobId(target, A, parent, key);
  return {
    consumer: A,
    parent_job_id: parent,
    target,
    job_id: jobId,
    tenant_id: "t_42",
    correlation_id: `corr-${parent}`,
    body: JSON.stringify({
      job_id: jobId,
      tenant_id: "t_42",
      correlation_id: `corr-${parent}`,
      payload: { user_id: "u-1", kind: "points-awarded", points: 1 },
    }),
    follow_up_key: canonicalJson(key),
    ...overrides,
  };
}

const INSERT = `
  INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint,
                           follow_up_key)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`;

function insertRow(client: pg.ClientBase, row: ReturnType<typeof followUp>) {
  return client.query(INSERT, [
    row.consumer,
    row.parent_job_id,
    row.target,
    row.job_id,
    row.tenant_id,
    row.correlation_id,
    row.body,
    FINGERPRINT,
    row.follow_up_key,
  ]);
}

/** Opens A's fence transaction for `parent` on `client`, as the harness does (BEGIN and the fence in one). */
async function openFence(client: pg.ClientBase, parent: string): Promise<FencesInserted> {
  return await beginWithFences(client, {
    consumer: A,
    ttlSeconds: 3600,
    jobs: [{ jobId: parent, tenantId: "t_42", fingerprint: FINGERPRINT }],
  });
}

/** Runs `steps` in A's fence transaction for a new parent, and rolls it back. */
async function inFence<T>(label: string, steps: (parent: string) => Promise<T>): Promise<T> {
  const parent = parentId(label);
  await openFence(asA, parent);
  try {
    return await steps(parent);
  } finally {
    await asA.query("ROLLBACK");
  }
}

/**
 * A committed follow-up of `consumer`'s (written by the migrator, without a key as before migration
 * 0019: only its existence matters here).
 */
async function committedRow(label: string, consumer = A): Promise<{ target: string; job_id: string }> {
  const parent = parentId(label);
  const row = { ...followUp(parent), consumer, job_id: deriveJobId(B, consumer, parent, 0) };
  await bed.db.withClient((c) =>
    c.query(
      `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
      [
        row.consumer,
        row.parent_job_id,
        row.target,
        row.job_id,
        row.tenant_id,
        row.correlation_id,
        row.body,
        FINGERPRINT,
      ],
    ),
  );
  return { target: row.target, job_id: row.job_id };
}

const rowExists = (key: { target: string; job_id: string }) =>
  bed.db.withClient(
    async (c) =>
      (
        await c.query<{ attempts: number; next_attempt_at: Date }>(
          "SELECT attempts, next_attempt_at FROM core.outbox WHERE target = $1 AND job_id = $2",
          [key.target, key.job_id],
        )
      ).rows[0],
  );

const pendingDeadLettersOf = (jobId: string) =>
  bed.db.withClient(
    async (c) =>
      (
        await c.query("SELECT id FROM core.dead_letters WHERE job_id = $1 AND status = 'pending_review'", [
          jobId,
        ])
      ).rowCount,
  );

const RLS_REFUSED = { code: "42501" };

describe("a consumer's login writes only follow-ups it could have sent", () => {
  it("the forged row of the review: any job id and body, to a target, through its own relay into the target's dead letters", async () => {
    // As issue 30 found it: A's login writes a row of its choosing, then moves it as its relay would.
    const forgedJobId = "prov-forged-by-a";
    const body = JSON.stringify({
      job_id: forgedJobId,
      tenant_id: "t_42",
      correlation_id: "c",
      payload: { user_id: "victim", kind: "points-awarded", points: 1_000_000 },
    });
    await expect(
      asA.query(
        `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint)
         VALUES ($1, 'anything', $2, $3, 't_42', 'c', $4, $5)`,
        [A, B, forgedJobId, body, FINGERPRINT],
      ),
    ).rejects.toMatchObject(RLS_REFUSED);
    // Had it gone in, its relay's move would have made notify-user a pending dead letter of it.
    await asA
      .query('SELECT * FROM core.outbox_undelivered($1, $2, $3, $4, NULL, \'{"class":"X","message":"y"}\')', [
        A,
        B,
        forgedJobId,
        notifyQueue,
      ])
      .catch(() => undefined);
    expect(await pendingDeadLettersOf(forgedJobId)).toBe(0);
  });

  it("a legitimate follow-up, in its parent's fence transaction, goes in", async () => {
    await inFence("legit", async (parent) => {
      await expect(insertRow(asA, followUp(parent))).resolves.toMatchObject({ rowCount: 1 });
      await expect(insertRow(asA, followUp(parent, { key: "summary" }))).resolves.toMatchObject({
        rowCount: 1,
      });
    });
  });

  it("a target the deployment does not declare for it is refused", async () => {
    await inFence("undeclared", async (parent) => {
      await expect(insertRow(asA, followUp(parent, { target: C }))).rejects.toMatchObject(RLS_REFUSED);
    });
    // Nor itself: award-points declares only notify-user.
    await inFence("to-self", async (parent) => {
      await expect(insertRow(asA, followUp(parent, { target: A }))).rejects.toMatchObject(RLS_REFUSED);
    });
  });

  it("a job id deriveJobId does not give for its sender, parent and key is refused", async () => {
    for (const jobId of [
      "forged-job-id",
      `${B}:forged`,
      (parent: string) => deriveJobId(B, B, parent, 0), // another sender's namespace
      (parent: string) => deriveJobId(B, A, `${parent}x`, 0), // another parent
      (parent: string) => deriveJobId(B, A, parent, 1), // another key than the one stored
      (parent: string) => deriveJobId(C, A, parent, 0), // another target
    ]) {
      await inFence("not-derived", async (parent) => {
        const id = typeof jobId === "function" ? jobId(parent) : jobId;
        const row = followUp(parent, { job_id: id });
        await expect(insertRow(asA, row)).rejects.toMatchObject(RLS_REFUSED);
      });
    }
  });

  it("a body naming another job than the row, or not JSON, is refused", async () => {
    await inFence("body", async (parent) => {
      const row = followUp(parent);
      for (const body of [
        JSON.stringify({ job_id: "someone-elses", tenant_id: "t_42", payload: {} }),
        // JSON.parse keeps the last of two equal keys, and so would the target.
        `{"job_id":${JSON.stringify(row.job_id)},"tenant_id":"t_42","payload":{},"job_id":"someone-elses"}`,
        "not json",
      ]) {
        await asA.query("SAVEPOINT s");
        await expect(insertRow(asA, { ...row, body })).rejects.toMatchObject(RLS_REFUSED);
        await asA.query("ROLLBACK TO SAVEPOINT s");
      }
    });
  });

  it("a key that is not a key's JSON is refused", async () => {
    await inFence("key", async (parent) => {
      // The hashed text would be [target, sender, parent, 0, 1]: not one key.
      const row = followUp(parent, { follow_up_key: "0,1" });
      const hashed = `${B}:${Buffer.from(
        await import("node:crypto").then((m) =>
          m
            .createHash("sha256")
            .update(`["${B}","${A}",${JSON.stringify(parent)},0,1]`)
            .digest(),
        ),
      ).toString("base64url")}`;
      await expect(insertRow(asA, { ...row, job_id: hashed })).rejects.toMatchObject({
        code: expect.stringMatching(/^(42501|23514)$/),
      });
    });
  });

  it("a forged parent is refused: one without a fence, or whose fence another transaction wrote", async () => {
    await inFence("no-parent", async () => {
      await expect(insertRow(asA, followUp("prov-never-fenced"))).rejects.toMatchObject(RLS_REFUSED);
    });
    // A parent A really applied, in an earlier transaction: a work may not add follow-ups to it later.
    const earlier = parentId("earlier");
    await commitFences(asA, await openFence(asA, earlier));
    await inFence("later", async () => {
      await expect(insertRow(asA, followUp(earlier))).rejects.toMatchObject(RLS_REFUSED);
    });
    // Nor outside any fence transaction.
    await expect(insertRow(asA, followUp(earlier))).rejects.toMatchObject(RLS_REFUSED);
  });

  it("a parent's fence cannot be withdrawn once a follow-up names it", async () => {
    // The harness's core.withdraw_own_fences removes fences this transaction wrote (batch mode's
    // unreached records); a work or a login calling it after writing a follow-up would leave the
    // follow-up without a parent, under a job id it could then fill with any number of bodies.
    for (const how of [
      "SELECT core.withdraw_own_fences($1, ARRAY[$2])",
      "DO $$BEGIN PERFORM core.withdraw_own_fences('award-points', ARRAY['${parent}']); END$$",
    ]) {
      const parent = parentId("withdrawn");
      await openFence(asA, parent);
      try {
        await insertRow(asA, followUp(parent));
        const sql = how.replace("${parent}", parent);
        await expect(asA.query(sql, sql.includes("$1") ? [A, parent] : []), how).rejects.toMatchObject({
          code: "23000",
        });
      } finally {
        await asA.query("ROLLBACK").catch(() => {});
      }
      expect(await rowExists({ target: B, job_id: deriveJobId(B, A, parent, 0) }), how).toBeUndefined();
    }
  });

  it("a row in another consumer's name is refused", async () => {
    await inFence("as-b", async (parent) => {
      const row = followUp(parent, { consumer: B, job_id: deriveJobId(B, B, parent, 0) });
      await expect(insertRow(asA, row)).rejects.toMatchObject(RLS_REFUSED);
    });
  });

  it("it cannot declare a target itself, nor write a dead letter's provenance", async () => {
    await expect(asA.query("SELECT core.register_follow_up_targets($1, $2)", [A, [C]])).rejects.toMatchObject(
      RLS_REFUSED,
    );
    await expect(
      asA.query("INSERT INTO core.follow_up_targets (sender, target) VALUES ($1, $2)", [A, C]),
    ).rejects.toMatchObject(RLS_REFUSED);
    for (const column of ["sender", "parent_job_id", "follow_up_key"]) {
      await expect(
        asB.query(
          `INSERT INTO core.dead_letters (job_id, consumer, queue, tenant_id, correlation_id, attempts, error_kind,
                                          last_error, body_form, body, ${column})
           VALUES ('prov-dl', $1, $2, 't_42', 'c', 1, 'undelivered', '{"class":"X","message":"y"}', 'text', '{}', $3)`,
          [B, notifyQueue, column === "follow_up_key" ? "0" : A],
        ),
      ).rejects.toMatchObject(RLS_REFUSED);
    }
  });
});

describe("a consumer's work cannot lose another job's committed follow-up", () => {
  it("DELETE and UPDATE on the outbox are refused, inside its fence transaction and outside", async () => {
    const other = await committedRow("kept-1");
    await inFence("delete", async () => {
      await expect(asA.query("DELETE FROM core.outbox")).rejects.toMatchObject(RLS_REFUSED);
    });
    await inFence("update", async () => {
      await expect(
        asA.query("UPDATE core.outbox SET next_attempt_at = now() + interval '1 year'"),
      ).rejects.toMatchObject(RLS_REFUSED);
    });
    await expect(asA.query("DELETE FROM core.outbox")).rejects.toMatchObject(RLS_REFUSED);
    expect(await rowExists(other)).toBeDefined();
  });

  it("the relay's functions, called by the work in its fence transaction, remove and change nothing", async () => {
    const other = await committedRow("kept-2");
    await bed.db.withClient((c) =>
      c.query("UPDATE core.outbox SET next_attempt_at = now() - interval '1 minute'"),
    );
    const before = await rowExists(other);
    await inFence("sent", async () => {
      const { rows } = await asA.query<{ n: number }>("SELECT core.outbox_sent($1, $2, $3) AS n", [
        A,
        [other.target],
        [other.job_id],
      ]);
      expect(rows[0]?.n).toBe(0);
    });
    await inFence("retry", async () => {
      const { rows } = await asA.query<{ ok: boolean }>(
        'SELECT core.outbox_retry($1, $2, $3, 86400, \'{"class":"X","message":"y"}\') AS ok',
        [A, other.target, other.job_id],
      );
      expect(rows[0]?.ok).toBe(false);
    });
    await inFence("claim", async () => {
      await expect(asA.query("SELECT * FROM core.outbox_claim($1, 100)", [A])).rejects.toMatchObject(
        RLS_REFUSED,
      );
    });
    await inFence("undelivered", async () => {
      const { rows } = await asA.query(
        'SELECT * FROM core.outbox_undelivered($1, $2, $3, $4, NULL, \'{"class":"X","message":"y"}\')',
        [A, other.target, other.job_id, notifyQueue],
      );
      expect(rows).toEqual([]);
    });
    expect(await rowExists(other)).toEqual(before);
    expect(await pendingDeadLettersOf(other.job_id)).toBe(0);
  });
});

describe("nor reach another consumer's outbox rows through the relay's functions", () => {
  it("B's rows cannot be claimed, deleted, rescheduled or moved by A's login", async () => {
    const bs = await committedRow("of-b", B);
    await bed.db.withClient((c) =>
      c.query("UPDATE core.outbox SET next_attempt_at = now() - interval '1 minute'"),
    );
    const before = await rowExists(bs);
    expect((await asA.query("SELECT * FROM core.outbox WHERE consumer = $1", [B])).rows).toEqual([]);
    // At the start of a transaction, as the relay after COMMIT and the scheduled relay call them.
    expect(
      (
        await asA.query<{ n: number }>("SELECT core.outbox_sent($1, $2, $3) AS n", [
          B,
          [bs.target],
          [bs.job_id],
        ])
      ).rows[0]?.n,
    ).toBe(0);
    await asA.query("BEGIN");
    try {
      expect((await asA.query("SELECT * FROM core.outbox_claim($1, 100)", [B])).rows).toEqual([]);
      // A's own claim, then B's keys: nothing of B's is claimed by this transaction.
      await asA.query("SELECT * FROM core.outbox_claim($1, 100)", [A]);
      expect(
        (
          await asA.query<{ n: number }>("SELECT core.outbox_sent($1, $2, $3) AS n", [
            B,
            [bs.target],
            [bs.job_id],
          ])
        ).rows[0]?.n,
      ).toBe(0);
      expect(
        (
          await asA.query<{ ok: boolean }>(
            'SELECT core.outbox_retry($1, $2, $3, 60, \'{"class":"X","message":"y"}\') AS ok',
            [B, bs.target, bs.job_id],
          )
        ).rows[0]?.ok,
      ).toBe(false);
      expect(
        (
          await asA.query(
            'SELECT * FROM core.outbox_undelivered($1, $2, $3, $4, NULL, \'{"class":"X","message":"y"}\')',
            [B, bs.target, bs.job_id, notifyQueue],
          )
        ).rows,
      ).toEqual([]);
    } finally {
      await asA.query("ROLLBACK");
    }
    expect(await rowExists(bs)).toEqual(before);
    expect(await pendingDeadLettersOf(bs.job_id)).toBe(0);
  });
});

describe("a replay of an undelivered dead letter whose provenance fails is refused", () => {
  /** A pending undelivered dead letter of notify-user, written by the migrator with the given provenance. */
  async function undelivered(
    jobId: string,
    provenance: { sender?: string; parent?: string; key?: string } = {},
    body?: string,
  ): Promise<string> {
    const columns = Object.keys(provenance).length > 0 ? ", sender, parent_job_id, follow_up_key" : "";
    const values = Object.keys(provenance).length > 0 ? ", $5, $6, $7" : "";
    return bed.db.withClient(async (c) => {
      const { rows } = await c.query<{ id: string }>(
        `INSERT INTO core.dead_letters (job_id, consumer, queue, tenant_id, correlation_id, attempts, error_kind,
                                        last_error, body_form, body, message_attributes${columns})
         VALUES ($1, $2, $3, 't_42', 'c', 1, 'undelivered', '{"class":"X","message":"y"}', 'text', $4,
                 '{"parent":{"consumer":"award-points","job_id":"p"}}'${values})
         RETURNING id`,
        [
          jobId,
          B,
          notifyQueue,
          body ??
            JSON.stringify({
              job_id: jobId,
              tenant_id: "t_42",
              correlation_id: "c",
              payload: { user_id: "u-1", kind: "points-awarded", points: 1 },
            }),
          ...(Object.keys(provenance).length > 0
            ? [provenance.sender ?? null, provenance.parent ?? null, provenance.key ?? null]
            : []),
        ],
      );
      return rows[0]?.id as string;
    });
  }

  const statusOf = (id: string) =>
    bed.db.withClient(
      async (c) =>
        (await c.query<{ status: string }>("SELECT status FROM core.dead_letters WHERE id = $1", [id]))
          .rows[0]?.status,
    );

  it("one that names no sender (a consumer's own, or one recorded before its sender could be) is refused with the reason", async () => {
    const forged = await bed.db.withClient(async (c) => {
      // B writes an undelivered dead letter of its own, naming A as the parent's consumer.
      await c.query("BEGIN");
      await c.query(`SET LOCAL ROLE ${consumerRoleName(B)}`);
      const jobId = deriveJobId(B, A, "p", 0);
      const { rows } = await c.query<{ id: string }>(
        `INSERT INTO core.dead_letters (job_id, consumer, queue, tenant_id, correlation_id, attempts, error_kind,
                                        last_error, body_form, body, message_attributes)
         VALUES ($1, $2, $3, 't_42', 'c', 1, 'undelivered', '{"class":"X","message":"y"}', 'text', $4,
                 '{"parent":{"consumer":"award-points","job_id":"p"}}')
         RETURNING id`,
        [jobId, B, notifyQueue, JSON.stringify({ job_id: jobId, tenant_id: "t_42", payload: {} })],
      );
      await c.query("COMMIT");
      return rows[0]?.id as string;
    });
    const response = await bed.call("POST", `${BASE}/${forged}/replay`, { token: bed.tokens.replay });
    expect(response.status).toBe(409);
    expect(response.body).toMatchObject({
      type: "urn:jobfence:problem:conflict",
      reason: "unproven-follow-up",
      current_status: "pending_review",
      provenance: expect.stringMatching(/names no sender/),
    });
    expect(await statusOf(forged)).toBe("pending_review");
    expect(await queueDepth(bed.sqs, notifyQueue)).toBe(0);
  });

  it("one whose sender does not declare its consumer, whose job id is not derived, or whose body is another job's is refused", async () => {
    const undeclared = await undelivered(deriveJobId(B, C, "p", 0), { sender: C, parent: "p", key: "0" });
    const notDerived = await undelivered("prov-not-derived", { sender: A, parent: "p", key: "0" });
    const otherBody = await undelivered(
      deriveJobId(B, A, "p2", 0),
      { sender: A, parent: "p2", key: "0" },
      JSON.stringify({ job_id: "someone-elses", tenant_id: "t_42", payload: {} }),
    );
    const reasons: Record<string, RegExp> = {
      [undeclared]: /does not declare notify-user as a follow-up target of record-payment/,
      [notDerived]: /job id is not deriveJobId/,
      [otherBody]: /another job id/,
    };
    for (const [id, why] of Object.entries(reasons)) {
      const response = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay });
      expect(response.status).toBe(409);
      expect(response.body).toMatchObject({
        reason: "unproven-follow-up",
        provenance: expect.stringMatching(why),
      });
      expect(await statusOf(id)).toBe("pending_review");
    }
    expect(await queueDepth(bed.sqs, notifyQueue)).toBe(0);

    // A bulk replay skips each with the reason, and sends nothing.
    const done = await runBulkToEnd(
      { pool: bed.opsPool, sqs: bed.sqs },
      { kind: "replay", filter: { consumer: B, error_kind: "undelivered" } },
    );
    expect(
      (done.skipped as { dead_letter_id: string; reason: string }[])
        .filter((s) => s.dead_letter_id in reasons)
        .map((s) => s.reason),
    ).toEqual(["unproven-follow-up", "unproven-follow-up", "unproven-follow-up"]);
    for (const id of Object.keys(reasons)) expect(await statusOf(id)).toBe("pending_review");
    expect(await queueDepth(bed.sqs, notifyQueue)).toBe(0);
  });

  it("one whose provenance holds is replayed", async () => {
    const jobId = deriveJobId(B, A, "p-proven", "summary");
    const id = await undelivered(jobId, { sender: A, parent: "p-proven", key: canonicalJson("summary") });
    const response = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay });
    expect(response.status).toBe(200);
    expect(await statusOf(id)).toBe("replayed");
    expect(await queueDepth(bed.sqs, notifyQueue)).toBe(1);
  });
});

describe("rows written before the migration", () => {
  it("keep the provenance that can be established, and no other: an unproven pending undelivered dead letter names no sender", async () => {
    const db = await createTestDatabase({ empty: true });
    try {
      const shipped = coreMigrationSet().migrations;
      const before = shipped.filter((m) => m.version < 19);
      await runMigrations({ connectionString: db.url, sets: [{ name: "core", migrations: before }] });
      const legit = deriveJobId(B, A, "old-parent", 0);
      const named = deriveJobId(B, A, "old-parent", "summary"); // a key the migration cannot guess
      const forged = "forged-before-0019";
      await db.withClient(async (c) => {
        for (const consumer of [A, B]) await c.query("SELECT core.ensure_consumer_role($1)", [consumer]);
        for (const jobId of [legit, named, forged]) {
          const body = JSON.stringify({ job_id: jobId, tenant_id: "t_42", correlation_id: "c", payload: {} });
          await c.query(
            `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint)
             VALUES ($1, 'old-parent', $2, $3, 't_42', 'c', $4, $5)`,
            [A, B, jobId, body, FINGERPRINT],
          );
          await c.query(
            `INSERT INTO core.dead_letters (job_id, consumer, queue, tenant_id, correlation_id, attempts, error_kind,
                                            last_error, body_form, body, message_attributes)
             VALUES ($1, $2, 'http://127.0.0.1:1/000000000000/notify-user', 't_42', 'c', 1, 'undelivered',
                     '{"class":"X","message":"y"}', 'text', $3, '{"parent":{"consumer":"award-points","job_id":"old-parent"}}')`,
            [jobId, B, body],
          );
        }
      });
      await runMigrations({ connectionString: db.url, sets: [{ name: "core", migrations: shipped }] });
      await db.withClient(async (c) => {
        const outbox = await c.query<{ job_id: string; follow_up_key: string | null }>(
          "SELECT job_id, follow_up_key FROM core.outbox",
        );
        expect(Object.fromEntries(outbox.rows.map((r) => [r.job_id, r.follow_up_key]))).toEqual({
          [legit]: "0",
          [named]: null,
          [forged]: null,
        });
        await c.query("SELECT core.register_follow_up_targets($1, $2)", [A, [B]]);
        const dead = await c.query<{ job_id: string; sender: string | null; fault: string | null }>(
          `SELECT job_id, sender, core.dead_letter_provenance_fault(error_kind, consumer, job_id, body_form, body, sender,
                                                                    parent_job_id, follow_up_key) AS fault
             FROM core.dead_letters`,
        );
        expect(Object.fromEntries(dead.rows.map((r) => [r.job_id, [r.sender, r.fault === null]]))).toEqual({
          [legit]: [A, true],
          [named]: [null, false],
          [forged]: [null, false],
        });
      });
    } finally {
      await db.drop();
    }
  });
});
