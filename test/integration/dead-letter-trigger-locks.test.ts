/**
 * What the dead-letter insert triggers lock, as the real logins. A consumer's INSERT in another
 * consumer's name is refused before any trigger reads or locks that consumer's rows (migration
 * 0026): no lock wait tells it that another consumer holds a fence or has a dead letter of a
 * guessed body being replayed. And the replay link (0025) never turns two failures written at once
 * into a refused write, nor deadlocks with a bulk operation locking the same rows.
 */
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type DeadLetterDraft, insertDeadLetter } from "../../shared/db/queries/insert-dead-letter.ts";
import { registerConsumerQueues } from "../../shared/db/queries/provision-login.ts";
import { storedBody } from "../../shared/db/stored-body.ts";
import { ConsumerLogins } from "../support/consumer-logins.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { insertFence } from "../support/fixtures.ts";

const A = "award-points";
const B = "notify-user";
const queueOf = (consumer: string) => `https://sqs.eu-west-1.amazonaws.com/123456789012/${consumer}`;
/** Long enough that a wait would show: every refusal here must come at once. */
const WAIT_BOUND_MS = 2000;

let db: TestDatabase;
let admin: pg.Client;
let logins: ConsumerLogins;
/** The migrator's sessions besides `admin`. */
const clients: pg.Client[] = [];

/** The id of a dead letter just recorded. */
function idOf(recorded: Awaited<ReturnType<typeof insertDeadLetter>>): string {
  if (!("id" in recorded)) throw new Error("the dead letter was not recorded");
  return recorded.id;
}

/** A session of `consumer`'s own login (provisioned as the deployment does). */
const loginOf = (consumer: string) => logins.connect(consumer);

/** A session of the migrator's, for what an operator's replay or the cleanup holds. */
async function migrator(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  clients.push(client);
  return client;
}

const unreadable = (consumer: string, messageId: string, body = "not json at all"): DeadLetterDraft => ({
  jobId: messageId,
  consumer,
  queue: queueOf(consumer),
  tenantId: null,
  correlationId: messageId,
  body: storedBody(body),
  payloadJson: null,
  messageAttributes: { message_id: messageId },
  attempts: 1,
  attemptHistory: [],
  errorKind: "poison",
  lastError: { class: "PoisonMessageError", message: "unreadable" },
  jobFingerprint: null,
  fenceFingerprint: null,
  checkFence: false,
});

const INSERT = `INSERT INTO core.dead_letters (job_id, consumer, queue, attempts, error_kind, last_error, correlation_id, body_form, body, message_attributes)
  VALUES ($1, $2, $3, 1, coalesce($6, 'hard'), '{"class":"E","message":"m"}', 'c', 'text', $4, $5::jsonb) RETURNING id`;

/** How an INSERT by `client` of a dead letter of `kind` ends, and how long it took. */
async function attempt(
  client: pg.Client,
  params: unknown[],
  kind = "hard",
): Promise<{ code: string; ms: number }> {
  const started = Date.now();
  try {
    await client.query(INSERT, [...params, kind]);
    return { code: "inserted", ms: Date.now() - started };
  } catch (error) {
    return { code: String((error as { code?: unknown }).code), ms: Date.now() - started };
  }
}

beforeAll(async () => {
  db = await createTestDatabase();
  admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  logins = new ConsumerLogins(admin, db.url, "jft_locks");
  await registerConsumerQueues(admin, A, [queueOf(A)]);
  await registerConsumerQueues(admin, B, [queueOf(B)]);
});

afterAll(async () => {
  for (const client of clients) await client.end().catch(() => {});
  await logins?.close();
  await admin?.end();
  await db?.drop();
});

it("refuses another consumer's dead letter at once while that consumer's row is being replayed", async () => {
  const a = await loginOf(A);
  await a.query(`SET lock_timeout = ${WAIT_BOUND_MS}`);
  const secret = '{"job_id":"b:1","payload":{"card":"4111"}}';
  const { rows } = await admin.query(INSERT, ["b:1", B, queueOf(B), secret, "{}", null]);
  const replay = await migrator();
  await replay.query("BEGIN");
  await replay.query("SELECT 1 FROM core.dead_letters WHERE id = $1 FOR UPDATE", [rows[0].id]);
  try {
    const right = await attempt(a, ["b:1", B, queueOf(B), secret, "{}"]);
    const wrong = await attempt(a, [
      "b:1",
      B,
      queueOf(B),
      '{"job_id":"b:1","payload":{"card":"4222"}}',
      "{}",
    ]);
    expect([right.code, wrong.code]).toEqual(["42501", "42501"]);
    expect(right.ms).toBeLessThan(WAIT_BOUND_MS / 2);
    // Filed under a message id (no job id readable): the same, at once.
    const byMessage = await attempt(a, ["m-9", B, queueOf(B), secret, JSON.stringify({ message_id: "m-9" })]);
    expect(byMessage.code).toBe("42501");
    expect(byMessage.ms).toBeLessThan(WAIT_BOUND_MS / 2);
  } finally {
    await replay.query("ROLLBACK");
  }
});

