/**
 * No copy of a job outlives its fence unnoticed (docs/design.md §7.2, migration 0021). A fence is
 * cleaned TTL after its job was applied; a copy of the job that waited longer (in the backstop, in
 * an outbox) and is found without its fence may have been applied already. Such a copy is never
 * delivered or replayed silently: the drain and the scheduled relay record it `outlived`, and a
 * replay refuses it unless the operator forces it with a reason, recorded in the row's audit.
 *
 * Clocks are moved by hand: SQS's SentTimestamp is written into the records, and the fences and
 * outbox rows are back-dated as the superuser; the TTL cleanup that deletes the fences is the real
 * core.delete_expired_fences.
 */
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import type { SQSRecord } from "aws-lambda";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { notifyUserConsumer } from "../../functions/notify-user/consumer.ts";
import { localEventBridgeClient, localSqsClient } from "../../local/aws-clients.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { createBackstopDrain, firstSentAt } from "../../shared/backstop/drain.ts";
import { createPool } from "../../shared/db/pool.ts";
import {
  consumerRoleName,
  provisionLogin,
  registerFenceTtl,
} from "../../shared/db/queries/provision-login.ts";
import { replayDeadLetter } from "../../shared/dead-letters/replay.ts";
import { ReplayOutlivedError } from "../../shared/errors/dead-letter.ts";
import { runFenceCleanup } from "../../shared/fence/cleanup.ts";
import { OUTBOX_MAX_WAIT_SECONDS, TTL_DEFAULTS, TTL_MARGIN_SECONDS } from "../../shared/fence/ttl.ts";
import { deriveJobId } from "../../shared/index.ts";
import { sweepOutbox } from "../../shared/outbox/sweep.ts";
import { type ApiTestBed, apiTestBed } from "../support/api-harness.ts";
import { runBulkToEnd } from "../support/bulk.ts";
import { award, invoke, OPS_BUS, sqsRecord } from "../support/consumer-harness.ts";
import { receiveAll } from "../support/sqs.ts";

const BASE = "/v1/core/dead-letters";
const DAY_MS = 86_400_000;
let bed: ApiTestBed;
let cleanupPool: pg.Pool;
let sourceUrl: string;
const pools: pg.Pool[] = [];

beforeAll(async () => {
  bed = await apiTestBed();
  cleanupPool = createPool({ connectionString: bed.db.url, role: "jobfence_cleanup", max: 1 });
  sourceUrl = (await bed.queue("award-points-outlived")).url;
  // As the migrate function registers it: the TTL the consumers' harness writes (the default here).
  await bed.db.withClient(async (c) => {
    await registerFenceTtl(c, "award-points", TTL_DEFAULTS.fenceTtlSeconds);
    await registerFenceTtl(c, "notify-user", TTL_DEFAULTS.fenceTtlSeconds);
  });
});
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end()));
  await cleanupPool?.end();
  await bed?.close();
});

function consumerPool(consumer: string): pg.Pool {
  const pool = createPool({ connectionString: bed.db.url, role: consumerRoleName(consumer), max: 2 });
  pools.push(pool);
  return pool;
}

/** The job's fence, made `age` old and expired, then the real TTL cleanup run. */
async function fenceCleanedAfter(jobId: string, ageDays: number): Promise<void> {
  await bed.db.withClient((c) =>
    c.query(
      `UPDATE core.processed_jobs SET processed_at = now() - make_interval(days => $2), expires_at = now() - interval '1 minute'
        WHERE job_id = $1`,
      [jobId, ageDays],
    ),
  );
  await runFenceCleanup({ db: cleanupPool, budgetMs: 10_000, pauseMs: 0 });
  expect(await fencesOf(jobId)).toBe(0);
}

const fencesOf = (jobId: string) =>
  bed.db.withClient(
    async (c) =>
      (
        await c.query<{ n: number }>("SELECT count(*)::int AS n FROM core.processed_jobs WHERE job_id = $1", [
          jobId,
        ])
      ).rows[0]?.n,
  );

