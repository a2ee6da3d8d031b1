/**
 * The dead-letter API end to end: a real HTTP server in front of the Lambda handler, PostgreSQL
 * reached as the least-privileged jobfence_ops role, the fauxqs SQS emulator, and the reference
 * consumer for what a replay does downstream. Acceptance tests are named by criterion (AC5 replay
 * without a second effect, AC7 discard needs a reason); the rest covers authorization of every
 * route, malformed input, keyset paging, concurrent decisions, bulk replay and stats.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { type Message, SendMessageCommand } from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer, type awardPointsPayload } from "../../functions/award-points/consumer.ts";
import { deliver, pollOnce, type QueueSource, toSqsRecord } from "../../local/event-source.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { createLocalIssuer, LOCAL_AUDIENCE, LOCAL_ISSUER } from "../../local/tokens.ts";
import type { ConsumerDefinition, HostedConsumer } from "../../shared/consumer.ts";
import { lockDeadLetter } from "../../shared/db/queries/replay-queries.ts";
import { runBulkOperations } from "../../shared/dead-letters/bulk-worker.ts";
import { decodeCursor, encodeCursor } from "../../shared/dead-letters/cursor.ts";
import { replayMessage } from "../../shared/dead-letters/replay-message.ts";
import { sealKey } from "../../shared/dead-letters/seal.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import { PERMISSION, type Permission } from "../../shared/http/auth.ts";
import {
  type ApiCall,
  BASE,
  type CraftedSigner,
  craftedSigner,
  deadLetterStates,
  expectProblem,
  resolveDirectly,
  type SeedRow,
  seedDeadLetters,
  serveApiTrusting,
} from "../support/api-fixtures.ts";
import { type ApiResponse, type ApiTestBed, apiTestBed, TEST_SEAL_KEY } from "../support/api-harness.ts";
import { runBulkToEnd } from "../support/bulk.ts";
import { award, effectsOf } from "../support/consumer-harness.ts";
import { expectRefused, SQLSTATE } from "../support/expect-pg.ts";
import { insertFence } from "../support/fixtures.ts";
import { messagesIn, receiveAll, sendMessage } from "../support/sqs.ts";

let bed: ApiTestBed;
/** The same API behind a verifier that trusts only {@link crafted}'s key. */
let twin: { call: ApiCall; close(): Promise<void> };
let crafted: CraftedSigner;

beforeAll(async () => {
  bed = await apiTestBed();
  crafted = await craftedSigner();
  twin = await serveApiTrusting(bed, { jwks: crafted.jwks, issuer: LOCAL_ISSUER, audience: LOCAL_AUDIENCE });
});
afterAll(async () => {
  await twin?.close();
  await bed?.close();
});

const ALL_PERMISSIONS = Object.values(PERMISSION);
const REPLAYER = "local-replayer";

type AwardDefinition = ConsumerDefinition<typeof awardPointsPayload>;

/** award-points whose work refuses each job permanently on its first delivery, then applies it. */
function refusingFirstDelivery(): AwardDefinition {
  const seen = new Set<string>();
  return {
    ...awardPointsConsumer,
    work: async (job, tx) => {
      if (!seen.has(job.jobId)) {
        seen.add(job.jobId);
        throw new PermanentJobError(`first delivery of ${job.jobId} refused`);
      }
      await awardPointsConsumer.work(job, tx);
    },
  };
}

async function queueSource(name: string, attributes: Record<string, string> = {}): Promise<QueueSource> {
  const queue = await bed.queue(name, attributes);
  return { sqs: bed.sqs, queueUrl: queue.url, queueArn: queue.arn };
}

/** Polls until the queue is empty, as Lambda's event source mapping would; returns the deliveries. */
async function drain(source: QueueSource, handler: HostedConsumer): Promise<number> {
  let delivered = 0;
  for (let round = 0; round < 50; round++) {
    const { received } = await pollOnce(source, handler, lambdaContext(handler.consumer));
    if (received.length === 0) return delivered;
    delivered += received.length;
  }
  throw new Error("the queue did not drain");
}

/** The one pending dead letter of a job, found through the API. */
async function pendingDeadLetterOf(jobId: string): Promise<string> {
  const list = await bed.call("GET", `${BASE}?status=pending_review&job_id=${encodeURIComponent(jobId)}`, {
    token: bed.tokens.read,
  });
  expect(list.status).toBe(200);
  expect(list.body.items).toHaveLength(1);
  return list.body.items[0].id;
}

/** The rows of a query run as the migrator. */
async function sql<T extends Record<string, unknown>>(text: string, params: unknown[] = []): Promise<T[]> {
  return bed.db.withClient(async (c) => (await c.query<T>(text, params)).rows);
}

/** The one pending dead letter seeded from `row`. */
async function seedOne(row: SeedRow): Promise<string> {
  const [id] = await seedDeadLetters(bed.db, [row]);
  if (id === undefined) throw new Error("no dead letter was seeded");
  return id;
}

/** The decision columns of one dead letter, as the migrator sees them. */
async function decisionOf(
  id: string,
): Promise<{ status: string; resolved_by: string | null; discard_reason: string | null }> {
  const rows = await sql<{ status: string; resolved_by: string | null; discard_reason: string | null }>(
    "SELECT status, resolved_by, discard_reason FROM core.dead_letters WHERE id = $1",
    [id],
  );
  expect(rows).toHaveLength(1);
  return rows[0] as (typeof rows)[number];
}

/** What a crash between SendMessage and COMMIT leaves: the message sent, the row still pending. */
async function replaySentButNeverCommitted(id: string): Promise<void> {
  const tx = await bed.opsPool.connect();
  try {
    await tx.query("BEGIN");
    const row = await lockDeadLetter(tx, id);
    if (!row) throw new Error(`no dead letter ${id}`);
    await bed.sqs.send(new SendMessageCommand({ QueueUrl: row.queue, ...replayMessage(row) }));
    // The process dies here, before the status update and the COMMIT.
  } finally {
    await tx.query("ROLLBACK");
    tx.release();
  }
}

/** Asserts that `work` leaves every dead letter's decision columns (and the row count) as they were. */
async function expectNoDecisionChange(work: () => Promise<void>): Promise<void> {
  const before = await deadLetterStates(bed.db);
  await work();
  expect(await deadLetterStates(bed.db)).toEqual(before);
}

function bodyOf(message: Message | undefined): Record<string, unknown> {
  expect(message?.Body).toEqual(expect.any(String));
  return JSON.parse(message?.Body ?? "null");
}

