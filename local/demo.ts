/**
 * `npm run demo`: drives a running local stack through everything jobfence does, only through the
 * SQS API, HTTP and SQL, and prints what happened. A realistic mix: unique jobs, duplicates,
 * poison messages, jobs that fail transiently (a lock they need is held) and then succeed, a job
 * that exhausts its retries; then one replay and one discard through the dead-letter API. Every
 * applied award's follow-up makes notify-user email the user through the stack's fake provider;
 * the first email's answer is lost on the way (the provider sends it and never answers), and the
 * provider's ledger shows that the step's retry, under the same key, sent no second email.
 */
import { GetQueueAttributesCommand, SendMessageBatchCommand } from "@aws-sdk/client-sqs";
import pg from "pg";
import type { LedgerEntry, RequestEntry } from "../testing/fake-provider.ts";
import { localSqsClient } from "./aws-clients.ts";
import type { StackInfo, StackStats } from "./stack.ts";

/** What the demo needs to know about the stack. */
export interface DemoOptions {
  readonly info: StackInfo;
  /** Reads the stack's outcome counts (stats.json). */
  readonly readStats: () => Promise<StackStats>;
  readonly say: (line: string) => void;
  /** How long the exhausting job's lock is held; must outlast its whole retry window. @default 60000 */
  readonly exhaustLockMs?: number;
  /** How long the transient jobs' lock is held. @default 6000 */
  readonly transientLockMs?: number;
  /** Gives up waiting for the stack after this long. @default 180000 */
  readonly timeoutMs?: number;
}

/** The demo's findings, also printed. */
export interface DemoSummary {
  readonly sent: number;
  readonly effects: number;
  readonly duplicatesSkipped: number;
  readonly retries: number;
  readonly deadLetters: Record<string, number>;
  readonly replayed: { id: string; status: string };
  readonly discarded: { id: string; status: string };
  /** notify-user's notifications of the run's awards: each award's follow-up, applied once. */
  readonly notifications: number;
  /** What the provider's ledger shows of the run's emails. */
  readonly emails: EmailFindings;
}

/** The run's emails, as the provider's ledger shows them. */
export interface EmailFindings {
  /** Emails the provider sent to the run's users. */
  readonly sent: number;
  /** Notifications whose recorded message id is one of those emails. */
  readonly matchingNotifications: number;
  /** The email whose answer was lost: its key, the requests made with it, and the emails sent under it. */
  readonly lostAnswer: { key: string; requests: string[]; emails: number } | undefined;
}

const CONSUMER = "award-points";