const deadLettersOf = (jobId: string) =>
  bed.db.withClient(async (c) => {
    const { rows } = await c.query<{
      id: string;
      error_kind: string;
      status: string;
      resolved_by: string | null;
      discard_reason: string | null;
      message_attributes: Record<string, unknown>;
    }>(
      `SELECT id, error_kind, status, resolved_by, discard_reason, message_attributes
         FROM core.dead_letters WHERE job_id = $1 ORDER BY created_at`,
      [jobId],
    );
    return rows;
  });

const ledgerOf = (jobId: string) =>
  bed.db.withClient(
    async (c) =>
      (
        await c.query<{ n: number }>("SELECT count(*)::int AS n FROM award_points.ledger WHERE job_id = $1", [
          jobId,
        ])
      ).rows[0]?.n,
  );

/** A record as SQS hands it over, first sent `ageMs` ago. */
function sentAgo(body: string, ageMs: number): SQSRecord {
  const record = sqsRecord(body);
  return { ...record, attributes: { ...record.attributes, SentTimestamp: String(Date.now() - ageMs) } };
}

/** Award-points' backstop drain, for a source queue at `sourceQueueUrl`, run on `records`. */
async function drain(records: SQSRecord[], sourceQueueUrl = sourceUrl) {
  const handler = createBackstopDrain(
    {
      consumer: "award-points",
      sourceQueueUrl,
      sourceMaxReceiveCount: 19,
      sourceRetentionSeconds: TTL_DEFAULTS.queueRetentionSeconds,
      databaseUrl: bed.db.url,
      opsBusName: OPS_BUS,
    },
    {
      pool: consumerPool("award-points"),
      eventBridge: localEventBridgeClient(bed.sink.endpoint),
      logger: new Logger({ serviceName: "award-points-backstop", logLevel: "SILENT" }),
      definition: awardPointsConsumer,
    },
  );
  const response = await handler({ Records: records }, lambdaContext("award-points-backstop"));
  expect(response.batchItemFailures).toEqual([]);
}