describe("AC5 replay produces no second effect", () => {
  it("AC5 replay sends the stored envelope unchanged (same job_id and correlation_id), and the consumer applies it once", async () => {
    const source = await queueSource("ac5-replay");
    const consumer = bed.consumer(refusingFirstDelivery(), { queueUrl: source.queueUrl });
    const envelope = { ...award("ac5-replay-1", 12, "u-ac5"), correlation_id: "corr-ac5-from-producer" };
    await sendMessage(bed.sqs, source.queueUrl, envelope, {
      attributes: { trace_id: { DataType: "String", StringValue: "trace-ac5" } },
    });
    expect(await drain(source, consumer)).toBe(1);
    expect(await effectsOf(bed.db, "ac5-replay-1")).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
    const id = await pendingDeadLetterOf("ac5-replay-1");
    const stored = await bed.call("GET", `${BASE}/${id}`, { token: bed.tokens.read });
    expect(stored.body.payload).toEqual(envelope);

    const replay = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay });
    expect(replay.status).toBe(200);
    expect(replay.body).toEqual({ id, status: "replayed", message_id: expect.any(String) });

    const messages = await receiveAll(bed.sqs, source.queueUrl);
    expect(messages).toHaveLength(1);
    const [message] = messages;
    expect(message?.MessageId).toBe(replay.body.message_id);
    expect(bodyOf(message)).toEqual(stored.body.payload);
    expect(bodyOf(message)).toMatchObject({
      job_id: "ac5-replay-1",
      correlation_id: "corr-ac5-from-producer",
    });
    expect(message?.MessageAttributes?.trace_id).toMatchObject({
      DataType: "String",
      StringValue: "trace-ac5",
    });
    expect(await decisionOf(id)).toEqual({ status: "replayed", resolved_by: REPLAYER, discard_reason: null });

    // The consumer receives the replay and applies it, once.
    const records = messages.map((m) => toSqsRecord(m, source.queueArn));
    const delivery = await deliver(source, records, consumer, lambdaContext("award-points"));
    expect(delivery.failedIds).toEqual([]);
    expect(await effectsOf(bed.db, "ac5-replay-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 1 });
    expect(messagesIn(bed.emulator, "ac5-replay")).toBe(0);

    // A second replay of the same dead letter is a conflict and sends nothing.
    const again = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay });
    expectProblem(again, 409);
    expect(again.body.current_status).toBe("replayed");
    expect(messagesIn(bed.emulator, "ac5-replay")).toBe(0);
  });

  it("AC5 a poison dead letter replays the body exactly as it was received", async () => {
    const source = await queueSource("ac5-poison");
    const consumer = bed.consumer(awardPointsConsumer, { queueUrl: source.queueUrl });
    const bodies = [
      "not json {",
      "[1, 2, 3]",
      '{"job_id":"ac5-poison-nul","tenant_id":"t_42","payload":{"note":"a\\u0000b"}}',
    ];
    for (const body of bodies) {
      await sendMessage(bed.sqs, source.queueUrl, body);
    }
    expect(await drain(source, consumer)).toBe(bodies.length);
    const rows = await sql<{ id: string }>(
      "SELECT id FROM core.dead_letters WHERE queue = $1 AND error_kind = 'poison' AND status = 'pending_review'",
      [source.queueUrl],
    );
    expect(rows).toHaveLength(bodies.length);
    for (const { id } of rows) {
      const replay = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay });
      expect(replay.body).toMatchObject({ id, status: "replayed" });
    }
    const messages = await receiveAll(bed.sqs, source.queueUrl);
    expect(messages.map((m) => m.Body).sort()).toEqual([...bodies].sort());
  });

  it("replaying a body no consumer can read says what will happen: a note on the replay, a count and a note on the plan", async () => {
    const source = await queueSource("replay-unreadable");
    const consumer = bed.consumer(awardPointsConsumer, { queueUrl: source.queueUrl });
    const bodies = {
      notJson: "not json {",
      // JSON, but no envelope: tenant_id is missing.
      notEnvelope: '{"job_id":"replay-unreadable-envelope","payload":{"user_id":"u-1","points":1}}',
      // A valid envelope whose payload the consumer refuses: a change to the consumer can fix that.
      badPayload: JSON.stringify(award("replay-unreadable-payload", -5)),
    };
    for (const body of Object.values(bodies)) await sendMessage(bed.sqs, source.queueUrl, body);
    expect(await drain(source, consumer)).toBe(3);
    const rows = await sql<{ id: string; body: string }>(
      "SELECT id, body FROM core.dead_letters WHERE queue = $1 AND error_kind = 'poison' AND status = 'pending_review'",
      [source.queueUrl],
    );
    expect(rows).toHaveLength(3);
    const idOf = (body: string) => rows.find((r) => r.body === body)?.id as string;

    // The plan counts the two bodies without a readable job among those it would send.
    const filter = { queue: source.queueUrl };
    const plan = await bed.call("POST", `${BASE}/replay/plan`, {
      token: bed.tokens.replay,
      body: { filter },
    });
    expect(plan.status).toBe(200);
    expect(plan.body).toMatchObject({ matched: 3, would_send: 3, unreadable: 2 });
    expect(plan.body.note).toMatch(/^2 of the 3 dead letters this replay would send have no readable job/);
    expect(plan.body.note).toContain("refuse them as poison again");
    // A plan with nothing unreadable carries no note.
    const readable = await bed.call("POST", `${BASE}/replay/plan`, {
      token: bed.tokens.replay,
      body: { filter: { ...filter, job_id: "replay-unreadable-payload" } },
    });
    expect(readable.body).toMatchObject({ matched: 1, would_send: 1, unreadable: 0 });
    expect(readable.body).not.toHaveProperty("note");

    const notJson = await bed.call("POST", `${BASE}/${idOf(bodies.notJson)}/replay`, {
      token: bed.tokens.replay,
    });
    expect(notJson.status).toBe(200);
    expect(notJson.body).toEqual({
      id: idOf(bodies.notJson),
      status: "replayed",
      message_id: expect.any(String),
      note: expect.stringMatching(/^The body is not JSON, and a replay sends it unchanged: /),
    });
    expect(notJson.body.note).toContain("refuse it as poison again");
    const notEnvelope = await bed.call("POST", `${BASE}/${idOf(bodies.notEnvelope)}/replay`, {
      token: bed.tokens.replay,
    });
    expect(notEnvelope.body.note).toMatch(/^The body is not a valid job envelope /);
    const badPayload = await bed.call("POST", `${BASE}/${idOf(bodies.badPayload)}/replay`, {
      token: bed.tokens.replay,
    });
    expect(badPayload.body).toEqual({
      id: idOf(bodies.badPayload),
      status: "replayed",
      message_id: expect.any(String),
    });

    // What the note said: the same bytes come back, and the consumer records them as poison again.
    expect(await drain(source, consumer)).toBe(3);
    const after = await sql<{ body: string; status: string; error_kind: string }>(
      "SELECT body, status, error_kind FROM core.dead_letters WHERE queue = $1 ORDER BY created_at, id",
      [source.queueUrl],
    );
    expect(after.filter((r) => r.status === "replayed").map((r) => r.body)).toHaveLength(3);
    expect(after.filter((r) => r.status === "pending_review").map((r) => [r.body, r.error_kind])).toEqual(
      expect.arrayContaining([
        [bodies.notJson, "poison"],
        [bodies.notEnvelope, "poison"],
        [bodies.badPayload, "poison"],
      ]),
    );
  });

  it("AC5 replaying a dead letter whose job's fence exists resolves it superseded and sends nothing", async () => {
    const source = await queueSource("ac5-superseded");
    const consumer = bed.consumer(refusingFirstDelivery(), { queueUrl: source.queueUrl });
    const envelope = award("ac5-superseded-1", 9, "u-ac5-sup");
    await sendMessage(bed.sqs, source.queueUrl, envelope);
    await drain(source, consumer);
    const id = await pendingDeadLetterOf("ac5-superseded-1");
    // The producer sends the job again and this time it succeeds: the fence now exists.
    await sendMessage(bed.sqs, source.queueUrl, envelope);
    await drain(source, consumer);
    expect(await effectsOf(bed.db, "ac5-superseded-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 1 });

    const replay = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay });
    expect(replay.status).toBe(200);
    expect(replay.body).toEqual({ id, status: "superseded", message_id: null });
    expect(messagesIn(bed.emulator, "ac5-superseded")).toBe(0);
    expect(await decisionOf(id)).toEqual({
      status: "superseded",
      resolved_by: REPLAYER,
      discard_reason: null,
    });
    expect(await effectsOf(bed.db, "ac5-superseded-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 1 });
  });

  it("AC5 replaying a dead letter whose job id was applied as another job: 409 job-conflict, nothing sent, still pending", async () => {
    const source = await queueSource("ac5-job-conflict");
    const consumer = bed.consumer(refusingFirstDelivery(), { queueUrl: source.queueUrl });
    const first = award("ac5-conflict-1", 9, "u-ac5-conflict");
    await sendMessage(bed.sqs, source.queueUrl, first);
    await drain(source, consumer);
    const id = await pendingDeadLetterOf("ac5-conflict-1");
    // The same job id comes again carrying another job, and applies: the fence is that job's.
    await sendMessage(bed.sqs, source.queueUrl, award("ac5-conflict-1", 500, "u-ac5-conflict"));
    await drain(source, consumer);
    expect(await effectsOf(bed.db, "ac5-conflict-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 1 });

    const whole = await bed.call("GET", `${BASE}/${id}`, { token: bed.tokens.read });
    expect(whole.body).toMatchObject({ body_form: "text", body: JSON.stringify(first), payload: first });
    expect(whole.body.job_fingerprint).toMatch(/^[0-9a-f]{32}$/);
    const replay = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay });
    expectProblem(replay, 409);
    expect(replay.body).toMatchObject({ current_status: "pending_review", reason: "job-conflict" });
    expect(messagesIn(bed.emulator, "ac5-job-conflict")).toBe(0);
    expect(await decisionOf(id)).toEqual({
      status: "pending_review",
      resolved_by: null,
      discard_reason: null,
    });

    // A bulk replay over it: counted as a conflict by the plan, left pending by the operation and
    // listed among the rows it skipped.
    const filter = { job_id: "ac5-conflict-1" };
    const plan = await bed.call("POST", `${BASE}/replay/plan`, {
      token: bed.tokens.replay,
      body: { filter },
    });
    expect(plan.body).toMatchObject({ matched: 1, would_send: 0, conflicts: 1 });
    const started = await bed.call("POST", `${BASE}/replay`, {
      token: bed.tokens.replay,
      body: { filter, token: plan.body.token },
    });
    expect(started.status).toBe(202);
    await runBulkOperations({ pool: bed.opsPool, sqs: bed.sqs }, { budgetMs: 2_000 });
    const done = await bed.call("GET", `${BASE}/operations/${started.body.id}`, { token: bed.tokens.read });
    expect(done.body).toMatchObject({ status: "completed", processed: 1, conflicts: 1, replayed: 0 });
    expect(done.body.skipped).toEqual([
      { dead_letter_id: id, reason: "conflict", detail: expect.any(String), at: expect.any(String) },
    ]);
    expect(messagesIn(bed.emulator, "ac5-job-conflict")).toBe(0);
    expect((await decisionOf(id)).status).toBe("pending_review");
  });

  it("AC5 a replay repeated after a crash between send and commit yields exactly one effect", async () => {
    const source = await queueSource("ac5-crash");
    const consumer = bed.consumer(refusingFirstDelivery(), { queueUrl: source.queueUrl });
    await sendMessage(bed.sqs, source.queueUrl, award("ac5-crash-1", 4, "u-ac5-crash"));
    await drain(source, consumer);
    const id = await pendingDeadLetterOf("ac5-crash-1");

    await replaySentButNeverCommitted(id);
    expect((await decisionOf(id)).status).toBe("pending_review");
    expect(messagesIn(bed.emulator, "ac5-crash")).toBe(1);

    const replay = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay });
    expect(replay.status).toBe(200);
    expect(replay.body.status).toBe("replayed");
    expect(messagesIn(bed.emulator, "ac5-crash")).toBe(2);

    expect(await drain(source, consumer)).toBe(2);
    expect(await effectsOf(bed.db, "ac5-crash-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 1 });
    expect(messagesIn(bed.emulator, "ac5-crash")).toBe(0);
  });

  it("AC5 a FIFO replay keeps the message group and the message attributes", async () => {
    const source = await queueSource("ac5-orders.fifo", {
      FifoQueue: "true",
      ContentBasedDeduplication: "true",
    });
    const consumer = bed.consumer(refusingFirstDelivery(), { queueUrl: source.queueUrl });
    const envelope = award("ac5-fifo-1", 3, "u-ac5-fifo");
    const signature = Buffer.from([0, 1, 2, 250, 255]);
    await sendMessage(bed.sqs, source.queueUrl, envelope, {
      groupId: "user-u-ac5-fifo",
      attributes: {
        trace_id: { DataType: "String", StringValue: "trace-fifo" },
        priority: { DataType: "Number", StringValue: "5" },
        signature: { DataType: "Binary", BinaryValue: signature },
      },
    });
    await drain(source, consumer);
    const id = await pendingDeadLetterOf("ac5-fifo-1");
    const stored = await bed.call("GET", `${BASE}/${id}`, { token: bed.tokens.read });
    expect(stored.body.message_attributes).toMatchObject({ message_group_id: "user-u-ac5-fifo" });

    const replay = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay });
    expect(replay.status).toBe(200);
    const messages = await receiveAll(bed.sqs, source.queueUrl);
    expect(messages).toHaveLength(1);
    const [message] = messages;
    expect(bodyOf(message)).toEqual(envelope);
    expect(message?.Attributes?.MessageGroupId).toBe("user-u-ac5-fifo");
    const attributes = message?.MessageAttributes ?? {};
    expect(attributes.trace_id).toMatchObject({ DataType: "String", StringValue: "trace-fifo" });
    expect(attributes.priority).toMatchObject({ DataType: "Number", StringValue: "5" });
    expect(attributes.signature?.DataType).toBe("Binary");
    expect(Buffer.from(attributes.signature?.BinaryValue ?? new Uint8Array())).toEqual(signature);

    const delivery = await deliver(
      source,
      messages.map((m) => toSqsRecord(m, source.queueArn)),
      consumer,
      lambdaContext("award-points"),
    );
    expect(delivery.failedIds).toEqual([]);
    expect(await effectsOf(bed.db, "ac5-fifo-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 1 });
  });

  // Each replay attempt has a deduplication id of its own (a retry after a lost answer must be
  // delivered: the first copy may have failed again and merged into the still-pending row), so the
  // repeat is a second message, and the fence absorbs it.
  it("AC5 on a FIFO queue a replay repeated after a crash sends again, and the fence absorbs the second copy", async () => {
    const source = await queueSource("ac5-crash.fifo", {
      FifoQueue: "true",
      ContentBasedDeduplication: "false",
    });
    const consumer = bed.consumer(refusingFirstDelivery(), { queueUrl: source.queueUrl });
    await sendMessage(bed.sqs, source.queueUrl, award("ac5-fifo-crash-1", 2, "u-ac5-fc"), {
      groupId: "g-crash",
      dedupId: "original-send",
    });
    await drain(source, consumer);
    const id = await pendingDeadLetterOf("ac5-fifo-crash-1");

    await replaySentButNeverCommitted(id);
    const replay = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay });
    expect(replay.status).toBe(200);
    expect(messagesIn(bed.emulator, "ac5-crash.fifo")).toBe(2);
    await drain(source, consumer);
    expect(await effectsOf(bed.db, "ac5-fifo-crash-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 1 });
  });
});

