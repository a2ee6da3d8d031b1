/**
 * The parent's side of the crash matrix: spawning the child and reading how it died, the restart
 * (a normal consumer draining the queue), and reading back what became of every job.
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { SQSClient } from "@aws-sdk/client-sqs";
import type { Context } from "aws-lambda";
import type pg from "pg";
import { notifyUserConsumer } from "../../../functions/notify-user/consumer.ts";
import { localEventBridgeClient } from "../../../local/aws-clients.ts";
import { pollOnce } from "../../../local/event-source.ts";
import { lambdaContext } from "../../../local/lambda-context.ts";
import { type CommitMode, createConsumer } from "../../../shared/consumer.ts";
import { createPool } from "../../../shared/db/pool.ts";
import { consumerRoleName } from "../../../shared/db/queries/provision-login.ts";
import { deriveJobId } from "../../../shared/producer/job-id.ts";
import type { TestDatabase } from "../../support/database.ts";
import { queueDepth } from "../../support/sqs.ts";
import {
  CRASH_CHILD_ENV,
  CRASH_MARK,
  CRASH_RETRY_POLICY,
  type CrashChildConfig,
  type CrashReport,
  crashConsumer,
} from "./crash-consumer.ts";

const CHILD = fileURLToPath(new URL("./crash-child.ts", import.meta.url));

/** How the child ended. */
export interface ChildEnd {
  readonly signal: NodeJS.Signals | null;
  readonly code: number | null;
  /** The mark line it printed before dying, if any. */
  readonly report: CrashReport | undefined;
  /** Everything it wrote, for the failure message. */
  readonly output: string;
}

/**
 * Runs the crash child with the repository's Node (vitest's own `process.execPath`) until it dies.
 * A child still alive after `timeoutMs` is killed by us, which the caller sees as no report.
 */
export function runCrashChild(config: CrashChildConfig, timeoutMs = 30_000): Promise<ChildEnd> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CHILD], {
      env: { ...process.env, [CRASH_CHILD_ENV]: JSON.stringify(config) },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      output += d.toString();
    });
    const timer = setTimeout(() => {
      output += `\n[parent] no end after ${timeoutMs} ms: killed\n`;
      child.kill("SIGKILL");
    }, timeoutMs);
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      const line = output.split("\n").find((l) => l.startsWith(CRASH_MARK));
      const report = line ? (JSON.parse(line.slice(CRASH_MARK.length)) as CrashReport) : undefined;
      resolve({ code, signal, report, output });
    });
  });
}

/** What the restart's drain did. */
export interface DrainResult {
  /** Records received, redeliveries of what the dead child held included. */
  readonly received: number;
  /** Records the consumer reported as failures (left for another delivery). */
  readonly failed: number;
  readonly polls: number;
  /** Every record received, in order: its body and its ApproximateReceiveCount. */
  readonly records: ReadonlyArray<{ readonly body: string; readonly receiveCount: string }>;
}

/** Where the restart's consumer runs. */
export interface DrainTarget {
  readonly databaseUrl: string;
  readonly sqs: SQSClient;
  readonly eventBridgeEndpoint: string;
  readonly queueUrl: string;
  readonly queueArn: string;
  /** Where award-points' follow-ups to notify-user go. */
  readonly followUpQueueUrl: string;
  readonly commitMode: CommitMode;
  readonly applicationName: string;
  /** Which consumer of the chain drains the queue. @default "award-points" (the crash consumer) */
  readonly consumer?: "award-points" | "notify-user";
}

/**
 * "Restart": a normal consumer (no fault hook: this process never installs one) polls the queue
 * until the queue holds nothing, visible or in flight. Messages the dead child had received come
 * back once their 1 s visibility lapses. Bounded by `deadlineMs`: a queue that does not drain is a
 * failure (a message stuck, or failing forever), reported with what was seen.
 */