describe("the backstop drain", () => {
  it("a job applied before a long outage, its duplicate drained after its fence was cleaned: outlived, and no replay applies it twice", async () => {
    const jobId = "outlived-drain-1";
    const body = JSON.stringify(award(jobId, 10, "u-outlived"));
    // Applied 22 days ago, just before the database went down; a duplicate delivery of the same
    // message could not be recorded and was redriven to the backstop (SentTimestamp: the first send).
    const consumer = bed.consumer(awardPointsConsumer, { queueUrl: sourceUrl });
    expect(await invoke(consumer, [sentAgo(body, 22 * DAY_MS)])).toEqual([]);
    await fenceCleanedAfter(jobId, 22);

    await drain([sentAgo(body, 22 * DAY_MS)]);
    const [row] = await deadLettersOf(jobId);
    expect(row).toMatchObject({ error_kind: "outlived", status: "pending_review" });
    expect(row?.message_attributes.outlived).toMatchObject({
      recorded_as: "unrecorded",
      fence_ttl_seconds: TTL_DEFAULTS.fenceTtlSeconds,
    });

    // A replay is refused, by the function and by the API (problem+json saying why); nothing is sent.
    await expect(
      replayDeadLetter({ pool: bed.opsPool, sqs: bed.sqs }, row?.id as string, "alice"),
    ).rejects.toBeInstanceOf(ReplayOutlivedError);
    const refused = await bed.call("POST", `${BASE}/${row?.id}/replay`, { token: bed.tokens.replay });
    expect(refused.status).toBe(409);
    expect(refused.contentType).toContain("application/problem+json");
    expect(refused.body).toMatchObject({
      reason: "outlived",
      current_status: "pending_review",
      job_id: jobId,
    });
    expect(refused.body.detail).toMatch(/may have been applied already and its fence cleaned/);
    expect(refused.body.copy_sent_at).toEqual(expect.any(String));
    // A bulk replay skips it and says why.
    const bulk = await runBulkToEnd(
      { pool: bed.opsPool, sqs: bed.sqs },
      { kind: "replay", filter: { job_id: jobId } },
    );
    expect(bulk).toMatchObject({ replayed: 0, force_outlived: false });
    expect(bulk.skipped).toEqual([expect.objectContaining({ dead_letter_id: row?.id, reason: "outlived" })]);
    expect((await receiveAll(bed.sqs, sourceUrl)).filter((m) => m.Body?.includes(jobId))).toEqual([]);
    expect((await deadLettersOf(jobId)).map((r) => r.status)).toEqual(["pending_review"]);
    expect(await ledgerOf(jobId)).toBe(1);
  });

  it("a copy younger than the fence's lifetime without a fence was never applied: unrecorded, replayed as usual", async () => {
    const jobId = "outlived-drain-young";
    await drain([sentAgo(JSON.stringify(award(jobId, 2, "u-young")), 5 * DAY_MS)]);
    const [row] = await deadLettersOf(jobId);
    expect(row?.error_kind).toBe("unrecorded");
    const replayed = await bed.call("POST", `${BASE}/${row?.id}/replay`, { token: bed.tokens.replay });
    expect(replayed.status).toBe(200);
    expect(replayed.body).toMatchObject({ status: "replayed" });
    await receiveAll(bed.sqs, sourceUrl);
  });

  it("an old copy whose fence still exists is held as today: unrecorded, and its replay supersedes it", async () => {
    const jobId = "outlived-drain-held";
    const body = JSON.stringify(award(jobId, 3, "u-held"));
    expect(
      await invoke(bed.consumer(awardPointsConsumer, { queueUrl: sourceUrl }), [sqsRecord(body)]),
    ).toEqual([]);
    await drain([sentAgo(body, 25 * DAY_MS)]);
    const [row] = await deadLettersOf(jobId);
    expect(row?.error_kind).toBe("unrecorded");
    // The pending row holds the fence against the cleanup, even past its TTL.
    await bed.db.withClient((c) =>
      c.query(
        `UPDATE core.processed_jobs SET processed_at = now() - interval '25 days', expires_at = now() - interval '1 minute'
          WHERE job_id = $1`,
        [jobId],
      ),
    );
    await runFenceCleanup({ db: cleanupPool, budgetMs: 10_000, pauseMs: 0 });
    expect(await fencesOf(jobId)).toBe(1);
    const replayed = await bed.call("POST", `${BASE}/${row?.id}/replay`, { token: bed.tokens.replay });
    expect(replayed.body).toMatchObject({ status: "superseded" });
    expect(await ledgerOf(jobId)).toBe(1);
  });

  it("FIFO: the backstop restarts a message's clock, so the drain counts the source's retention before it", async () => {
    const jobId = "outlived-drain-fifo";
    const fifoSource = (await bed.queue("award-points-outlived.fifo", { FifoQueue: "true" })).url;
    // Moved to the backstop 18 days ago after up to 4 days in the source: possibly first sent 22 days ago.
    const record = sentAgo(JSON.stringify(award(jobId, 4, "u-fifo")), 18 * DAY_MS);
    expect(
      firstSentAt(record, { sourceQueueUrl: fifoSource, sourceRetentionSeconds: 4 * 86_400 })?.getTime(),
    ).toBe(Number(record.attributes.SentTimestamp) - 4 * DAY_MS);
    expect(
      firstSentAt(record, { sourceQueueUrl: sourceUrl, sourceRetentionSeconds: 4 * 86_400 })?.getTime(),
    ).toBe(Number(record.attributes.SentTimestamp));
    await drain([record], fifoSource);
    expect((await deadLettersOf(jobId)).map((r) => r.error_kind)).toEqual(["outlived"]);
    // On a standard queue the same SentTimestamp is the first send: 18 days is within the lifetime.
    const standard = "outlived-drain-standard-18";
    await drain([sentAgo(JSON.stringify(award(standard, 4, "u-fifo")), 18 * DAY_MS)]);
    expect((await deadLettersOf(standard)).map((r) => r.error_kind)).toEqual(["unrecorded"]);
  });
});