describe("AC7 discarding without a reason is rejected", () => {
  it("AC7 a missing, empty, blank, non-string or over-long reason is refused 400 and the dead letter stays pending_review", async () => {
    const id = await seedOne({ consumer: "ac7", job_id: "ac7-refused" });
    const bodies: Array<{ label: string; body?: unknown; rawBody?: string }> = [
      { label: "no body" },
      { label: "a blank body", rawBody: "  \n" },
      { label: "an empty JSON object", body: {} },
      { label: "an empty reason", body: { reason: "" } },
      { label: "a whitespace-only reason", body: { reason: " \t\n\u00a0 " } },
      { label: "a null reason", body: { reason: null } },
      { label: "a numeric reason", body: { reason: 42 } },
      { label: "a boolean reason", body: { reason: true } },
      { label: "an array reason", body: { reason: ["duplicate"] } },
      { label: "an object reason", body: { reason: { text: "duplicate" } } },
      { label: "a reason over 2000 characters", body: { reason: "r".repeat(2001) } },
      { label: "a reason with U+0000", body: { reason: "dup\u0000licate" } },
      { label: "a misspelt key", body: { reasons: "duplicate" } },
    ];
    await expectNoDecisionChange(async () => {
      for (const { label, body, rawBody } of bodies) {
        const response = await bed.call("POST", `${BASE}/${id}/discard`, {
          token: bed.tokens.discard,
          ...(body !== undefined ? { body } : {}),
          ...(rawBody !== undefined ? { rawBody } : {}),
        });
        expectProblem(response, 400);
        expect(response.body.errors, label).toEqual(
          expect.arrayContaining([expect.objectContaining({ location: "body" })]),
        );
      }
    });
    const row = await bed.call("GET", `${BASE}/${id}`, { token: bed.tokens.read });
    expect(row.body).toMatchObject({ status: "pending_review", discard_reason: null, resolved_by: null });
  });

  it("AC7 a reason of up to 2000 characters is recorded (trimmed) with the actor", async () => {
    const id = await seedOne({ consumer: "ac7", job_id: "ac7-accepted" });
    const reason = `${"r".repeat(1999)}.`;
    const response = await bed.call("POST", `${BASE}/${id}/discard`, {
      token: bed.tokens.discard,
      body: { reason: `  ${reason}\n` },
    });
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ id, status: "discarded", reason });
    expect(await decisionOf(id)).toEqual({
      status: "discarded",
      resolved_by: "local-discarder",
      discard_reason: reason,
    });
  });

  it("AC7 the database itself refuses a discard without a reason, even from the ops role", async () => {
    const id = await seedOne({ consumer: "ac7", job_id: "ac7-sql" });
    const { rows } = await bed.opsPool.query<{ user: string }>('SELECT current_user AS "user"');
    expect(rows[0]?.user).toBe("jobfence_ops");
    const discard = (reason: string | null) =>
      bed.opsPool.query(
        `UPDATE core.dead_letters SET status = 'discarded', discard_reason = $2, resolved_at = now(),
                resolved_by = 'ops@example' WHERE id = $1`,
        [id, reason],
      );
    for (const reason of [null, "", "   ", "\t\n", "r".repeat(2001)]) {
      await expectRefused(discard(reason), SQLSTATE.checkViolation, "dead_letters_discard_reason_required");
    }
    expect(await decisionOf(id)).toEqual({
      status: "pending_review",
      resolved_by: null,
      discard_reason: null,
    });
  });
});

/** A route, how to call it on a target dead letter, and what a success does. */
interface RouteCase {
  readonly name: string;
  readonly permission: Permission;
  /** The status of a success. @default 200 */
  readonly status?: 200 | 202;
  /** The status a success leaves the target in, for routes that decide. */
  readonly decides?: "replayed" | "discarded";
  request(target: { id: string; jobId: string }): { method: string; path: string; body?: unknown };
  /** Asserts the body of a success. */
  expectSuccess(body: ApiResponse["body"], target: { id: string; jobId: string }): void;
}

