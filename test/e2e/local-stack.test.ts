/**
 * End to end: the local stack as users run it — `npm start` in a child process — driven only
 * through the SQS API, HTTP and SQL. The test owns PostgreSQL (a database of its own) and the SQS
 * emulator, so the stack can be SIGKILLed mid-load and started again on the same services.
 *
 * The stack runs with 4 attempts, a 1 s base and a 2 s cap, a 500 ms lock_timeout and a 1 s poll
 * wait, so retries and exhaustion happen in seconds. (The lock_timeout does not reach the
 * consumer's pool today: local/stack.ts builds that pool without it, so each attempt that waits on
 * a held lock takes the pool's default 5 s. Nothing here depends on the value.)
 */
import { spawn } from "node:child_process";
import { GetQueueAttributesCommand, SetQueueAttributesCommand, type SQSClient } from "@aws-sdk/client-sqs";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { userAddress } from "../../functions/notify-user/email.ts";
import { localSqsClient } from "../../local/aws-clients.ts";
import { type SqsEmulator, startSqsEmulator } from "../../local/sqs-emulator.ts";
import { stepKey } from "../../shared/envelope/step-key.ts";
import { deriveJobId } from "../../shared/producer/job-id.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { queueCounts, sendBatch, sendMessage, waitForEmptyQueue } from "../support/sqs.ts";
import {
  awardQueue,
  callApi,
  deadLetterById,
  deadLettersOf,
  E2E_RETRY,
  effectsOf,
  envelope,
  groupAlive,
  type HeldLock,
  holdBalanceLock,
  REPO_ROOT,
  type StackProcess,
  type StackServices,
  stackNodePid,
  startStack,
  tempLocalDir,
  waitFor,
} from "./support.ts";

const LONG = 120_000;
const UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
const escapeRe = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const deadLine = (job: string, kind: string, attempts: number) =>
  new RegExp(
    `DEAD\\s+award-points job ${escapeRe(job)}: ${kind} after ${attempts} attempt\\(s\\), dead letter (${UUID})`,
  );
const retryLine = (job: string, attempt: number) =>
  new RegExp(
    `retry\\s+award-points job ${escapeRe(job)}: attempt ${attempt} failed \\((.*)\\); again in (\\d+)s`,
  );
const DEAD_LETTERS = "/v1/core/dead-letters";
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

let db: TestDatabase;
let emulator: SqsEmulator;
let localDir: { path: string; remove(): Promise<void> };
let services: StackServices;
let stack: StackProcess | undefined;
let sqs: SQSClient;
let sql: pg.Client;
const locks: HeldLock[] = [];

/** The running stack; fails the test when a previous step left none. */
function running(): StackProcess {
  if (!stack) throw new Error("no stack is running");
  return stack;
}

beforeAll(async () => {
  db = await createTestDatabase();
  emulator = await startSqsEmulator();
  localDir = await tempLocalDir();
  services = { databaseUrl: db.url, sqsEndpoint: emulator.endpoint, localDir: localDir.path };
  sqs = localSqsClient(emulator.endpoint);
  sql = new pg.Client({ connectionString: db.url });
  await sql.connect();
  stack = await startStack(services);
}, LONG);

afterAll(async () => {
  for (const lock of locks) await lock.release().catch(() => {});
  if (stack) await stack.stop(10_000);
  await sql?.end().catch(() => {});
  sqs?.destroy();
  await emulator?.stop();
  await db?.drop();
  await localDir?.remove();
}, LONG);

/** notify-user's notifications of the follow-ups award-points sent for `jobIds`. */
async function notificationsOf(jobIds: readonly string[]): Promise<number> {
  const { rows } = await sql.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM notify_user.notifications WHERE job_id = ANY($1)",
    [jobIds.map((id) => deriveJobId("notify-user", "award-points", id, 0))],
  );
  return rows[0]?.n ?? 0;
}