describe("forcing the replay of an outlived dead letter", () => {
  it("needs a reason, and records it with the operator in the row's audit", async () => {
    const jobId = "outlived-forced";
    await drain([sentAgo(JSON.stringify(award(jobId, 6, "u-forced")), 30 * DAY_MS)]);
    const [row] = await deadLettersOf(jobId);
    expect(row?.error_kind).toBe("outlived");
    const id = row?.id as string;

    const noReason = await bed.call("POST", `${BASE}/${id}/replay`, {
      token: bed.tokens.replay,
      body: { force_outlived: true },
    });
    expect(noReason.status).toBe(400);
    const reasonAlone = await bed.call("POST", `${BASE}/${id}/replay`, {
      token: bed.tokens.replay,
      body: { reason: "checked" },
    });
    expect(reasonAlone.status).toBe(400);
    expect((await deadLettersOf(jobId)).map((r) => r.status)).toEqual(["pending_review"]);

    const reason = "ledger checked: job outlived-forced never credited (ticket OPS-17)";
    const forced = await bed.call("POST", `${BASE}/${id}/replay`, {
      token: bed.tokens.replay,
      body: { force_outlived: true, reason },
    });
    expect(forced.status).toBe(200);
    expect(forced.body).toMatchObject({ status: "replayed" });
    const [after] = await deadLettersOf(jobId);
    expect(after).toMatchObject({ status: "replayed", discard_reason: reason });
    expect(after?.resolved_by).toEqual(expect.any(String));
    const shown = await bed.call("GET", `${BASE}/${id}`, { token: bed.tokens.read });
    expect(shown.body).toMatchObject({ status: "replayed", discard_reason: reason });
    expect((await receiveAll(bed.sqs, sourceUrl)).filter((m) => m.Body?.includes(jobId))).toHaveLength(1);
  });

  it("the database refuses an outlived row replayed without a reason, whatever path writes it", async () => {
    const jobId = "outlived-no-reason";
    await drain([sentAgo(JSON.stringify(award(jobId, 6, "u-raw")), 30 * DAY_MS)]);
    const [row] = await deadLettersOf(jobId);
    await expect(
      bed.opsPool.query(
        "UPDATE core.dead_letters SET status = 'replayed', resolved_at = now(), resolved_by = 'mallory' WHERE id = $1",
        [row?.id],
      ),
    ).rejects.toMatchObject({ code: "23514", constraint: "dead_letters_discard_reason_required" });
  });

  it("a bulk replay with force_outlived and a reason sends them and records the reason on each", async () => {
    const since = await bed.db.withClient(
      async (c) => (await c.query<{ now: Date }>("SELECT now()")).rows[0]?.now.toISOString() as string,
    );
    const jobs = ["outlived-bulk-1", "outlived-bulk-2"];
    await drain(jobs.map((j) => sentAgo(JSON.stringify(award(j, 1, "u-bulk")), 30 * DAY_MS)));
    const young = "outlived-bulk-young";
    await drain([sentAgo(JSON.stringify(award(young, 1, "u-bulk")), DAY_MS)]);
    const filter = { created_after: since };
    const plan = await bed.call("POST", `${BASE}/replay/plan`, {
      token: bed.tokens.replay,
      body: { filter },
    });
    expect(plan.body).toMatchObject({ matched: 3, outlived: 2, would_send: 1 });

    const reason = "incident 42: the ledger shows neither job";
    const done = await runBulkToEnd(
      { pool: bed.opsPool, sqs: bed.sqs },
      { kind: "replay", filter: { job_id: jobs[0] as string }, forceOutlived: { reason } },
      "bob",
    );
    expect(done).toMatchObject({ replayed: 1, force_outlived: true, reason, skipped: [] });
    expect(await deadLettersOf(jobs[0] as string)).toEqual([
      expect.objectContaining({ status: "replayed", resolved_by: "bob", discard_reason: reason }),
    ]);
    // Without the override the same kind of row is skipped, and a young one replayed without a reason.
    const plain = await runBulkToEnd({ pool: bed.opsPool, sqs: bed.sqs }, { kind: "replay", filter });
    expect(plain).toMatchObject({ replayed: 1 });
    expect(plain.skipped.map((s) => s.reason)).toEqual(["outlived"]);
    expect(await deadLettersOf(young)).toEqual([
      expect.objectContaining({ status: "replayed", discard_reason: null }),
    ]);
    await receiveAll(bed.sqs, sourceUrl);
  });
});