const ROUTE_CASES: RouteCase[] = [
  {
    name: "GET /v1/core/dead-letters",
    permission: PERMISSION.read,
    request: ({ jobId }) => ({ method: "GET", path: `${BASE}?job_id=${encodeURIComponent(jobId)}` }),
    expectSuccess: (body, { id }) => expect(body.items.map((i: { id: string }) => i.id)).toEqual([id]),
  },
  {
    name: "GET /v1/core/dead-letters/{id}",
    permission: PERMISSION.read,
    request: ({ id }) => ({ method: "GET", path: `${BASE}/${id}` }),
    expectSuccess: (body, { id, jobId }) =>
      expect(body).toMatchObject({
        id,
        job_id: jobId,
        status: "pending_review",
        payload: expect.any(Object),
      }),
  },
  {
    name: "GET /v1/core/dead-letters/stats",
    permission: PERMISSION.read,
    request: () => ({ method: "GET", path: `${BASE}/stats` }),
    expectSuccess: (body) =>
      expect(body.counts).toEqual(expect.arrayContaining([expect.objectContaining({ consumer: "auth" })])),
  },
  {
    name: "POST /v1/core/dead-letters/{id}/replay",
    permission: PERMISSION.replay,
    decides: "replayed",
    request: ({ id }) => ({ method: "POST", path: `${BASE}/${id}/replay` }),
    expectSuccess: (body, { id }) =>
      expect(body).toEqual({ id, status: "replayed", message_id: expect.any(String) }),
  },
  {
    name: "POST /v1/core/dead-letters/replay/plan",
    permission: PERMISSION.replay,
    request: ({ jobId }) => ({
      method: "POST",
      path: `${BASE}/replay/plan`,
      body: { filter: { job_id: jobId } },
    }),
    expectSuccess: (body) =>
      expect(body).toMatchObject({ kind: "replay", matched: 1, would_send: 1, token: expect.any(String) }),
  },
  {
    name: "POST /v1/core/dead-letters/replay",
    permission: PERMISSION.replay,
    status: 202,
    request: ({ jobId }) => ({ method: "POST", path: `${BASE}/replay`, body: { filter: { job_id: jobId } } }),
    expectSuccess: (body) => expect(body).toMatchObject({ kind: "replay", status: "running", planned: 1 }),
  },
  {
    name: "POST /v1/core/dead-letters/discard/plan",
    permission: PERMISSION.discard,
    request: ({ jobId }) => ({
      method: "POST",
      path: `${BASE}/discard/plan`,
      body: { filter: { job_id: jobId } },
    }),
    expectSuccess: (body) =>
      expect(body).toMatchObject({ kind: "discard", matched: 1, token: expect.any(String) }),
  },
  {
    name: "POST /v1/core/dead-letters/discard",
    permission: PERMISSION.discard,
    status: 202,
    request: ({ jobId }) => ({
      method: "POST",
      path: `${BASE}/discard`,
      body: { filter: { job_id: jobId }, reason: "auth matrix" },
    }),
    expectSuccess: (body) =>
      expect(body).toMatchObject({ kind: "discard", status: "running", planned: 1, reason: "auth matrix" }),
  },
  {
    name: "GET /v1/core/dead-letters/groups",
    permission: PERMISSION.read,
    request: () => ({ method: "GET", path: `${BASE}/groups?consumer=auth` }),
    expectSuccess: (body) =>
      expect(body.items).toEqual(expect.arrayContaining([expect.objectContaining({ consumer: "auth" })])),
  },
  {
    name: "GET /v1/core/dead-letters/operations",
    permission: PERMISSION.read,
    request: () => ({ method: "GET", path: `${BASE}/operations?limit=1` }),
    expectSuccess: (body) => expect(Array.isArray(body.items)).toBe(true),
  },
  {
    name: "POST /v1/core/dead-letters/{id}/discard",
    permission: PERMISSION.discard,
    decides: "discarded",
    request: ({ id }) => ({ method: "POST", path: `${BASE}/${id}/discard`, body: { reason: "auth matrix" } }),
    expectSuccess: (body, { id }) => expect(body).toEqual({ id, status: "discarded", reason: "auth matrix" }),
  },
];

describe.each(ROUTE_CASES)("authorization of $name", (route) => {
  let authQueueUrl: string;
  beforeAll(async () => {
    authQueueUrl = (await bed.queue("auth")).url;
    // A pending row no target filter matches: a target is then never every pending dead letter,
    // which a bulk operation could start only with its plan's token.
    await seedOne({ consumer: "auth-spare", job_id: `auth-spare-${randomUUID()}`, queue: authQueueUrl });
  });

  async function freshTarget(): Promise<{ id: string; jobId: string }> {
    const jobId = `auth-${randomUUID()}`;
    return { id: await seedOne({ consumer: "auth", job_id: jobId, queue: authQueueUrl }), jobId };
  }

  async function send(call: ApiCall, target: { id: string; jobId: string }, headers: Record<string, string>) {
    const { method, path, body } = route.request(target);
    return call(method, path, { headers, ...(body !== undefined ? { body } : {}) });
  }

  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
  const base64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");

  it("answers 401 with a Bearer challenge to a missing, malformed, expired, foreign or subject-less token, changing nothing", async () => {
    const target = await freshTarget();
    const valid = bed.tokens.admin;
    const [header = "", payload = "", signature = ""] = valid.split(".");
    const forged = base64url({ ...JSON.parse(Buffer.from(payload, "base64url").toString()), sub: "mallory" });
    const claims = {
      iss: LOCAL_ISSUER,
      aud: LOCAL_AUDIENCE,
      sub: "crafted-actor",
      scope: ALL_PERMISSIONS.join(" "),
    };
    const { sub: _sub, ...withoutSub } = claims;
    const now = Math.floor(Date.now() / 1000);
    const other = await createLocalIssuer();
    const cases: Array<{ label: string; call: ApiCall; headers: Record<string, string> }> = [
      { label: "no Authorization header", call: bed.call, headers: {} },
      { label: "Basic credentials", call: bed.call, headers: { authorization: "Basic dXNlcjpwYXNz" } },
      { label: "Bearer without a token", call: bed.call, headers: { authorization: "Bearer" } },
      { label: "Bearer with something not a JWT", call: bed.call, headers: bearer("not-a-jwt") },
      { label: "a token without the Bearer scheme", call: bed.call, headers: { authorization: valid } },
      { label: "another scheme", call: bed.call, headers: { authorization: `Token ${valid}` } },
      { label: "a forged payload", call: bed.call, headers: bearer(`${header}.${forged}.${signature}`) },
      { label: "a truncated signature", call: bed.call, headers: bearer(valid.slice(0, -4)) },
      {
        label: "an unsigned token (alg none)",
        call: bed.call,
        headers: bearer(`${base64url({ alg: "none", typ: "JWT" })}.${base64url(claims)}.`),
      },
      {
        label: "an expired token",
        call: bed.call,
        headers: bearer(await bed.issuer.sign("expired", ALL_PERMISSIONS, { ttlSeconds: -120 })),
      },
      {
        label: "a token signed by another issuer's key",
        call: bed.call,
        headers: bearer(await other.sign("intruder", ALL_PERMISSIONS)),
      },
      {
        label: "a blank subject",
        call: bed.call,
        headers: bearer(await bed.issuer.sign("  ", ALL_PERMISSIONS)),
      },
      {
        label: "the wrong audience",
        call: twin.call,
        headers: bearer(await crafted.sign({ ...claims, aud: "another-api" })),
      },
      {
        label: "the wrong issuer",
        call: twin.call,
        headers: bearer(await crafted.sign({ ...claims, iss: "https://elsewhere.example/issuer" })),
      },
      { label: "no subject", call: twin.call, headers: bearer(await crafted.sign(withoutSub)) },
      {
        label: "a subject over 255 characters",
        call: twin.call,
        headers: bearer(await crafted.sign({ ...claims, sub: "s".repeat(256) })),
      },
      {
        label: "a token not valid yet",
        call: twin.call,
        headers: bearer(await crafted.sign({ ...claims, nbf: now + 3600 })),
      },
    ];
    const depth = messagesIn(bed.emulator, "auth");
    await expectNoDecisionChange(async () => {
      for (const { label, call, headers } of cases) {
        const response = await send(call, target, headers);
        expect(response.status, label).toBe(401);
        expectProblem(response, 401);
      }
    });
    expect(messagesIn(bed.emulator, "auth")).toBe(depth);
  });

  it("answers 401 invalid_token naming the claim to a token without exp, iat or sub, expired, too old or issued ahead, changing nothing", async () => {
    const target = await freshTarget();
    const now = Math.floor(Date.now() / 1000);
    const claims = {
      iss: LOCAL_ISSUER,
      aud: LOCAL_AUDIENCE,
      sub: "crafted-actor",
      scope: ALL_PERMISSIONS.join(" "),
    };
    const cases: Array<{ label: string; claims: Record<string, unknown>; why: RegExp }> = [
      { label: "no exp", claims: { ...claims, exp: undefined }, why: /no exp claim/ },
      { label: "no iat", claims: { ...claims, iat: undefined }, why: /no iat claim/ },
      { label: "no sub", claims: { ...claims, sub: undefined }, why: /no sub claim/ },
      { label: "expired", claims: { ...claims, iat: now - 3600, exp: now - 120 }, why: /expired/ },
      {
        label: "issued over 12 hours ago, exp still ahead",
        claims: { ...claims, iat: now - 12 * 3600 - 120, exp: now + 3600 },
        why: /too old \(iat is more than 43200 seconds ago\)/,
      },
      { label: "issued ahead of our clock", claims: { ...claims, iat: now + 120 }, why: /iat is ahead/ },
    ];
    await expectNoDecisionChange(async () => {
      for (const { label, claims: c, why } of cases) {
        const token = await crafted.sign(c);
        const response = await send(twin.call, target, bearer(token));
        expectProblem(response, 401);
        expect(response.body.type, label).toBe("urn:jobfence:problem:unauthenticated");
        expect(response.body.detail, label).toMatch(why);
        expect(response.headers.get("www-authenticate"), label).toBe(
          `Bearer realm="jobfence", error="invalid_token", error_description="${response.body.detail}"`,
        );
        expect(JSON.stringify(response.body), label).not.toContain(token.split(".")[1]);
      }
    });
  });

  it("answers 403 to a valid token without the route's permission, changing nothing", async () => {
    const target = await freshTarget();
    const others = ALL_PERMISSIONS.filter((p) => p !== route.permission);
    const cases: Array<{ label: string; token: string }> = [
      { label: "no permission", token: bed.tokens.none },
      { label: "the other permissions", token: await bed.issuer.sign("others", others) },
      {
        label: "near misses in scope",
        token: await bed.issuer.sign("near-miss", [
          `${route.permission}.all`,
          route.permission.toUpperCase(),
          "core.dead_letters",
          "core.dead_letters.*",
          `${route.permission}\u200b`,
        ]),
      },
      {
        label: "the permission comma-joined into one scope word",
        token: await bed.issuer.sign("comma", [], {
          claims: { scope: `${others.join(",")},${route.permission}` },
        }),
      },
      {
        label: "permissions as a string, not an array",
        token: await bed.issuer.sign("perm-string", [], { claims: { permissions: route.permission } }),
      },
      {
        label: "the permission in claims the API does not read",
        token: await bed.issuer.sign("scp", [], {
          claims: { scp: [route.permission], roles: [route.permission] },
        }),
      },
    ];
    const depth = messagesIn(bed.emulator, "auth");
    await expectNoDecisionChange(async () => {
      for (const { label, token } of cases) {
        const response = await send(bed.call, target, bearer(token));
        expect(response.status, label).toBe(403);
        expectProblem(response, 403);
        expect(response.body.required_permission).toBe(route.permission);
        expect(response.headers.get("www-authenticate")).toBeNull();
      }
    });
    expect(messagesIn(bed.emulator, "auth")).toBe(depth);
  });

  async function expectAccepted(call: ApiCall, token: string, actor: string): Promise<void> {
    const target = await freshTarget();
    const before = await deadLetterStates(bed.db);
    const response = await send(call, target, bearer(token));
    expect(response.status, JSON.stringify(response.body)).toBe(route.status ?? 200);
    expect(response.contentType).toBe("application/json");
    route.expectSuccess(response.body, target);
    if (route.decides) {
      expect(await decisionOf(target.id)).toMatchObject({ status: route.decides, resolved_by: actor });
    } else {
      expect(await deadLetterStates(bed.db)).toEqual(before);
    }
  }

  it("accepts the permission from the scope claim and records the subject as the actor", async () => {
    await expectAccepted(bed.call, await bed.issuer.sign("scope-actor", [route.permission]), "scope-actor");
  });

  it("accepts the permission from a permissions array claim", async () => {
    const token = await bed.issuer.sign("array-actor", [], { claims: { permissions: [route.permission] } });
    await expectAccepted(bed.call, token, "array-actor");
    // The twin server's refusals above are about the claim under test: a good crafted token passes.
    const good = await crafted.sign({
      iss: LOCAL_ISSUER,
      aud: LOCAL_AUDIENCE,
      sub: "crafted-actor",
      permissions: [route.permission],
    });
    await expectAccepted(twin.call, good, "crafted-actor");
  });
});