/** `npm run <script> -- <args>` against the running stack (its stack.json): exit and output. */
function npmRun(
  script: string,
  args: readonly string[],
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn("npm", ["run", "--silent", script, "--", ...args], {
      cwd: REPO_ROOT,
      env: { ...process.env, JOBFENCE_LOCAL_DIR: localDir.path },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => {
      stdout += String(chunk);
    });
    child.stderr.on("data", (chunk) => {
      stderr += String(chunk);
    });
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("the local stack, started with npm start", () => {
  it("comes up on the test's PostgreSQL and SQS emulator and says where everything is", async () => {
    const { info, stdout, waitForLine } = running();
    // The banner is printed after the "ready" line, possibly in a later chunk.
    await waitForLine(/retries\s+4 attempts, 1s base, 2s cap/, 5000);
    expect(stdout()).toMatch(/postgres\s+using DATABASE_URL/);
    expect(stdout()).toContain(`sqs        using SQS_ENDPOINT ${emulator.endpoint}`);
    expect(stdout()).toMatch(/migrate\s+schema up to date \(0 applied now/);
    expect(stdout()).toContain(`API        ${info.apiUrl}/v1/core/dead-letters`);
    expect(info.sqsEndpoint).toBe(emulator.endpoint);
    expect(info.apiUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const queue = awardQueue(info);
    expect(queue.url.startsWith(emulator.endpoint)).toBe(true);
    expect(queue.backstopUrl.startsWith(emulator.endpoint)).toBe(true);
    expect(Object.keys(info.tokens).sort()).toEqual(["admin", "discard", "none", "read", "replay"]);
    // The fake provider the consumers' steps call: named in stack.json and the banner, and answering.
    expect(info.providerUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(stdout()).toContain(`provider   ${info.providerUrl}   (POST /v1/charges, /v1/emails;`);
    const ledger = await fetch(`${info.providerUrl}/_fake/ledger`);
    expect(ledger.status).toBe(200);
    expect(await ledger.json()).toEqual({ entries: expect.any(Array), requests: expect.any(Array) });
  });

  it("1. applies a job sent several times exactly once", { timeout: LONG }, async () => {
    const { info } = running();
    const queue = awardQueue(info);
    const job = "dup-1";
    const body = envelope(job, "dup-user", 7);
    await sendBatch(sqs, queue.url, [body, body, body, body, body]); // one batch of five
    await sendMessage(sqs, queue.url, body);
    await sendMessage(sqs, queue.url, body);

    await waitFor(
      "the job's fence",
      () => effectsOf(sql, job),
      (e) => e.fences === 1,
    );
    await waitForEmptyQueue(sqs, queue.url); // every copy was received and acknowledged

    expect(await effectsOf(sql, job)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    const balance = await sql.query<{ balance: string }>(
      "SELECT balance FROM award_points.balances WHERE tenant_id = 't_e2e' AND user_id = 'dup-user'",
    );
    expect(balance.rows.map((r) => Number(r.balance))).toEqual([7]);
    // The award told notify-user through its outbox: one notification, the outbox empty again.
    await waitFor(
      "its notification in notify-user",
      () => notificationsOf([job]),
      (n) => n === 1,
    );
    const outbox = await sql.query("SELECT 1 FROM core.outbox WHERE parent_job_id = $1", [job]);
    expect(outbox.rowCount).toBe(0);
    // And notify-user emailed the user once, through the stack's fake provider under its step's
    // key; the notification records the email's id.
    const followUp = deriveJobId("notify-user", "award-points", job, 0);
    const ledger = (await (await fetch(`${info.providerUrl}/_fake/ledger`)).json()) as {
      entries: Array<{ id: string; key: string | null; request: { to: string } }>;
    };
    const emails = ledger.entries.filter((e) => e.key === stepKey("notify-user", followUp, "email"));
    expect(emails.map((e) => e.request.to)).toEqual([userAddress("dup-user")]);
    const recorded = await sql.query(
      "SELECT provider_message_id FROM notify_user.notifications WHERE job_id = $1",
      [followUp],
    );
    expect(recorded.rows).toEqual([{ provider_message_id: emails[0]?.id }]);
  });

  let poisonDeadLetterId = "";
  let rawDeadLetterId = "";

  it("2. dead-letters a poison message once, after one attempt, without retrying it", {
    timeout: LONG,
  }, async () => {
    const s = running();
    const queue = awardQueue(s.info);
    const job = "poison-negative";
    const poisonBody = envelope(job, "poison-user", -3); // fails the consumer's payload schema
    await sendMessage(sqs, queue.url, poisonBody);
    const rawMessageId = await sendMessage(sqs, queue.url, "this is not JSON");

    const [, poisonId] = await s.waitForLine(deadLine(job, "poison", 1));
    const [, rawId] = await s.waitForLine(deadLine(rawMessageId, "poison", 1));
    poisonDeadLetterId = poisonId ?? "";
    rawDeadLetterId = rawId ?? "";
    await waitForEmptyQueue(sqs, queue.url);

    const [poison, ...morePoison] = await deadLettersOf(sql, job);
    expect(morePoison).toEqual([]);
    expect(poison).toMatchObject({
      id: poisonDeadLetterId,
      consumer: "award-points",
      queue: queue.url,
      error_kind: "poison",
      attempts: 1,
      status: "pending_review",
      payload: JSON.parse(poisonBody),
      body_form: "text",
      body: poisonBody,
    });
    // No job id can be read from a body that is not JSON: the MessageId stands in, the text is kept.
    const [raw, ...moreRaw] = await deadLettersOf(sql, rawMessageId);
    expect(moreRaw).toEqual([]);
    expect(raw).toMatchObject({
      id: rawDeadLetterId,
      error_kind: "poison",
      attempts: 1,
      payload: null,
      body_form: "text",
      body: "this is not JSON",
    });

    // Zero retries: no retry line, nothing applied, nothing left in the queue or its backstop.
    expect(
      s.lines(new RegExp(`retry\\s+award-points job (${escapeRe(job)}|${escapeRe(rawMessageId)}):`)),
    ).toEqual([]);
    expect(await effectsOf(sql, job)).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
    expect(await queueCounts(sqs, queue.url)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
    expect(await queueCounts(sqs, queue.backstopUrl)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
  });

  it("2b. npm run send --raw sends a body as it is; it ends as a poison dead letter, and its replay's failure links back to it", {
    timeout: LONG,
  }, async () => {
    const s = running();
    const queue = awardQueue(s.info);
    const body = '{"job_id": "raw-1", "payload": {'; // cut short: not JSON
    const sent = await npmRun("send", ["award-points", "--raw", body]);
    expect(sent.stderr).toBe("");
    expect(sent.code).toBe(0);
    const messageId = sent.stdout.match(/^sent\s+message (\S+)$/m)?.[1] ?? "";
    expect(messageId).not.toBe("");

    const [, id = ""] = await s.waitForLine(deadLine(messageId, "poison", 1));
    await waitForEmptyQueue(sqs, queue.url);
    const [row, ...more] = await deadLettersOf(sql, messageId);
    expect(more).toEqual([]);
    expect(row).toMatchObject({
      id,
      error_kind: "poison",
      attempts: 1,
      payload: null,
      body_form: "text",
      body,
    });

    // Replayed, the body fails again, as a new dead letter filed under the copy's own message id:
    // the two are linked, in the API and in the CLI's show.
    const replayed = await callApi(s.info, "POST", `${DEAD_LETTERS}/${id}/replay`, s.info.tokens.admin);
    expect(replayed.status).toBe(200);
    const copy = String(replayed.body?.message_id);
    const [, next = ""] = await s.waitForLine(deadLine(copy, "poison", 1));
    const one = async (dl: string) =>
      (await callApi(s.info, "GET", `${DEAD_LETTERS}/${dl}`, s.info.tokens.read)).body;
    expect(await one(id)).toMatchObject({ status: "replayed", replay_of: null, replay_failed_as: next });
    expect(await one(next)).toMatchObject({
      status: "pending_review",
      replay_of: id,
      replay_failed_as: null,
    });
    const shown = await npmRun("ops", ["dead-letters", "show", id]);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toMatch(new RegExp(`^replay_failed_as\\s+${next} `, "m"));
  });

  it("3. retries a transient failure with growing delays, then applies it once when the lock goes", {
    timeout: LONG,
  }, async () => {
    const s = running();
    const queue = awardQueue(s.info);
    const job = "transient-1";
    const user = "transient-user";
    const lock = await holdBalanceLock(db.url, user);
    locks.push(lock);
    await sendMessage(sqs, queue.url, envelope(job, user, 5));

    const first = await s.waitForLine(retryLine(job, 1));
    const second = await s.waitForLine(retryLine(job, 2));
    await lock.release(); // attempt 3 comes at least ~2 s later and finds the row free

    await waitFor(
      "the transient job's fence",
      () => effectsOf(sql, job),
      (e) => e.fences === 1,
    );
    await waitForEmptyQueue(sqs, queue.url);

    // The failures were the lock_timeout, and each wait was longer than the one before.
    expect(first[1]).toMatch(/lock timeout/i);
    expect(second[1]).toMatch(/lock timeout/i);
    const delays = [Number(first[2]), Number(second[2])];
    expect(delays).toEqual([1, 2]); // base 1 s · 2^(n−1) with ±20 % jitter, rounded; cap 2 s
    expect(s.lines(retryLine(job, 3))).toEqual([]);

    expect(await effectsOf(sql, job)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    const balance = await sql.query<{ balance: string }>(
      "SELECT balance FROM award_points.balances WHERE tenant_id = 't_e2e' AND user_id = $1",
      [user],
    );
    expect(balance.rows.map((r) => Number(r.balance))).toEqual([5]);
  });

  let exhaustedDeadLetterId = "";
  let exhaustLock: HeldLock | undefined;
  const exhaustJob = "exhaust-1";
  const exhaustUser = "exhaust-user";

  it("4. dead-letters a job that keeps failing as exhausted after the last attempt, and says so", {
    timeout: LONG,
  }, async () => {
    const s = running();
    const queue = awardQueue(s.info);
    exhaustLock = await holdBalanceLock(db.url, exhaustUser);
    locks.push(exhaustLock);
    await sendMessage(sqs, queue.url, envelope(exhaustJob, exhaustUser, 9));

    const [, id] = await s.waitForLine(deadLine(exhaustJob, "exhausted", E2E_RETRY.maxAttempts), 60_000);
    exhaustedDeadLetterId = id ?? "";
    await waitForEmptyQueue(sqs, queue.url);

    // Attempts 1..3 were retried with growing (then capped) delays; attempt 4 dead-lettered.
    const delays = [1, 2, 3].map((attempt) => {
      const [line, ...more] = s.lines(retryLine(exhaustJob, attempt));
      expect(more).toEqual([]);
      return Number(line?.match(retryLine(exhaustJob, attempt))?.[2]);
    });
    expect(delays).toEqual([1, 2, 2]);
    expect(s.lines(retryLine(exhaustJob, 4))).toEqual([]);
    // SQS kept the message hidden for each announced delay: no attempt ended sooner after the last.
    const ends = [
      ...[1, 2, 3].map((attempt) => s.timedLines(retryLine(exhaustJob, attempt))[0]?.at ?? Number.NaN),
      s.timedLines(deadLine(exhaustJob, "exhausted", E2E_RETRY.maxAttempts))[0]?.at ?? Number.NaN,
    ];
    for (const [i, delay] of delays.entries()) {
      expect((ends[i + 1] ?? Number.NaN) - (ends[i] ?? Number.NaN)).toBeGreaterThanOrEqual(delay * 1000 - 50);
    }

    const [row, ...more] = await deadLettersOf(sql, exhaustJob);
    expect(more).toEqual([]);
    expect(row).toMatchObject({
      id: exhaustedDeadLetterId,
      error_kind: "exhausted",
      attempts: E2E_RETRY.maxAttempts,
      status: "pending_review",
      queue: queue.url,
    });
    expect(row?.last_error).toMatchObject({ class: "DatabaseError" });
    expect(row?.last_error.message).toMatch(/lock timeout/);
    expect(await effectsOf(sql, exhaustJob)).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
    expect(await queueCounts(sqs, queue.backstopUrl)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });

    // An operator finds it through the API.
    const listed = await callApi(
      s.info,
      "GET",
      `${DEAD_LETTERS}?job_id=${exhaustJob}&error_kind=exhausted`,
      s.info.tokens.read,
    );
    expect(listed.status).toBe(200);
    const items = listed.body?.items as Array<Record<string, unknown>>;
    expect(items.map((i) => [i.id, i.status, i.attempts])).toEqual([
      [exhaustedDeadLetterId, "pending_review", E2E_RETRY.maxAttempts],
    ]);
  });

  it("5. replays the exhausted job through the API once the lock is gone; it applies once", {
    timeout: LONG,
  }, async () => {
    const s = running();
    const queue = awardQueue(s.info);
    expect(exhaustedDeadLetterId).toMatch(new RegExp(`^${UUID}$`));
    await exhaustLock?.release();

    const replayed = await callApi(
      s.info,
      "POST",
      `${DEAD_LETTERS}/${exhaustedDeadLetterId}/replay`,
      s.info.tokens.admin,
    );
    expect(replayed.status).toBe(200);
    expect(replayed.body).toMatchObject({ id: exhaustedDeadLetterId, status: "replayed" });
    expect(replayed.body?.message_id).toEqual(expect.any(String));

    await waitFor(
      "the replayed job's fence",
      () => effectsOf(sql, exhaustJob),
      (e) => e.fences === 1,
    );
    await waitForEmptyQueue(sqs, queue.url);
    expect(await effectsOf(sql, exhaustJob)).toEqual({ ledger: 1, fences: 1, deadLetters: 1 });
    expect(await deadLetterById(sql, exhaustedDeadLetterId)).toMatchObject({
      status: "replayed",
      resolved_by: "local-admin",
      resolved_at: expect.any(Date),
    });

    // A second replay is refused (no longer pending_review), and a stray duplicate applies nothing.
    const again = await callApi(
      s.info,
      "POST",
      `${DEAD_LETTERS}/${exhaustedDeadLetterId}/replay`,
      s.info.tokens.admin,
    );
    expect(again.status).toBe(409);
    expect(again.contentType).toMatch(/^application\/problem\+json/);
    await sendMessage(sqs, queue.url, envelope(exhaustJob, exhaustUser, 9));
    await waitForEmptyQueue(sqs, queue.url);
    expect(await effectsOf(sql, exhaustJob)).toEqual({ ledger: 1, fences: 1, deadLetters: 1 });
    const balance = await sql.query<{ balance: string }>(
      "SELECT balance FROM award_points.balances WHERE tenant_id = 't_e2e' AND user_id = $1",
      [exhaustUser],
    );
    expect(balance.rows.map((r) => Number(r.balance))).toEqual([9]);
  });

  it("6. refuses a discard without a reason (400 problem+json) and records one with a reason", async () => {
    const { info } = running();
    expect(poisonDeadLetterId).toMatch(new RegExp(`^${UUID}$`));
    const path = `${DEAD_LETTERS}/${poisonDeadLetterId}/discard`;

    for (const body of [{}, { reason: "" }, { reason: "   " }, undefined]) {
      const refused = await callApi(info, "POST", path, info.tokens.discard, body);
      expect(refused.status, JSON.stringify(body)).toBe(400);
      expect(refused.contentType).toMatch(/^application\/problem\+json/);
      expect(refused.body).toMatchObject({ status: 400 });
    }
    expect(await deadLetterById(sql, poisonDeadLetterId)).toMatchObject({
      status: "pending_review",
      discard_reason: null,
      resolved_by: null,
    });

    const reason = "negative points are a producer bug";
    const discarded = await callApi(info, "POST", path, info.tokens.discard, { reason });
    expect(discarded.status).toBe(200);
    expect(discarded.body).toEqual({ id: poisonDeadLetterId, status: "discarded", reason });
    expect(await deadLetterById(sql, poisonDeadLetterId)).toMatchObject({
      status: "discarded",
      discard_reason: reason,
      resolved_by: "local-discarder",
      resolved_at: expect.any(Date),
    });

    // Resolved for good: neither discarded again nor replayed.
    const again = await callApi(info, "POST", path, info.tokens.discard, { reason: "again" });
    expect(again.status).toBe(409);
    const replay = await callApi(
      info,
      "POST",
      `${DEAD_LETTERS}/${poisonDeadLetterId}/replay`,
      info.tokens.admin,
    );
    expect(replay.status).toBe(409);
    expect(await deadLetterById(sql, poisonDeadLetterId)).toMatchObject({
      status: "discarded",
      discard_reason: reason,
    });
  });

  it("7. answers 403 problem+json when the token lacks the route's permission (401 without one)", async () => {
    const { info } = running();
    expect(rawDeadLetterId).toMatch(new RegExp(`^${UUID}$`));
    const id = rawDeadLetterId;
    const forbidden: Array<[string, "GET" | "POST", string, string, unknown]> = [
      ["read on replay", "POST", `${DEAD_LETTERS}/${id}/replay`, info.tokens.read, undefined],
      ["read on discard", "POST", `${DEAD_LETTERS}/${id}/discard`, info.tokens.read, { reason: "x" }],
      ["discard on replay", "POST", `${DEAD_LETTERS}/${id}/replay`, info.tokens.discard, undefined],
      ["replay on discard", "POST", `${DEAD_LETTERS}/${id}/discard`, info.tokens.replay, { reason: "x" }],
      ["replay on list", "GET", DEAD_LETTERS, info.tokens.replay, undefined],
      ["none on list", "GET", DEAD_LETTERS, info.tokens.none, undefined],
      ["none on get", "GET", `${DEAD_LETTERS}/${id}`, info.tokens.none, undefined],
      ["none on stats", "GET", `${DEAD_LETTERS}/stats`, info.tokens.none, undefined],
      [
        "none on bulk replay",
        "POST",
        `${DEAD_LETTERS}/replay`,
        info.tokens.none,
        { all: true, dry_run: true },
      ],
    ];
    for (const [name, method, path, token, body] of forbidden) {
      const answer = await callApi(info, method, path, token, body);
      expect(answer.status, name).toBe(403);
      expect(answer.contentType, name).toMatch(/^application\/problem\+json/);
      expect(answer.body, name).toMatchObject({ status: 403 });
    }
    const anonymous = await callApi(info, "GET", DEAD_LETTERS, undefined);
    expect(anonymous.status).toBe(401);
    expect(anonymous.contentType).toMatch(/^application\/problem\+json/);

    // Nothing changed, and the right permission does reach the row.
    expect(await deadLetterById(sql, id)).toMatchObject({ status: "pending_review", resolved_by: null });
    const read = await callApi(info, "GET", `${DEAD_LETTERS}/${id}`, info.tokens.read);
    expect(read.status).toBe(200);
    expect(read.body).toMatchObject({ id, status: "pending_review", error_kind: "poison" });
  });

  it("printed one readable DEAD line per dead letter it recorded", async () => {
    const s = running();
    const { rows } = await sql.query<{ id: string }>("SELECT id FROM core.dead_letters ORDER BY id");
    const printed = s
      .lines(/^\d\d:\d\d:\d\d DEAD /)
      .map((line) => line.match(new RegExp(`dead letter (${UUID})`))?.[1]);
    expect(printed.sort()).toEqual(rows.map((r) => r.id));
    expect(rows).toHaveLength(5); // four poison (one sent raw by npm run send, and its replay), one exhausted
  });

  it("8. loses no job and applies none twice when SIGKILLed mid-load and started again", {
    // The follow-ups the kill left wait for the scheduled relay (every 5 s) once made due.
    timeout: LONG + 60_000,
  }, async () => {
    const first = running();
    const queue = awardQueue(first.info);
    await waitForEmptyQueue(sqs, queue.url);

    // In-flight messages of a killed stack come back after the queue's visibility timeout (180 s
    // as the stack sets it). Lower it for the receives of this first stack: each receive fixes its
    // message's deadline, so what this stack holds at the kill comes back within seconds.
    // The same for notify-user's queue: the follow-ups its consumer holds at the kill come back too.
    for (const url of [queue.url, first.info.queues["notify-user"]?.url as string]) {
      await sqs.send(
        new SetQueueAttributesCommand({ QueueUrl: url, Attributes: { VisibilityTimeout: "3" } }),
      );
    }

    const users = 40;
    const jobs = Array.from({ length: 300 }, (_, i) => ({
      id: `load-${String(i).padStart(3, "0")}`,
      user: `load-user-${i % users}`,
      points: 1 + (i % 7),
    }));
    const bodiesOf = (part: typeof jobs) => {
      const bodies: string[] = [];
      for (const [i, job] of part.entries()) {
        const body = envelope(job.id, job.user, job.points);
        bodies.push(body);
        if (i % 3 === 0) bodies.push(body); // a duplicate of every third job
      }
      return bodies;
    };
    const firstHalf = bodiesOf(jobs.slice(0, 150));
    const secondHalf = bodiesOf(jobs.slice(150));
    const applied = async () =>
      Number(
        (
          await sql.query<{ n: number }>(
            "SELECT count(DISTINCT job_id)::int AS n FROM award_points.ledger WHERE job_id LIKE 'load-%'",
          )
        ).rows[0]?.n,
      );

    await sendBatch(sqs, queue.url, firstHalf);
    await waitFor("the first jobs to apply", applied, (n) => n >= 20, 30_000, 10);
    const killed = await first.kill();
    const atKill = { applied: await applied(), queue: await queueCounts(sqs, queue.url) };
    expect(killed.signal).toBe("SIGKILL");
    expect(groupAlive(first.pid)).toBe(false);
    expect(first.stdout()).not.toMatch(/\bstopped\b/);
    expect(atKill.applied).toBeLessThan(jobs.length);
    console.log(
      `e2e: SIGKILL with ${atKill.applied} of ${jobs.length} jobs applied; queue ${JSON.stringify(atKill.queue)}`,
    );

    // More load arrives while the stack is down; then it starts again on the same services.
    await sendBatch(sqs, queue.url, secondHalf);
    stack = undefined;
    const second = await startStack(services);
    stack = second;
    expect(awardQueue(second.info).url).toBe(queue.url);
    // The restart set the queue's attributes again: the visibility timeout is 6 × 30 s once more.
    const attributes = await sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: queue.url, AttributeNames: ["VisibilityTimeout"] }),
    );
    expect(attributes.Attributes?.VisibilityTimeout).toBe("180");

    await waitFor("every job to apply", applied, (n) => n === jobs.length, 60_000, 250);
    await waitForEmptyQueue(sqs, queue.url, 60_000);

    // Every job exactly once: no double effect, no lost job, no dead letter, nothing in the backstop.
    const counts = await sql.query<{ job_id: string; ledger: number; fences: number }>(
      `SELECT j.job_id,
              (SELECT count(*)::int FROM award_points.ledger l WHERE l.job_id = j.job_id) AS ledger,
              (SELECT count(*)::int FROM core.processed_jobs f WHERE f.job_id = j.job_id) AS fences
         FROM unnest($1::text[]) AS j(job_id)
        ORDER BY j.job_id`,
      [jobs.map((j) => j.id)],
    );
    const wrong = counts.rows.filter((r) => r.ledger !== 1 || r.fences !== 1);
    expect(wrong).toEqual([]);
    expect(counts.rows).toHaveLength(jobs.length);
    const dead = await sql.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM core.dead_letters WHERE job_id LIKE 'load-%'",
    );
    expect(dead.rows[0]?.n).toBe(0);
    expect(await queueCounts(sqs, queue.backstopUrl)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });

    // And the balances add up to each job's points once.
    const expected = new Map<string, number>();
    for (const job of jobs) expected.set(job.user, (expected.get(job.user) ?? 0) + job.points);
    const balances = await sql.query<{ user_id: string; balance: string }>(
      "SELECT user_id, balance FROM award_points.balances WHERE user_id LIKE 'load-user-%' ORDER BY user_id",
    );
    expect(Object.fromEntries(balances.rows.map((r) => [r.user_id, Number(r.balance)]))).toEqual(
      Object.fromEntries([...expected.entries()].sort()),
    );

    // And each job told notify-user once: what the kill left in the outbox (committed, not yet
    // relayed) the stack's scheduled relay sends once it is due, 30 s after it was written. The
    // test makes those rows due now, as if the 30 s had passed, rather than wait them out (that a
    // new row waits is test/integration/outbox.test.ts's): the scheduled relay still finds them.
    const waiting = await sql.query(
      "UPDATE core.outbox SET next_attempt_at = now() WHERE parent_job_id LIKE 'load-%' AND next_attempt_at > now()",
    );
    console.log(`e2e: ${waiting.rowCount} follow-up(s) left in the outbox for the scheduled relay`);
    await waitFor(
      "every job's notification",
      () => notificationsOf(jobs.map((j) => j.id)),
      (n) => n === jobs.length,
      60_000,
      500,
    );
    // A row whose send the kill cut off before its DELETE is sent again once due, and the
    // target's fence absorbs it: the outbox empties, and each job still has one notification.
    const outboxLeft = async () =>
      (await sql.query("SELECT 1 FROM core.outbox WHERE parent_job_id LIKE 'load-%'")).rowCount ?? 0;
    await waitFor("the outbox to empty", outboxLeft, (n) => n === 0, 60_000, 500);
    expect(await notificationsOf(jobs.map((j) => j.id))).toBe(jobs.length);
  });

  it("stops on SIGINT to its node process, promptly and without leaving a process", {
    timeout: LONG,
  }, async () => {
    const s = running();
    const node = await stackNodePid(s.pid);
    expect(node, "the stack's node process in npm's process group").toEqual(expect.any(Number));
    if (node === undefined) return;
    process.kill(node, "SIGINT");
    const exit = await Promise.race([s.exited, sleep(20_000).then(() => "still running")]);
    expect(exit, "npm start after its node process got SIGINT").toEqual({ code: 0, signal: null });
    const stopped = await s.stop(10_000); // waits for the group and the pipes; SIGKILL if anything is left
    stack = undefined;
    expect(stopped.forced, "had to be SIGKILLed").toBe(false);
    expect(s.stdout()).toMatch(/stopping\s+\(SIGINT\)/);
    expect(s.stdout()).toMatch(/\bstopped\b/);
    expect(s.stderr()).toBe("");
    expect(groupAlive(s.pid)).toBe(false);
  });

  it("stops on Ctrl-C (SIGINT to the whole process group), promptly and without leaving a process", {
    timeout: LONG,
  }, async () => {
    const s = await startStack(services);
    stack = s;
    const exit = await s.stop(20_000);
    stack = undefined;
    expect(exit.forced, "had to be SIGKILLed").toBe(false);
    expect(s.stdout()).toMatch(/stopping\s+\(SIGINT\)/);
    expect(s.stderr()).toBe("");
    expect(groupAlive(s.pid)).toBe(false);
  });
});