describe("the scheduled outbox relay", () => {
  const notificationId = (parent: string) => deriveJobId("notify-user", "award-points", parent, 0);

  /** One run of award-points' scheduled relay, every row due. */
  async function sweep() {
    await bed.db.withClient((c) => c.query("UPDATE core.outbox SET next_attempt_at = now()"));
    return sweepOutbox({
      pool: consumerPool("award-points"),
      sqs: bed.sqs,
      eventBridge: localEventBridgeClient(bed.sink.endpoint),
      opsBusName: OPS_BUS,
      consumer: "award-points",
      queues: bed.followUpQueues,
      metrics: new Metrics({ namespace: "jobfence", serviceName: "award-points-outbox" }),
      logger: new Logger({ serviceName: "award-points-outbox", logLevel: "SILENT" }),
    });
  }

  /** Awards `parent` with the relay after COMMIT unable to send: its follow-up stays in the outbox. */
  async function awardLeavingFollowUp(parent: string): Promise<string> {
    const down = localSqsClient(bed.emulator.endpoint);
    down.middlewareStack.add(
      () => async () => {
        throw Object.assign(new Error("injected: SQS unreachable"), {
          name: "NetworkingError",
          $metadata: {},
        });
      },
      { step: "initialize", name: "unreachable" },
    );
    const handler = bed.consumer(awardPointsConsumer, { sqs: down });
    expect(await invoke(handler, [sqsRecord(JSON.stringify(award(parent, 5, "u-ob")))])).toEqual([]);
    down.destroy();
    const { rows } = await bed.db.withClient((c) =>
      c.query<{ body: string }>("SELECT body FROM core.outbox WHERE parent_job_id = $1", [parent]),
    );
    expect(rows).toHaveLength(1);
    return rows[0]?.body as string;
  }

  const notificationsOf = (jobId: string) =>
    bed.db.withClient(
      async (c) =>
        (
          await c.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM notify_user.notifications WHERE job_id = $1",
            [jobId],
          )
        ).rows[0]?.n,
    );

  it("a follow-up sent but whose DELETE was lost, left past the target's fence: never sent again, outlived, not replayed", async () => {
    const parent = "outlived-outbox-1";
    const followUp = notificationId(parent);
    const body = await awardLeavingFollowUp(parent);
    // The send got through and notify-user applied it; the DELETE was lost, the row stays.
    const notify = bed.consumer(notifyUserConsumer);
    expect(await invoke(notify, [sqsRecord(body)])).toEqual([]);
    expect(await notificationsOf(followUp)).toBe(1);
    // The scheduled relay was down (or not configured for notify-user) for 22 days.
    await bed.db.withClient((c) =>
      c.query(
        `UPDATE core.outbox SET created_at = now() - interval '22 days', send_by = now() - interval '21 days'
          WHERE parent_job_id = $1`,
        [parent],
      ),
    );
    await fenceCleanedAfter(followUp, 22);
    const before = (await bed.followUps("notify-user")).length;

    const report = await sweep();
    expect(report).toMatchObject({ sent: 0 });
    const arrived = (await bed.followUps("notify-user")).slice(before);
    // Whatever was sent reaches notify-user: it must not apply the notification a second time.
    for (const m of arrived) await invoke(notify, [sqsRecord(JSON.stringify(m.envelope))]);
    expect(arrived).toEqual([]);
    expect(await notificationsOf(followUp)).toBe(1);

    const [row] = await deadLettersOf(followUp);
    expect(row).toMatchObject({ error_kind: "outlived", status: "pending_review" });
    expect(row?.message_attributes.outlived).toMatchObject({ recorded_as: "undelivered" });
    const refused = await bed.call("POST", `${BASE}/${row?.id}/replay`, { token: bed.tokens.replay });
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ reason: "outlived" });
    expect(await bed.db.withClient(async (c) => (await c.query("SELECT 1 FROM core.outbox")).rowCount)).toBe(
      0,
    );
  });

  it("a row past its deadline whose target never applied it is not sent either: undelivered, replayable", async () => {
    const parent = "outlived-outbox-young";
    const followUp = notificationId(parent);
    await awardLeavingFollowUp(parent);
    await bed.db.withClient((c) =>
      c.query(
        `UPDATE core.outbox SET created_at = now() - interval '2 days', send_by = now() - interval '1 day'
          WHERE parent_job_id = $1`,
        [parent],
      ),
    );
    const before = (await bed.followUps("notify-user")).length;
    expect(await sweep()).toMatchObject({ sent: 0 });
    expect((await bed.followUps("notify-user")).slice(before)).toEqual([]);
    const [row] = await deadLettersOf(followUp);
    expect(row).toMatchObject({ error_kind: "undelivered", status: "pending_review" });
    const replayed = await bed.call("POST", `${BASE}/${row?.id}/replay`, { token: bed.tokens.replay });
    expect(replayed.body).toMatchObject({ status: "replayed" });
  });

  it("a row within its deadline is sent as before", async () => {
    const parent = "outlived-outbox-due";
    await awardLeavingFollowUp(parent);
    const before = (await bed.followUps("notify-user")).length;
    expect(await sweep()).toMatchObject({ sent: 1 });
    expect((await bed.followUps("notify-user")).slice(before).map((f) => f.envelope.job_id)).toEqual([
      notificationId(parent),
    ]);
  });
});