export async function runDemo(options: DemoOptions): Promise<DemoSummary> {
  const { info, say } = options;
  const queue = info.queues[CONSUMER];
  if (!queue) throw new Error(`the stack runs no ${CONSUMER} consumer`);
  const run = `demo-${Date.now().toString(36)}`;
  const sqs = localSqsClient(info.sqsEndpoint);
  const db = new pg.Client({ connectionString: info.databaseUrl });
  await db.connect();
  try {
    const before = await options.readStats();
    const started = (await db.query<{ now: Date }>("SELECT now() AS now")).rows[0]?.now ?? new Date();

    // Two users whose balance rows the demo will lock, so their awards wait and time out.
    const lockedA = `${run}-locked-a`;
    const lockedB = `${run}-locked-b`;
    await db.query(
      `INSERT INTO award_points.balances (tenant_id, user_id, balance) VALUES ('t_demo', $1, 0), ('t_demo', $2, 0)`,
      [lockedA, lockedB],
    );
    const holdLock = async (userId: string, ms: number) => {
      const holder = new pg.Client({ connectionString: info.databaseUrl });
      await holder.connect();
      await holder.query("BEGIN");
      await holder.query(
        "SELECT 1 FROM award_points.balances WHERE tenant_id = 't_demo' AND user_id = $1 FOR UPDATE",
        [userId],
      );
      return new Promise<void>((resolve) =>
        setTimeout(() => {
          holder
            .query("COMMIT")
            .finally(() => holder.end())
            .then(
              () => resolve(),
              () => resolve(),
            );
        }, ms),
      );
    };
    // The next email's answer is lost: the provider sends it, then never answers. notify-user's step
    // gives up waiting, the job retries, and the retry calls again with the same key.
    await provider(info, "POST", "/_fake/faults", { path: "/v1/emails", mode: "hang", act: true });
    const lockA = holdLock(lockedA, options.transientLockMs ?? 6000);
    const lockB = holdLock(lockedB, options.exhaustLockMs ?? 60_000);

    const envelope = (job: string, user: string, points: number) =>
      JSON.stringify({
        job_id: `${run}-${job}`,
        tenant_id: "t_demo",
        correlation_id: `${run}-corr-${job}`,
        payload: { user_id: user, points },
      });
    const bodies: string[] = [];
    for (let i = 0; i < 20; i++) bodies.push(envelope(`award-${i}`, `${run}-user-${i % 5}`, 10 + i));
    for (let i = 0; i < 5; i++) bodies.push(envelope(`award-${i}`, `${run}-user-${i % 5}`, 10 + i)); // duplicates
    bodies.push("this is not JSON");
    bodies.push(envelope("negative", `${run}-user-0`, -3)); // schema-invalid payload
    bodies.push(JSON.stringify({ tenant_id: "t_demo", payload: { user_id: "x", points: 1 } })); // no job_id
    bodies.push(envelope("transient-1", lockedA, 5));
    bodies.push(envelope("transient-2", lockedA, 7));
    bodies.push(envelope("exhaust", lockedB, 9));
    for (let i = 0; i < bodies.length; i += 10) {
      await sqs.send(
        new SendMessageBatchCommand({
          QueueUrl: queue.url,
          Entries: bodies.slice(i, i + 10).map((body, j) => ({ Id: String(j), MessageBody: body })),
        }),
      );
    }
    say(
      `sent ${bodies.length} messages to ${queue.url}: 20 unique awards, 5 duplicates, 3 poison, 2 that will wait on a lock, 1 that will exhaust`,
    );

    const deadline = Date.now() + (options.timeoutMs ?? 180_000);
    const settled = async () => {
      const { rows } = await db.query<{ fenced: number; dead: number }>(
        `SELECT (SELECT count(*)::int FROM core.processed_jobs WHERE job_id LIKE $1) AS fenced,
                (SELECT count(*)::int FROM core.dead_letters WHERE consumer = $2 AND created_at >= $3) AS dead`,
        [`${run}-%`, CONSUMER, started],
      );
      return rows[0] ?? { fenced: 0, dead: 0 };
    };
    // 22 jobs apply (20 unique + 2 that waited on a lock); 4 dead letters: 3 poison, 1 exhausted.
    let state = await settled();
    let lastLine = "";
    while (state.fenced < 22 || state.dead < 4) {
      if (Date.now() > deadline)
        throw new Error(`the stack did not finish in time: ${JSON.stringify(state)}`);
      const line = `waiting: ${state.fenced} of 22 jobs applied, ${state.dead} of 4 dead letters (the exhausting job retries for about a minute)`;
      if (line !== lastLine) say(line);
      lastLine = line;
      await new Promise((r) => setTimeout(r, 1000));
      state = await settled();
    }
    await lockA;
    await waitForEmptyQueue(sqs, queue.url, deadline);

    const effects = await db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM award_points.ledger WHERE job_id LIKE $1",
      [`${run}-%`],
    );
    const deadLetters = await db.query<{ error_kind: string; n: number }>(
      `SELECT error_kind, count(*)::int AS n FROM core.dead_letters
        WHERE consumer = $1 AND created_at >= $2
        GROUP BY error_kind ORDER BY error_kind`,
      [CONSUMER, started],
    );
    const after = await options.readStats();
    const delta = (key: string) => (after[CONSUMER]?.[key] ?? 0) - (before[CONSUMER]?.[key] ?? 0);
    const byKind = Object.fromEntries(deadLetters.rows.map((r) => [r.error_kind, r.n]));
    say(
      `effects: ${effects.rows[0]?.n} ledger entries for 22 distinct jobs (the 5 duplicates applied nothing)`,
    );
    say(`duplicates skipped: ${delta("duplicate")}, retries scheduled: ${delta("retry")}`);
    // Each applied award told notify-user through the outbox: one notification per award, under
    // the award's correlation id, however often its follow-up was sent.
    const notifications = await waitForNotifications(db, run, 22, deadline);
    say(
      `follow-ups: ${notifications} notifications in notify-user for the 22 applied awards (sent through award-points' outbox after each COMMIT, each applied once)`,
    );
    const emailsBefore = await emailFindings(info, db, run);
    say(
      `emails: ${emailsBefore.sent} sent through the provider for ${notifications} notifications, each recorded with its own message id (${emailsBefore.matchingNotifications} match the ledger)`,
    );
    if (emailsBefore.lostAnswer) {
      const lost = emailsBefore.lostAnswer;
      say(
        `a lost answer: the provider sent the email under key ${lost.key} and never answered; the step gave up, and the job's retry called again with the same key: ${lost.requests.join(" → ")}, ${lost.emails} email sent`,
      );
    }
    say(
      `dead letters: ${Object.entries(byKind)
        .map(([k, n]) => `${n} ${k}`)
        .join(", ")}`,
    );

    // Replay the exhausted job once its lock is gone, and discard the schema-invalid one.
    await lockB;
    const exhausted = await db.query<{ id: string }>("SELECT id FROM core.dead_letters WHERE job_id = $1", [
      `${run}-exhaust`,
    ]);
    const negative = await db.query<{ id: string }>("SELECT id FROM core.dead_letters WHERE job_id = $1", [
      `${run}-negative`,
    ]);
    const call = async (path: string, body: unknown) => {
      const response = await fetch(`${info.apiUrl}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${info.tokens.admin}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      const json = (await response.json()) as { status: string; id: string };
      if (!response.ok) throw new Error(`${path}: ${response.status} ${JSON.stringify(json)}`);
      return json;
    };
    const replayed = await call(`/v1/core/dead-letters/${exhausted.rows[0]?.id}/replay`, {});
    say(`replayed dead letter ${replayed.id} (${run}-exhaust) through the API: ${replayed.status}`);
    const discarded = await call(`/v1/core/dead-letters/${negative.rows[0]?.id}/discard`, {
      reason: "demo: negative points are a producer bug",
    });
    say(`discarded dead letter ${discarded.id} (${run}-negative) with a reason: ${discarded.status}`);
    while (
      (await db.query("SELECT 1 FROM core.processed_jobs WHERE job_id = $1", [`${run}-exhaust`])).rowCount ===
      0
    ) {
      if (Date.now() > deadline) throw new Error("the replayed job was not applied in time");
      await new Promise((r) => setTimeout(r, 500));
    }
    const replayEffect = await db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM award_points.ledger WHERE job_id = $1",
      [`${run}-exhaust`],
    );
    say(`the replayed job applied exactly once: ${replayEffect.rows[0]?.n} ledger entry`);
    const chained = await waitForNotifications(db, run, 23, deadline);
    say(`and told notify-user once more: ${chained} notifications in all`);
    const emails = await emailFindings(info, db, run);
    say(`the provider's ledger: ${emails.sent} emails to the run's users, one per notification`);

    return {
      sent: bodies.length,
      effects: effects.rows[0]?.n ?? 0,
      duplicatesSkipped: delta("duplicate"),
      retries: delta("retry"),
      deadLetters: byKind,
      replayed,
      discarded,
      notifications: chained,
      emails,
    };
  } finally {
    await db.end();
  }
}

/** Calls the stack's fake provider; its JSON answer. */
async function provider(
  info: StackInfo,
  method: "GET" | "POST",
  path: string,
  body?: unknown,
): Promise<unknown> {
  const response = await fetch(`${info.providerUrl}${path}`, {
    method,
    ...(body === undefined
      ? {}
      : { headers: { "content-type": "application/json" }, body: JSON.stringify(body) }),
  });
  const json = (await response.json()) as unknown;
  if (!response.ok)
    throw new Error(`the fake provider: ${method} ${path}: ${response.status} ${JSON.stringify(json)}`);
  return json;
}

/**
 * What the provider's ledger shows of the run's emails (those to its users), and whether the
 * notifications recorded them: each notification's message id is one of the emails, none twice.
 */
async function emailFindings(info: StackInfo, db: pg.Client, run: string): Promise<EmailFindings> {
  const ledger = (await provider(info, "GET", "/_fake/ledger")) as {
    entries: LedgerEntry[];
    requests: RequestEntry[];
  };
  const emails = ledger.entries.filter(
    (e) => e.kind === "email" && String((e.request as { to?: unknown }).to).startsWith(`${run}-`),
  );
  const ids = new Set(emails.map((e) => e.id));
  const { rows } = await db.query<{ id: string | null }>(
    `SELECT provider_message_id AS id FROM notify_user.notifications WHERE starts_with(correlation_id, $1)`,
    [`${run}-corr-`],
  );
  const recorded = rows.map((r) => r.id).filter((id): id is string => id !== null && ids.has(id));
  const keys = new Set(emails.map((e) => e.key));
  const hung = ledger.requests.find((r) => r.outcome === "hung" && r.key !== null && keys.has(r.key));
  return {
    sent: emails.length,
    // The column is unique: no two notifications record one email.
    matchingNotifications: recorded.length,
    lostAnswer: hung?.key
      ? {
          key: hung.key,
          requests: ledger.requests.filter((r) => r.key === hung.key).map((r) => r.outcome),
          emails: emails.filter((e) => e.key === hung.key).length,
        }
      : undefined,
  };
}

/** notify-user's notifications of the run's chains, once there are `expected` of them (never more). */
async function waitForNotifications(
  db: pg.Client,
  run: string,
  expected: number,
  deadline: number,
): Promise<number> {
  for (;;) {
    const { rows } = await db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM notify_user.notifications WHERE starts_with(correlation_id, $1)",
      [`${run}-corr-`],
    );
    const n = rows[0]?.n ?? 0;
    if (n >= expected) return n;
    if (Date.now() > deadline) throw new Error(`notify-user applied ${n} of ${expected} follow-ups in time`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

async function waitForEmptyQueue(
  sqs: ReturnType<typeof localSqsClient>,
  url: string,
  deadline: number,
): Promise<void> {
  for (;;) {
    const { Attributes: a = {} } = await sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl: url,
        AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
      }),
    );
    if (Number(a.ApproximateNumberOfMessages) + Number(a.ApproximateNumberOfMessagesNotVisible) === 0) return;
    if (Date.now() > deadline) throw new Error("the queue did not drain in time");
    await new Promise((r) => setTimeout(r, 500));
  }
}