describe("malformed requests are refused with 4xx, never 5xx, and change nothing", () => {
  let robustQueueUrl: string;
  let robustIds: string[];
  beforeAll(async () => {
    robustQueueUrl = (await bed.queue("robust")).url;
    robustIds = await seedDeadLetters(
      bed.db,
      Array.from({ length: 4 }, (_, i) => ({
        consumer: "robust-a",
        job_id: `robust-${i}`,
        queue: robustQueueUrl,
      })),
    );
  });

  it("ids that are not UUIDs are 400 on every id route; an unknown UUID is 404", async () => {
    const malformed = [
      "not-a-uuid",
      encodeURIComponent("' OR 1=1 --"),
      encodeURIComponent("; DROP TABLE core.dead_letters;"),
      "x".repeat(5000),
      `${robustIds[0]}0`,
      String(robustIds[0]).replaceAll("-", ""),
      "%00",
      "%25",
      encodeURIComponent("{id}"),
      "12345",
    ];
    const unknown = randomUUID();
    await expectNoDecisionChange(async () => {
      for (const id of malformed) {
        expectProblem(await bed.call("GET", `${BASE}/${id}`, { token: bed.tokens.admin }), 400);
        expectProblem(await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.admin }), 400);
        expectProblem(
          await bed.call("POST", `${BASE}/${id}/discard`, { token: bed.tokens.admin, body: { reason: "x" } }),
          400,
        );
      }
      expectProblem(await bed.call("GET", `${BASE}/${unknown}`, { token: bed.tokens.admin }), 404);
      expectProblem(await bed.call("POST", `${BASE}/${unknown}/replay`, { token: bed.tokens.admin }), 404);
      expectProblem(
        await bed.call("POST", `${BASE}/${unknown}/discard`, {
          token: bed.tokens.admin,
          body: { reason: "x" },
        }),
        404,
      );
      // A route that does not take the method is a 405 problem; an unknown route a 404 one.
      expectProblem(await bed.call("DELETE", `${BASE}/${robustIds[0]}`, { token: bed.tokens.admin }), 405);
      expectProblem(
        await bed.call("POST", `${BASE}/${robustIds[0]}/delete`, { token: bed.tokens.admin }),
        404,
      );
      expectProblem(await bed.call("GET", "/v1/core/dead-letter", { token: bed.tokens.admin }), 404);
    });
    expect(messagesIn(bed.emulator, "robust")).toBe(0);
  });

  it("garbage, edited, over-long, unsigned and foreign cursors are 400 on the list", async () => {
    const first = await bed.call("GET", `${BASE}?consumer=robust-a&limit=1`, { token: bed.tokens.read });
    expect(first.status).toBe(200);
    const cursor: string = first.body.next_cursor;
    expect(cursor).toEqual(expect.any(String));
    const [body = "", mac = ""] = cursor.split(".");
    const decoded = JSON.parse(Buffer.from(body, "base64url").toString("utf8"));
    // An edited position keeps the original MAC (it cannot make a new one), or drops it.
    const edit = (change: Record<string, unknown>) =>
      `${Buffer.from(JSON.stringify({ ...decoded, ...change })).toString("base64url")}.${mac}`;
    const flipped = `${cursor.slice(0, 10)}${cursor[10] === "A" ? "B" : "A"}${cursor.slice(11)}`;
    const garbage = [
      "!!!",
      "abc",
      "e30",
      Buffer.from("[]").toString("base64url"),
      flipped,
      cursor.slice(0, -6),
      `${cursor}=`,
      edit({ f: "0000000000000000" }),
      edit({ v: 2 }),
      edit({ i: "not-a-uuid" }),
      edit({ t: "yesterday" }),
      edit({ t: "2024-02-30T00:00:00Z" }),
      edit({ extra: true }),
      body,
      `${body}.`,
      `${body}.${Buffer.alloc(16).toString("base64url")}`,
      "A".repeat(513),
    ];
    await expectNoDecisionChange(async () => {
      for (const bad of garbage) {
        const list = await bed.call(
          "GET",
          `${BASE}?consumer=robust-a&limit=1&cursor=${encodeURIComponent(bad)}`,
          {
            token: bed.tokens.read,
          },
        );
        expectProblem(list, 400);
      }
      // A cursor works only with the filter it was issued for.
      for (const query of [
        "",
        "consumer=robust-b",
        "consumer=robust-a&status=pending_review",
        "job_id=robust-1",
      ]) {
        const response = await bed.call("GET", `${BASE}?${query}&limit=1&cursor=${cursor}`, {
          token: bed.tokens.read,
        });
        expectProblem(response, 400);
        expect(response.body.errors).toEqual([expect.objectContaining({ location: "cursor" })]);
      }
      // A cursor sealed with another key (another deployment, or before a rotation) is refused.
      const foreignKey = sealKey(randomBytes(32));
      const decoded = decodeCursor(TEST_SEAL_KEY, cursor, { consumer: "robust-a" });
      const foreign = encodeCursor(foreignKey, decoded, { consumer: "robust-a" });
      expectProblem(
        await bed.call("GET", `${BASE}?consumer=robust-a&limit=1&cursor=${foreign}`, {
          token: bed.tokens.read,
        }),
        400,
      );
      // The same cursor with its own filter continues the listing.
      const next = await bed.call("GET", `${BASE}?consumer=robust-a&limit=1&cursor=${cursor}`, {
        token: bed.tokens.read,
      });
      expect(next.status).toBe(200);
      expect(next.body.items).toHaveLength(1);
      expect(next.body.items[0].id).not.toBe(first.body.items[0].id);
    });
    expect(messagesIn(bed.emulator, "robust")).toBe(0);
  });

  it("unknown filter keys, bad enums, bad timestamps, bad limits, empty strings and U+0000 are 400", async () => {
    const queries = [
      "foo=1",
      "Status=pending_review",
      "offset=5",
      "page=2",
      "status=pending",
      "status=PENDING_REVIEW",
      "status=pending_review,replayed",
      "error_kind=fatal",
      "error_kind=",
      "created_after=yesterday",
      "created_after=2024-01-01",
      "created_after=2024-01-01T00:00:00",
      "created_after=2024-13-01T00:00:00Z",
      "created_before=2024-02-30T00:00:00Z",
      "created_before=1700000000",
      "created_before=",
      "limit=0",
      "limit=501",
      "limit=abc",
      "limit=-1",
      "limit=1.5",
      "limit=",
      "limit=5&limit=6",
      `consumer=${"c".repeat(129)}`,
      `job_id=${"j".repeat(256)}`,
      ...["consumer", "queue", "tenant_id", "job_id", "correlation_id"].flatMap((key) => [
        `${key}=`,
        `${key}=a%00b`,
        `${key}=%00`,
      ]),
    ];
    await expectNoDecisionChange(async () => {
      for (const query of queries) {
        const response = await bed.call("GET", `${BASE}?${query}`, { token: bed.tokens.read });
        expect(response.status, query).toBe(400);
        expectProblem(response, 400);
      }
      for (const query of ["status=replayed", "limit=1", "x=1"]) {
        expectProblem(await bed.call("GET", `${BASE}/stats?${query}`, { token: bed.tokens.read }), 400);
      }
      const bulkFilters = [
        { status: "pending_review" },
        { error_kind: "fatal" },
        { created_after: "yesterday" },
        { consumer: "" },
        { consumer: "a\u0000b" },
        { consumer: 42 },
        { tenant_id: null },
        { unknown: "x" },
      ];
      for (const filter of bulkFilters) {
        for (const path of [`${BASE}/replay`, `${BASE}/replay/plan`, `${BASE}/discard/plan`]) {
          const response = await bed.call("POST", path, { token: bed.tokens.admin, body: { filter } });
          expect(response.status, `${path} ${JSON.stringify(filter)}`).toBe(400);
          expectProblem(response, 400);
        }
      }
    });
    // The boundaries themselves are accepted.
    for (const query of ["limit=1", "limit=500", "created_after=2024-01-01T00:00:00.123456789%2B02:00"]) {
      expect((await bed.call("GET", `${BASE}?${query}`, { token: bed.tokens.read })).status, query).toBe(200);
    }
    expect(messagesIn(bed.emulator, "robust")).toBe(0);
  });

  it("bodies that are not JSON objects of the route's shape are 400, or 415 when not sent as JSON", async () => {
    const id = String(robustIds[1]);
    const json = { "content-type": "application/json" };
    const cases: Array<{ path: string; rawBody: string; headers: Record<string, string>; status: number }> =
      [];
    const routes: Array<{ path: string; valid: string }> = [
      { path: `${BASE}/replay/plan`, valid: JSON.stringify({ filter: { consumer: "robust-a" } }) },
      { path: `${BASE}/${id}/discard`, valid: JSON.stringify({ reason: "fine" }) },
      { path: `${BASE}/${id}/replay`, valid: "{}" },
    ];
    for (const { path, valid } of routes) {
      cases.push(
        { path, rawBody: "{", headers: json, status: 400 },
        { path, rawBody: "not json at all", headers: json, status: 400 },
        { path, rawBody: "[]", headers: json, status: 400 },
        { path, rawBody: `[${valid}]`, headers: json, status: 400 },
        { path, rawBody: "null", headers: json, status: 400 },
        { path, rawBody: '"a string"', headers: json, status: 400 },
        { path, rawBody: "42", headers: json, status: 400 },
        {
          path,
          rawBody: `${valid.slice(0, -1)}${valid === "{}" ? "" : ","}"extra":1}`,
          headers: json,
          status: 400,
        },
        { path, rawBody: valid, headers: { "content-type": "text/plain" }, status: 415 },
        {
          path,
          rawBody: valid,
          headers: { "content-type": "application/x-www-form-urlencoded" },
          status: 415,
        },
        { path, rawBody: valid, headers: { "content-type": "application/octet-stream" }, status: 415 },
        { path, rawBody: valid, headers: { "content-type": "application/jsonp" }, status: 415 },
        { path, rawBody: valid, headers: {}, status: 415 },
      );
    }
    cases.push(
      {
        path: `${BASE}/replay`,
        rawBody: JSON.stringify({ filter: { consumer: "robust-a" }, dry_run: "yes" }),
        headers: json,
        status: 400,
      },
      {
        path: `${BASE}/replay`,
        rawBody: JSON.stringify({ filter: { consumer: "robust-a" }, limit: 0 }),
        headers: json,
        status: 400,
      },
      {
        path: `${BASE}/replay`,
        rawBody: JSON.stringify({ filter: { consumer: "robust-a" }, limit: 501 }),
        headers: json,
        status: 400,
      },
      {
        path: `${BASE}/replay`,
        rawBody: JSON.stringify({ filter: { consumer: "robust-a" }, limit: 2.5 }),
        headers: json,
        status: 400,
      },
      {
        path: `${BASE}/replay`,
        rawBody: '{"filter":{"consumer":"robust-a"},"limit":1e400}',
        headers: json,
        status: 400,
      },
      {
        path: `${BASE}/replay`,
        rawBody: '{"__proto__":{"all":true},"filter":{"consumer":"robust-a"}}',
        headers: json,
        status: 400,
      },
      { path: `${BASE}/replay`, rawBody: '{"filter":"consumer=robust-a"}', headers: json, status: 400 },
      { path: `${BASE}/replay`, rawBody: '{"filter":["robust-a"]}', headers: json, status: 400 },
    );
    await expectNoDecisionChange(async () => {
      for (const { path, rawBody, headers, status } of cases) {
        const response = await bed.call("POST", path, { token: bed.tokens.admin, rawBody, headers });
        expect(response.status, `${path} ${headers["content-type"]} ${rawBody}`).toBe(status);
        expectProblem(response, status);
      }
    });
    expect(messagesIn(bed.emulator, "robust")).toBe(0);

    // An empty JSON object is what a single replay tolerates.
    const tolerated = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay, body: {} });
    expect(tolerated.status).toBe(200);
    expect(messagesIn(bed.emulator, "robust")).toBe(1);
  });

  it("SQL-meaningful strings in every string filter are inert: they match exactly the rows carrying them", async () => {
    const hostile = [
      "' OR 1=1 --",
      "%",
      "_",
      "\\",
      "; DROP TABLE core.dead_letters;",
      "robust-%",
      "' OR '1'='1",
    ];
    const fields = ["consumer", "queue", "tenant_id", "job_id", "correlation_id"] as const;
    // Every hostile string but the last is carried literally by one row per field.
    const carried = hostile.slice(0, -1);
    const seeds: SeedRow[] = fields.flatMap((field) =>
      carried.map((value, i) => ({
        [field]: value,
        job_id: field === "job_id" ? value : `sql-${field}-${i}`,
      })),
    );
    const ids = await seedDeadLetters(bed.db, seeds);
    const count = async () =>
      (await sql<{ n: number }>("SELECT count(*)::int AS n FROM core.dead_letters"))[0]?.n;
    const before = await count();

    await expectNoDecisionChange(async () => {
      for (const field of fields) {
        for (const value of hostile) {
          const label = `${field}=${value}`;
          // The rows that literally carry the value: the seeded one, or none for the last string.
          const literal = await sql<{ id: string }>(
            `SELECT id FROM core.dead_letters WHERE ${field} = $1 ORDER BY created_at DESC, id DESC`,
            [value],
          );
          const seeded = seeds.findIndex((row) => row[field] === value);
          expect(
            literal.map((r) => r.id),
            label,
          ).toEqual(seeded === -1 ? [] : [ids[seeded]]);

          const list = await bed.call("GET", `${BASE}?${field}=${encodeURIComponent(value)}`, {
            token: bed.tokens.read,
          });
          expect(list.status, label).toBe(200);
          expect(
            list.body.items.map((i: { id: string }) => i.id),
            label,
          ).toEqual(literal.map((r) => r.id));
          const plan = await bed.call("POST", `${BASE}/replay/plan`, {
            token: bed.tokens.replay,
            body: { filter: { [field]: value } },
          });
          expect(plan.status, label).toBe(200);
          expect(plan.body.matched, label).toBe(literal.length);
        }
      }
    });
    expect(await count()).toBe(before);
    const [intact] = await sql<{ present: boolean }>(
      "SELECT to_regclass('core.dead_letters') IS NOT NULL AS present",
    );
    expect(intact?.present).toBe(true);
  });
});