describe("across consumers (the trigger runs with its owner's rights; the registry is the migrator's)", () => {
  /** A real login of `consumer`'s, made by core.provision_login as the migrate function makes it. */
  async function loginOf(consumer: string): Promise<pg.Client> {
    const username = `jft_outlived_${consumer.replace(/-/g, "_")}_${Date.now().toString(36)}`;
    await bed.db.withClient((c) => provisionLogin(c, { consumer, username, password: "pw-outlived" }));
    const url = new URL(bed.db.url);
    url.username = username;
    url.password = "pw-outlived";
    const client = new pg.Client({ connectionString: url.toString() });
    await client.connect();
    return client;
  }

  const insertUnrecorded = (client: pg.Client, consumer: string, jobId: string, sentMs: number) =>
    client.query<{ error_kind: string }>(
      `INSERT INTO core.dead_letters (job_id, consumer, queue, tenant_id, attempts, error_kind, last_error,
                                      correlation_id, body_form, body, message_attributes)
       VALUES ($1, $2, $3, 't_42', 19, 'unrecorded', '{"class":"UnrecordedMessageError","message":"x"}', $1,
               'text', $4, $5::jsonb)
       RETURNING error_kind`,
      [
        jobId,
        consumer,
        sourceUrl,
        JSON.stringify(award(jobId, 1, "u-x")),
        JSON.stringify({ sent_timestamp: String(sentMs) }),
      ],
    );

  it("consumer A cannot file a row under B, and B's fence of the same job id does not shield A's old copy", async () => {
    const jobId = "outlived-cross-1";
    // notify-user (B) applied a job under this id; award-points (A) never did.
    await bed.db.withClient((c) =>
      c.query(
        `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, processed_at, expires_at)
         SELECT $1, id, 't_42', now(), now() + interval '21 days' FROM core.consumer_roles WHERE consumer = 'notify-user'`,
        [jobId],
      ),
    );
    const a = await loginOf("award-points");
    try {
      // A row naming B: refused by row-level security after the trigger, nothing written, no lock kept.
      await expect(insertUnrecorded(a, "notify-user", jobId, Date.now() - 30 * DAY_MS)).rejects.toThrow(
        /row-level security/,
      );
      // A's own old copy: B's fence is not A's, so A's job has none: outlived.
      const { rows } = await insertUnrecorded(a, "award-points", jobId, Date.now() - 30 * DAY_MS);
      expect(rows).toEqual([{ error_kind: "outlived" }]);
      // A young copy of another of A's jobs stays unrecorded.
      const young = await insertUnrecorded(a, "award-points", "outlived-cross-young", Date.now());
      expect(young.rows).toEqual([{ error_kind: "unrecorded" }]);
    } finally {
      await a.end();
    }
    // The cleanup can still delete B's fence when it expires: A left no lock on it.
    const b = await bed.db.withClient(async (c) =>
      c.query("SELECT 1 FROM core.processed_jobs WHERE job_id = $1 FOR UPDATE NOWAIT", [jobId]),
    );
    expect(b.rowCount).toBe(1);
  });

  it("no consumer may register a TTL (its own or another's) or write the registry's column", async () => {
    const a = await loginOf("award-points");
    try {
      for (const consumer of ["award-points", "notify-user"]) {
        await expect(
          a.query("SELECT core.register_fence_ttl($1, 99999999)", [consumer]),
        ).rejects.toMatchObject({
          code: "42501",
        });
        await expect(
          a.query("UPDATE core.consumer_roles SET fence_ttl_seconds = 99999999 WHERE consumer = $1", [
            consumer,
          ]),
        ).rejects.toMatchObject({ code: "42501" });
      }
      // Nor write an outbox row's deadline: the column is the database's default.
      await expect(
        a.query(
          `INSERT INTO core.outbox (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body,
                                    job_fingerprint, send_by)
           VALUES ('award-points', 'p', 'notify-user', 'outlived-deadline', 't', 'c', '{}',
                   '\\x00112233445566778899aabbccddeeff', now() + interval '1 year')`,
        ),
      ).rejects.toMatchObject({ code: "42501" });
    } finally {
      await a.end();
    }
    const { rows } = await bed.db.withClient((c) =>
      c.query(
        "SELECT consumer, fence_ttl_seconds FROM core.consumer_roles WHERE consumer IN ('award-points', 'notify-user') ORDER BY 1",
      ),
    );
    expect(rows).toEqual([
      { consumer: "award-points", fence_ttl_seconds: TTL_DEFAULTS.fenceTtlSeconds },
      { consumer: "notify-user", fence_ttl_seconds: TTL_DEFAULTS.fenceTtlSeconds },
    ]);
  });

  it("the database's constants are the library's: the outbox deadline, the margin and the default TTL", async () => {
    // The default is `now() + '1 day'::interval`: its interval, as text.
    const { rows: expr } = await bed.db.withClient((c) =>
      c.query<{ expr: string }>(
        `SELECT pg_get_expr(d.adbin, d.adrelid) AS expr FROM pg_attrdef d
           JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
          WHERE d.adrelid = 'core.outbox'::regclass AND a.attname = 'send_by'`,
      ),
    );
    expect(expr[0]?.expr).toBe(`(now() + '${OUTBOX_MAX_WAIT_SECONDS / 86_400} day'::interval)`);
    const { rows: fn } = await bed.db.withClient((c) =>
      c.query<{ src: string }>(
        "SELECT prosrc AS src FROM pg_proc WHERE proname = 'dead_letters_outlived_copy'",
      ),
    );
    expect(fn[0]?.src).toContain(`coalesce(ttl, ${TTL_DEFAULTS.fenceTtlSeconds / 86_400} * 86400)`);
    expect(fn[0]?.src).toContain(`greatest(ttl - ${TTL_MARGIN_SECONDS}, 0)`);
  });
});