export async function drainQueue(target: DrainTarget, deadlineMs = 20_000): Promise<DrainResult> {
  const consumer = target.consumer ?? "award-points";
  const pool = createPool({
    connectionString: target.databaseUrl,
    role: consumerRoleName(consumer),
    max: 2,
    applicationName: target.applicationName,
  });
  try {
    const config = {
      databaseUrl: target.databaseUrl,
      opsBusName: "jobfence-ops-test",
      queueUrl: target.queueUrl,
    };
    const runtime = {
      pool,
      sqs: target.sqs,
      eventBridge: localEventBridgeClient(target.eventBridgeEndpoint),
      retryPolicy: CRASH_RETRY_POLICY,
    };
    const handler =
      consumer === "notify-user"
        ? createConsumer({ ...notifyUserConsumer, commitMode: target.commitMode }, { ...runtime, config })
        : createConsumer(
            { ...crashConsumer, commitMode: target.commitMode },
            { ...runtime, config: { ...config, outboxQueues: { "notify-user": target.followUpQueueUrl } } },
          );
    const source = { sqs: target.sqs, queueUrl: target.queueUrl, queueArn: target.queueArn, waitSeconds: 1 };
    const context: Context = lambdaContext(consumer);
    const stopAt = Date.now() + deadlineMs;
    let received = 0;
    let failed = 0;
    let polls = 0;
    const records: Array<{ body: string; receiveCount: string }> = [];
    while (Date.now() < stopAt) {
      // Depth first: an empty queue ends the drain without waiting out a long poll.
      if ((await queueDepth(target.sqs, target.queueUrl)) === 0) return { received, failed, polls, records };
      const delivered = await pollOnce(source, handler, context);
      polls++;
      received += delivered.received.length;
      failed += delivered.failedIds.length;
      for (const r of delivered.received) {
        records.push({ body: r.body, receiveCount: r.attributes.ApproximateReceiveCount });
      }
    }
    throw new Error(
      `queue ${target.queueUrl} did not drain within ${deadlineMs} ms: ` +
        `${await queueDepth(target.sqs, target.queueUrl)} message(s) left after ${polls} polls ` +
        `(${received} received, ${failed} failed)`,
    );
  } finally {
    await pool.end();
  }
}

/**
 * Waits until the server holds no session of `applicationName` any more: a SIGKILLed client's
 * sessions must end by themselves (their transactions rolled back, their locks released), never
 * linger idle in transaction. Returns the sessions still there at the deadline.
 */