/** A dead letter as the list returns it (the fields these tests read). */
interface Listed {
  readonly id: string;
  readonly job_id: string;
  readonly consumer: string;
  readonly queue: string;
  readonly tenant_id: string | null;
  readonly error_kind: string;
  readonly status: string;
  readonly correlation_id: string;
  readonly created_at: string;
}

describe("keyset paging", () => {
  const PAGING_QUEUE = "https://sqs.eu-west-1.amazonaws.com/123456789012/paging";
  let seeded: string[];
  /** The created_at of a tie group in the middle of the seeded rows, as the API renders it. */
  let boundary: string;

  beforeAll(async () => {
    const kinds = ["poison", "hard", "exhausted", "unrecorded"];
    const row = (i: number, created_at?: string): SeedRow => ({
      consumer: i % 2 === 0 ? "page-a" : "page-b",
      job_id: i === 7 || i === 8 ? "page-shared-job" : `page-${i}`,
      queue: `${PAGING_QUEUE}-${i % 3 === 0 ? "two" : "one"}`,
      tenant_id: i % 5 === 0 ? null : `page-t${i % 3}`,
      error_kind: kinds[i % 4] as string,
      correlation_id: i % 11 === 0 ? "corr-page-shared" : `corr-page-${i}`,
      ...(created_at ? { created_at } : {}),
    });
    // Rows 30–89 at given instants: groups of three share one, the fourth is a microsecond later.
    // Rows 0–29 and 90–119 are each inserted by one statement, so each group shares its now().
    const given = await seedDeadLetters(
      bed.db,
      Array.from({ length: 60 }, (_, k) => {
        const second = String(Math.floor(k / 4)).padStart(2, "0");
        return row(30 + k, `2025-06-01T10:00:${second}.12345${k % 4 === 3 ? 7 : 6}Z`);
      }),
    );
    const firstNow = await seedDeadLetters(
      bed.db,
      Array.from({ length: 30 }, (_, i) => row(i)),
    );
    const secondNow = await seedDeadLetters(
      bed.db,
      Array.from({ length: 30 }, (_, i) => row(90 + i)),
    );
    seeded = [...firstNow, ...given, ...secondNow];
    const idsWhere = (keep: (i: number) => boolean) => seeded.filter((_, i) => keep(i));
    await resolveDirectly(
      bed.db,
      idsWhere((i) => i % 6 === 1),
      "replayed",
    );
    await resolveDirectly(
      bed.db,
      idsWhere((i) => i % 6 === 3),
      "discarded",
    );
    await resolveDirectly(
      bed.db,
      idsWhere((i) => i % 12 === 5),
      "superseded",
    );
    const [row51] = await sql<{ t: string }>(
      `SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS t
         FROM core.dead_letters WHERE id = $1`,
      [seeded[51]],
    );
    boundary = String(row51?.t);
  });

  /** Pages through the list with `query`, `limit` rows at a time; returns the rows in order. */
  async function pageAll(query: string, limit = 7): Promise<Listed[]> {
    const items: Listed[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 200; page++) {
      const path = `${BASE}?${query}${query ? "&" : ""}limit=${limit}${cursor ? `&cursor=${cursor}` : ""}`;
      const response = await bed.call("GET", path, { token: bed.tokens.read });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      const { items: pageItems, next_cursor: next } = response.body;
      items.push(...pageItems);
      if (next === null) {
        expect(pageItems.length).toBeLessThanOrEqual(limit);
        return items;
      }
      expect(pageItems).toHaveLength(limit);
      cursor = next;
    }
    throw new Error("paging did not end");
  }

  /** The ids a filter should list, in the API's order, by the migrator's own query. */
  async function expectedIds(where: string, params: unknown[]): Promise<string[]> {
    const rows = await sql<{ id: string }>(
      `SELECT id FROM core.dead_letters ${where ? `WHERE ${where}` : ""} ORDER BY created_at DESC, id DESC`,
      params,
    );
    return rows.map((r) => r.id);
  }

  it("returns every row exactly once, newest first by (created_at, id), ties included", async () => {
    const [largestTie] = await sql<{ n: number }>(
      `SELECT count(*)::int AS n FROM core.dead_letters WHERE id = ANY($1::uuid[])
        GROUP BY created_at ORDER BY 1 DESC LIMIT 1`,
      [seeded],
    );
    expect(largestTie?.n).toBeGreaterThanOrEqual(30);

    const items = await pageAll("");
    const ids = items.map((i) => i.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toEqual(await expectedIds("", []));
    expect(ids).toEqual(expect.arrayContaining(seeded));
    items.slice(1).forEach((current, i) => {
      const previous = items[i] as Listed;
      expect(previous.created_at >= current.created_at).toBe(true);
      if (previous.created_at === current.created_at) expect(previous.id > current.id).toBe(true);
    });
  });

  it("narrows by each filter and pages the narrowed set completely", async () => {
    const shared = "page-shared-job";
    const filters: Array<{ query: string; where: string; params: unknown[]; holds: (i: Listed) => boolean }> =
      [
        {
          query: "status=replayed",
          where: "status = $1",
          params: ["replayed"],
          holds: (i) => i.status === "replayed",
        },
        {
          query: "status=pending_review",
          where: "status = $1",
          params: ["pending_review"],
          holds: (i) => i.status === "pending_review",
        },
        {
          query: "consumer=page-a",
          where: "consumer = $1",
          params: ["page-a"],
          holds: (i) => i.consumer === "page-a",
        },
        {
          query: `queue=${encodeURIComponent(`${PAGING_QUEUE}-two`)}`,
          where: "queue = $1",
          params: [`${PAGING_QUEUE}-two`],
          holds: (i) => i.queue === `${PAGING_QUEUE}-two`,
        },
        {
          query: "error_kind=poison",
          where: "error_kind = $1",
          params: ["poison"],
          holds: (i) => i.error_kind === "poison",
        },
        {
          query: "tenant_id=page-t2",
          where: "tenant_id = $1",
          params: ["page-t2"],
          holds: (i) => i.tenant_id === "page-t2",
        },
        {
          query: `job_id=${shared}`,
          where: "job_id = $1",
          params: [shared],
          holds: (i) => i.job_id === shared,
        },
        {
          query: "correlation_id=corr-page-shared",
          where: "correlation_id = $1",
          params: ["corr-page-shared"],
          holds: (i) => i.correlation_id === "corr-page-shared",
        },
        {
          query: `created_after=${boundary}`,
          where: "created_at >= $1::timestamptz",
          params: [boundary],
          holds: (i) => i.created_at >= boundary,
        },
        {
          query: `created_before=${boundary}`,
          where: "created_at < $1::timestamptz",
          params: [boundary],
          holds: (i) => i.created_at < boundary,
        },
        {
          query: `consumer=page-b&status=pending_review&error_kind=unrecorded&created_after=2025-06-01T10:00:00Z&created_before=${boundary}`,
          where: `consumer = 'page-b' AND status = 'pending_review' AND error_kind = 'unrecorded'
                AND created_at >= '2025-06-01T10:00:00Z' AND created_at < $1::timestamptz`,
          params: [boundary],
          holds: (i) =>
            i.consumer === "page-b" && i.status === "pending_review" && i.error_kind === "unrecorded",
        },
      ];
    const total = (await expectedIds("", [])).length;
    for (const { query, where, params, holds } of filters) {
      const items = await pageAll(query);
      const expected = await expectedIds(where, params);
      expect(expected.length, query).toBeGreaterThan(0);
      expect(expected.length, query).toBeLessThan(total);
      expect(
        items.map((i) => i.id),
        query,
      ).toEqual(expected);
      expect(items.every(holds), query).toBe(true);
    }
    // The boundary's own tie group is inside created_after and outside created_before.
    const atBoundary = await expectedIds("created_at = $1::timestamptz", [boundary]);
    expect(atBoundary).toHaveLength(3);
    const after = (await pageAll(`created_after=${boundary}`)).map((i) => i.id);
    const before = (await pageAll(`created_before=${boundary}`)).map((i) => i.id);
    expect(after).toEqual(expect.arrayContaining(atBoundary));
    expect(before.filter((id) => atBoundary.includes(id))).toEqual([]);
  });

  it("defaults to 50 rows a page and serves up to 500", async () => {
    const page = await bed.call("GET", BASE, { token: bed.tokens.read });
    expect(page.body.items).toHaveLength(50);
    expect(page.body.next_cursor).toEqual(expect.any(String));
    const big = await bed.call("GET", `${BASE}?limit=500`, { token: bed.tokens.read });
    expect(big.body.items.map((i: { id: string }) => i.id)).toEqual(
      (await expectedIds("", [])).slice(0, 500),
    );
  });
});

describe("concurrent decisions", () => {
  it("a replay and a discard fired at once: exactly one wins (200), the other gets 409, and the row shows the winner", async () => {
    const queue = await bed.queue("race");
    const winners: string[] = [];
    const rounds = 20;
    for (let round = 0; round < rounds; round++) {
      const jobId = `race-${round}`;
      const id = await seedOne({ consumer: "race", job_id: jobId, queue: queue.url });
      const [replay, discard] = await Promise.all([
        bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.admin }),
        bed.call("POST", `${BASE}/${id}/discard`, { token: bed.tokens.admin, body: { reason: "race" } }),
      ]);
      expect([replay.status, discard.status].sort()).toEqual([200, 409]);
      const winner = replay.status === 200 ? "replayed" : "discarded";
      const loser = replay.status === 200 ? discard : replay;
      expectProblem(loser, 409);
      expect(loser.body.current_status).toBe(winner);
      expect((await decisionOf(id)).status).toBe(winner);
      winners.push(winner);
    }
    const replayed = winners.filter((w) => w === "replayed").length;
    const messages = await receiveAll(bed.sqs, queue.url);
    expect(messages).toHaveLength(replayed);
    const sentJobs = messages.map((m) => bodyOf(m).job_id).sort();
    const replayedJobs = winners.flatMap((w, round) => (w === "replayed" ? [`race-${round}`] : [])).sort();
    expect(sentJobs).toEqual(replayedJobs);
  });
});