it("refuses another consumer's dead letter at once while that consumer's fence is locked", async () => {
  const a = await loginOf(A);
  await a.query(`SET lock_timeout = ${WAIT_BOUND_MS}`);
  await insertFence(admin, "b:order-42", { consumer: B });
  const cleanup = await migrator();
  await cleanup.query("BEGIN");
  await cleanup.query("SELECT 1 FROM core.processed_jobs WHERE job_id = 'b:order-42' FOR UPDATE");
  try {
    // An `unrecorded` dead letter is checked against the job's fence (migration 0021).
    const existing = await attempt(a, ["b:order-42", B, queueOf(B), "x", "{}"], "unrecorded");
    expect(existing.code).toBe("42501");
    expect(existing.ms).toBeLessThan(WAIT_BOUND_MS / 2);
  } finally {
    await cleanup.query("ROLLBACK");
  }
});

it("links two failures of replayed copies of one unreadable body written at once to two rows, refusing neither", async () => {
  // Two identical unreadable messages dead-lettered, then both replayed (a bulk replay).
  const replayed: string[] = [];
  for (const m of ["r1", "r2"])
    replayed.push(idOf(await insertDeadLetter(admin, unreadable(B, m, "twin body"))));
  for (const id of replayed) {
    await admin.query(
      "UPDATE core.dead_letters SET status = 'replayed', resolved_at = now(), resolved_by = 'ops' WHERE id = $1",
      [id],
    );
  }
  const [first, second] = [await loginOf(B), await loginOf(B)];
  await first.query("BEGIN");
  await insertDeadLetter(first, unreadable(B, "r3", "twin body"));
  await second.query("BEGIN");
  const written = insertDeadLetter(second, unreadable(B, "r4", "twin body")).then(
    () => "written",
    (error: { code?: string }) => `refused ${error.code}`,
  );
  await new Promise((resolve) => setTimeout(resolve, 300));
  await first.query("COMMIT");
  expect(await written).toBe("written");
  await second.query("COMMIT");
  const { rows } = await admin.query<{ replay_of: string | null }>(
    "SELECT replay_of FROM core.dead_letters WHERE job_id IN ('r3', 'r4')",
  );
  expect(rows.map((r) => r.replay_of).sort()).toEqual([...replayed].sort());
});

it("takes the pending rows of an unreadable body in a bulk operation's order: no deadlock with its chunk", async () => {
  const ids: string[] = [];
  for (const m of ["p1", "p2", "p3"])
    ids.push(idOf(await insertDeadLetter(admin, unreadable(B, m, "pending body"))));
  const consumer = await loginOf(B);
  await consumer.query(`SET lock_timeout = ${WAIT_BOUND_MS * 5}`);
  const replay = await migrator();
  const worker = await migrator();
  await worker.query(`SET lock_timeout = ${WAIT_BOUND_MS * 5}`);
  // One replay holds the middle row; a chunk then waits for it, holding the first; a copy fails.
  await replay.query("BEGIN");
  await replay.query("SELECT 1 FROM core.dead_letters WHERE id = $1 FOR UPDATE", [ids[1]]);
  await worker.query("BEGIN");
  const chunk = worker
    .query(
      "SELECT id FROM core.dead_letters WHERE consumer = $1 AND status = 'pending_review' ORDER BY created_at, id FOR UPDATE",
      [B],
    )
    .then(
      (r) => `locked ${r.rowCount}`,
      (error: { code?: string }) => `failed ${error.code}`,
    );
  await new Promise((resolve) => setTimeout(resolve, 200));
  await consumer.query("BEGIN");
  const failure = insertDeadLetter(consumer, unreadable(B, "p4", "pending body")).then(
    () => "written",
    (error: { code?: string }) => `failed ${error.code}`,
  );
  await new Promise((resolve) => setTimeout(resolve, 200));
  await replay.query(
    "UPDATE core.dead_letters SET status = 'replayed', resolved_at = now(), resolved_by = 'ops' WHERE id = $1",
    [ids[1]],
  );
  await replay.query("COMMIT");
  const chunkEnded = await chunk;
  await worker.query("COMMIT");
  const failureEnded = await failure;
  await consumer.query("COMMIT").catch(() => {});
  // Neither is the deadlock's victim (40P01): the chunk locks the rows still pending, the failure is written.
  expect({ chunkEnded, failureEnded }).toEqual({
    chunkEnded: expect.stringMatching(/^locked \d+$/),
    failureEnded: "written",
  });
});