export async function sessionsLeftBy(
  db: TestDatabase,
  applicationName: string,
  deadlineMs = 5_000,
): Promise<Array<{ pid: number; state: string | null }>> {
  const stopAt = Date.now() + deadlineMs;
  for (;;) {
    const left = await db.withClient(async (c) => {
      const { rows } = await c.query<{ pid: number; state: string | null }>(
        "SELECT pid, state FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1",
        [applicationName],
      );
      return rows;
    });
    if (left.length === 0 || Date.now() >= stopAt) return left;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Sessions of the database idle inside a transaction. */
export async function idleInTransaction(db: TestDatabase): Promise<number> {
  return db.withClient(async (c) => {
    const { rows } = await c.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND state LIKE 'idle in transaction%'`,
    );
    return rows[0]?.n ?? 0;
  });
}

/** One job's traces after the restart. */
export interface CrashFate {
  readonly job_id: string;
  /** award_points.ledger rows: the effect count. */
  readonly ledger: number;
  readonly fences: number;
  /** Dead letters still pending_review. */
  readonly pending: number;
  /** Dead letters in any status. */
  readonly dead_letters: number;
  /** Status of each dead letter, oldest first. */
  readonly statuses: string[];
  /** error_kind of each dead letter, oldest first. */
  readonly kinds: string[];
}

export async function crashFates(client: pg.ClientBase, jobIds: readonly string[]): Promise<CrashFate[]> {
  const { rows } = await client.query<CrashFate>(
    `SELECT j.job_id,
            (SELECT count(*)::int FROM award_points.ledger l WHERE l.job_id = j.job_id) AS ledger,
            (SELECT count(*)::int FROM core.processed_jobs f
              WHERE f.job_id = j.job_id AND f.consumer_id = core.consumer_id('award-points')) AS fences,
            (SELECT count(*)::int FROM core.dead_letters d
              WHERE d.job_id = j.job_id AND d.consumer = 'award-points' AND d.status = 'pending_review') AS pending,
            (SELECT count(*)::int FROM core.dead_letters d
              WHERE d.job_id = j.job_id AND d.consumer = 'award-points') AS dead_letters,
            (SELECT coalesce(json_agg(d.status ORDER BY d.created_at), '[]'::json) FROM core.dead_letters d
              WHERE d.job_id = j.job_id AND d.consumer = 'award-points') AS statuses,
            (SELECT coalesce(json_agg(d.error_kind ORDER BY d.created_at), '[]'::json) FROM core.dead_letters d
              WHERE d.job_id = j.job_id AND d.consumer = 'award-points') AS kinds
       FROM unnest($1::text[]) AS j(job_id)
      ORDER BY j.job_id`,
    [jobIds],
  );
  return rows;
}

/**
 * The invariant for one job: at most one effect, and either applied once (effect and
 * fence, no pending dead letter) or not applied with exactly one pending dead letter.
 */
export function holdsInvariant(fate: CrashFate): boolean {
  const appliedOnce = fate.ledger === 1 && fate.fences === 1 && fate.pending === 0;
  const deadLetteredOnce = fate.ledger === 0 && fate.fences === 0 && fate.pending === 1;
  return fate.ledger <= 1 && (appliedOnce || deadLetteredOnce);
}

/** The job id of the follow-up award-points' work sends notify-user for award `jobId`. */
export function notificationJobId(jobId: string): string {
  return deriveJobId("notify-user", "award-points", jobId, 0);
}

/** What became downstream of one award: its follow-up's outbox row, fence and effect in notify-user. */
export interface FollowUpFate {
  readonly job_id: string;
  /** award-points' ledger entries of the award (1: applied). */
  readonly ledger: number;
  /** The follow-up's row still in award-points' outbox. */
  readonly outbox: number;
  /** notify-user's fences and notifications of the follow-up. */
  readonly fences: number;
  readonly notifications: number;
  /** notify-user's dead letters of the follow-up. */
  readonly dead_letters: number;
}

export async function followUpFates(
  client: pg.ClientBase,
  jobIds: readonly string[],
): Promise<FollowUpFate[]> {
  const { rows } = await client.query<FollowUpFate>(
    `SELECT j.job_id,
            (SELECT count(*)::int FROM award_points.ledger l WHERE l.job_id = j.job_id) AS ledger,
            (SELECT count(*)::int FROM core.outbox o WHERE o.target = 'notify-user' AND o.job_id = j.follow_up) AS outbox,
            (SELECT count(*)::int FROM core.processed_jobs f
              WHERE f.job_id = j.follow_up AND f.consumer_id = core.consumer_id('notify-user')) AS fences,
            (SELECT count(*)::int FROM notify_user.notifications n WHERE n.job_id = j.follow_up) AS notifications,
            (SELECT count(*)::int FROM core.dead_letters d
              WHERE d.job_id = j.follow_up AND d.consumer = 'notify-user') AS dead_letters
       FROM unnest($1::text[], $2::text[]) AS j(job_id, follow_up)
      ORDER BY j.job_id`,
    [jobIds, jobIds.map(notificationJobId)],
  );
  return rows;
}

/**
 * The outbox's invariant for one award, once every relay has run: applied, its follow-up applied
 * once downstream and gone from the outbox; not applied, no follow-up anywhere.
 */
export function followUpSettled(fate: FollowUpFate): boolean {
  if (fate.ledger === 1)
    return fate.outbox === 0 && fate.fences === 1 && fate.notifications === 1 && fate.dead_letters === 0;
  return fate.outbox === 0 && fate.fences === 0 && fate.notifications === 0;
}

/**
 * Before the scheduled relay has run: an applied award's follow-up is either applied downstream or
 * still in the outbox (never neither: that is a loss), and never both applied and left behind twice.
 */
export function followUpAccountedFor(fate: FollowUpFate): boolean {
  if (fate.ledger !== 1) return fate.outbox === 0 && fate.notifications === 0;
  return fate.notifications <= 1 && fate.outbox <= 1 && fate.notifications + fate.outbox >= 1;
}