describe("stats", () => {
  it("counts per consumer × status × error_kind equal a GROUP BY after inserts, replays, discards and multi-row updates", async () => {
    const queue = (await bed.queue("stats")).url;
    const kindsA = ["poison", "poison", "hard", "hard", "exhausted", "exhausted"];
    const kindsB = ["unrecorded", "unrecorded", "unrecorded", "hard", "hard", "hard"];
    const ids = await seedDeadLetters(bed.db, [
      ...kindsA.map((error_kind, i) => ({ consumer: "stats-a", job_id: `sa-${i}`, error_kind, queue })),
      ...kindsB.map((error_kind, i) => ({ consumer: "stats-b", job_id: `sb-${i}`, error_kind, queue })),
    ]);
    const [, poison2, , hard2] = ids;
    const replay = await bed.call("POST", `${BASE}/${hard2}/replay`, { token: bed.tokens.replay });
    expect(replay.status).toBe(200);
    const discard = await bed.call("POST", `${BASE}/${poison2}/discard`, {
      token: bed.tokens.discard,
      body: { reason: "noise" },
    });
    expect(discard.status).toBe(200);
    // Bulk replays: multi-row UPDATEs by the worker, one of them partly superseded.
    await bed.db.withClient((c) => insertFence(c, "sb-3", { consumer: "stats-b" }));
    for (const [filter, matched] of [
      [{ consumer: "stats-a", error_kind: "exhausted" }, 2],
      [{ consumer: "stats-b", error_kind: "hard" }, 3],
    ] as const) {
      const bulk = await runBulkToEnd(
        { pool: bed.opsPool, sqs: bed.sqs },
        { kind: "replay", filter },
        REPLAYER,
      );
      expect(bulk).toMatchObject({ status: "completed", processed: matched });
    }
    // A multi-row UPDATE outside the API, and one rolled back.
    await bed.db.withClient(async (c) => {
      await c.query(
        `UPDATE core.dead_letters SET status = 'discarded', discard_reason = 'bulk cleanup', resolved_at = now(),
                resolved_by = 'sql' WHERE consumer = 'stats-b' AND status = 'pending_review'`,
      );
      await c.query("BEGIN");
      await c.query(
        `UPDATE core.dead_letters SET status = 'replayed', resolved_at = now(), resolved_by = 'sql'
          WHERE consumer = 'stats-a' AND status = 'pending_review'`,
      );
      await c.query("ROLLBACK");
    });

    const stats = await bed.call("GET", `${BASE}/stats`, { token: bed.tokens.read });
    expect(stats.status).toBe(200);
    const grouped = await sql(
      `SELECT consumer, status, error_kind, count(*)::int AS count FROM core.dead_letters
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`,
    );
    expect(stats.body.counts).toEqual(grouped);
    const mine = stats.body.counts.filter((c: { consumer: string }) => c.consumer.startsWith("stats-"));
    expect(mine).toEqual([
      { consumer: "stats-a", status: "discarded", error_kind: "poison", count: 1 },
      { consumer: "stats-a", status: "pending_review", error_kind: "hard", count: 1 },
      { consumer: "stats-a", status: "pending_review", error_kind: "poison", count: 1 },
      { consumer: "stats-a", status: "replayed", error_kind: "exhausted", count: 2 },
      { consumer: "stats-a", status: "replayed", error_kind: "hard", count: 1 },
      { consumer: "stats-b", status: "discarded", error_kind: "unrecorded", count: 3 },
      { consumer: "stats-b", status: "replayed", error_kind: "hard", count: 2 },
      { consumer: "stats-b", status: "superseded", error_kind: "hard", count: 1 },
    ]);
    // The counters hold no stale keys either: a key that dropped to zero reads zero.
    const stale = await sql(
      `SELECT c.consumer, c.status, c.error_kind, c.count,
              (SELECT count(*) FROM core.dead_letters d
                WHERE (d.consumer, d.status, d.error_kind) = (c.consumer, c.status, c.error_kind))::int AS actual
         FROM core.dead_letter_counts c
        WHERE c.count <> (SELECT count(*) FROM core.dead_letters d
                           WHERE (d.consumer, d.status, d.error_kind) = (c.consumer, c.status, c.error_kind))`,
    );
    expect(stale).toEqual([]);
  });

  it("oldest_pending lists each consumer's oldest pending dead letter, oldest first", async () => {
    const [resolvedOldest, oldestPending] = await seedDeadLetters(bed.db, [
      { consumer: "stats-c", job_id: "sc-1", created_at: "2020-01-01T00:00:00.000001Z" },
      { consumer: "stats-c", job_id: "sc-2", created_at: "2020-02-01T00:00:00Z" },
      { consumer: "stats-c", job_id: "sc-3", created_at: "2020-03-01T00:00:00Z" },
      { consumer: "stats-d", job_id: "sd-1", created_at: "2019-06-01T12:00:00.5Z" },
    ]);
    await resolveDirectly(bed.db, [String(resolvedOldest)], "discarded");

    const stats = await bed.call("GET", `${BASE}/stats`, { token: bed.tokens.read });
    expect(stats.status).toBe(200);
    const expected = await sql(
      `SELECT consumer, id, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at
         FROM (SELECT DISTINCT ON (consumer) consumer, id, created_at FROM core.dead_letters
                WHERE status = 'pending_review' ORDER BY consumer, created_at, id) AS o
        ORDER BY o.created_at, o.id`,
    );
    expect(stats.body.oldest_pending).toEqual(expected);
    const byConsumer = new Map(
      stats.body.oldest_pending.map((o: { consumer: string }) => [o.consumer, o] as const),
    );
    expect(byConsumer.get("stats-c")).toEqual({
      consumer: "stats-c",
      id: oldestPending,
      created_at: "2020-02-01T00:00:00.000000Z",
    });
    expect(stats.body.oldest_pending.slice(0, 2).map((o: { consumer: string }) => o.consumer)).toEqual([
      "stats-d",
      "stats-c",
    ]);
    // A consumer with no pending dead letter has no entry.
    expect(byConsumer.has("stats-b")).toBe(false);
  });
});
