/**
 * Reliability 6: soak. The local stack as users run it (`npm start`, a child process) on a
 * database and an SQS emulator the test owns, under steady load: new award-points jobs at a fixed
 * rate, some sent twice, some poison, and the dead-letter API read every couple of seconds. Each
 * sample (every minute in the reliability tier) records the stack process's resident memory, its open
 * database connections, the queue's backlog and the work done.
 *
 * Asserted: memory stays flat (no growth with the work done), connections never exceed what the
 * stack's pools allow, the backlog does not grow (the stack keeps up), and after the load stops
 * and the queue drains every job is applied exactly once, every poison message is one dead
 * letter, and the stack stops cleanly.
 */
import { readFile } from "node:fs/promises";
import type { SQSClient } from "@aws-sdk/client-sqs";
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { CONSUMERS } from "../../functions/consumers.ts";
import { localSqsClient } from "../../local/aws-clients.ts";
import { type SqsEmulator, startSqsEmulator } from "../../local/sqs-emulator.ts";
import {
  awardQueue,
  callApi,
  type StackProcess,
  stackNodePid,
  startStack,
  tempLocalDir,
} from "../e2e/support.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { queueCounts, sendBatch } from "../support/sqs.ts";
import { byTier, TEST_TIER } from "../support/tier.ts";
import { reportFigures, tally } from "./support/figures.ts";
import { sleep, waitUntil } from "./support/load.ts";

const DURATION_MS = byTier({ everyday: 10_000, reliability: 10 * 60_000 });
const SAMPLE_EVERY_MS = byTier({ everyday: 2_000, reliability: 60_000 });
/** New jobs per second. */
const RATE = byTier({ everyday: 20, reliability: 40 });
const TICK_MS = 250;
/** Resident memory is also read this often, for each sample's low and high between samples. */
const TRACE_EVERY_MS = byTier({ everyday: 500, reliability: 5_000 });
const TENANT = "t-soak";

/**
 * The most connections the stack may open (local/stack.ts): per consumer, its pool (invocations
 * at once + 1) and its backstop drain's (2); the API's (4) and the cleanup's (1).
 */
const CONNECTION_BUDGET = CONSUMERS.reduce((sum, c) => sum + c.maxConcurrency + 1 + 2, 0) + 4 + 1;

let db: TestDatabase;
let emulator: SqsEmulator;
let localDir: { path: string; remove(): Promise<void> };
let stack: StackProcess | undefined;
let sqs: SQSClient;
let sql: pg.Client;

beforeAll(async () => {
  db = await createTestDatabase();
  emulator = await startSqsEmulator();
  localDir = await tempLocalDir();
  sqs = localSqsClient(emulator.endpoint);
  sql = new pg.Client({ connectionString: db.url });
  await sql.connect();
  stack = await startStack({ databaseUrl: db.url, sqsEndpoint: emulator.endpoint, localDir: localDir.path });
}, 120_000);

afterAll(async () => {
  if (stack) await stack.stop(10_000);
  await sql?.end().catch(() => {});
  sqs?.destroy();
  await emulator?.stop();
  await db?.drop();
  await localDir?.remove();
}, 120_000);

/** Resident memory of a process, in MiB (VmRSS of /proc/<pid>/status). */
async function rssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const kib = Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1]);
  return Math.round((kib / 1024) * 10) / 10;
}

/** One sample of the running stack. */
interface Sample {
  /** Seconds since the load started. */
  readonly t: number;
  readonly rssMiB: number;
  /** The lowest and highest resident memory read (every few seconds) since the previous sample. */
  readonly rssMinMiB: number;
  readonly rssMaxMiB: number;
  readonly dbConnections: number;
  /** Messages visible or in flight on the consumer's queue. */
  readonly backlog: number;
  readonly sent: number;
  readonly applied: number;
}

function envelope(jobId: string, points: number): string {
  return JSON.stringify({
    job_id: jobId,
    tenant_id: TENANT,
    correlation_id: `corr-${jobId}`,
    payload: { user_id: `u-${points % 11}`, points },
  });
}

/** The least-squares slope of `ys` over `xs`. */
function slope(xs: readonly number[], ys: readonly number[]): number {
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    num += ((xs[i] as number) - mx) * ((ys[i] as number) - my);
    den += ((xs[i] as number) - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

it(`the local stack under steady load for ${DURATION_MS / 1000} s: memory and connections flat, every job once`, async () => {
  const running = stack as StackProcess;
  const queue = awardQueue(running.info);
  const pid = await stackNodePid(running.pid);
  expect(pid, "the stack's node process").toBeDefined();
  const nodePid = pid as number;

  const jobs: string[] = [];
  const poison: string[] = [];
  let duplicatesSent = 0;
  let sent = 0;
  const apiStatuses: Record<string, number> = {};
  const samples: Sample[] = [];
  const connections = async () =>
    (
      await sql.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND starts_with(application_name, 'jobfence-local:')`,
      )
    ).rows[0]?.n ?? 0;
  const applied = async () =>
    (
      await sql.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM core.processed_jobs WHERE starts_with(job_id, 'soak-')",
      )
    ).rows[0]?.n ?? 0;
  /** Resident memory read since the previous sample (garbage collection makes it a sawtooth). */
  let trace: number[] = [];
  /** Every reading, with its time: the growth check compares early and late highs. */
  const fullTrace: Array<{ t: number; rssMiB: number }> = [];
  const traceRss = async (startedAt: number) => {
    const rss = await rssMiB(nodePid);
    trace.push(rss);
    fullTrace.push({ t: (Date.now() - startedAt) / 1000, rssMiB: rss });
    return rss;
  };
  const sample = async (startedAt: number) => {
    const counts = await queueCounts(sqs, queue.url);
    const rss = await traceRss(startedAt);
    const between = trace;
    trace = [];
    samples.push({
      t: Math.round((Date.now() - startedAt) / 1000),
      rssMiB: rss,
      rssMinMiB: Math.min(...between),
      rssMaxMiB: Math.max(...between),
      dbConnections: await connections(),
      backlog: counts.visible + counts.inFlight + counts.delayed,
      sent,
      applied: await applied(),
    });
  };

  const startedAt = Date.now();
  await sample(startedAt);
  let nextSample = startedAt + SAMPLE_EVERY_MS;
  let nextTrace = startedAt + TRACE_EVERY_MS;
  let nextApiCall = startedAt;
  let carry = 0;
  while (Date.now() - startedAt < DURATION_MS) {
    const tickStarted = Date.now();
    carry += (RATE * TICK_MS) / 1000;
    const bodies: string[] = [];
    for (; carry >= 1; carry--) {
      const i = jobs.length + poison.length;
      if (i % 50 === 49) {
        const jobId = `soak-poison-${poison.length}`;
        poison.push(jobId);
        bodies.push(
          JSON.stringify({ job_id: jobId, tenant_id: TENANT, payload: { user_id: "u", points: 0 } }),
        );
      } else {
        const jobId = `soak-${jobs.length}`;
        jobs.push(jobId);
        bodies.push(envelope(jobId, (jobs.length % 97) + 1));
      }
      // One in twenty also goes again: a producer's retry or a duplicate delivery.
      if (i % 20 === 7 && jobs.length > 10) {
        const again = jobs.length - 1 - (i % 10);
        bodies.push(envelope(`soak-${again}`, ((again + 1) % 97) + 1));
        duplicatesSent++;
      }
    }
    await sendBatch(sqs, queue.url, bodies);
    sent += bodies.length;
    if (Date.now() >= nextApiCall) {
      nextApiCall += 2000;
      for (const path of [
        "/v1/core/dead-letters/stats",
        "/v1/core/dead-letters?status=pending_review&limit=20",
      ]) {
        const answer = await callApi(running.info, "GET", path, running.info.tokens.read);
        tally(apiStatuses, String(answer.status));
      }
    }
    if (Date.now() >= nextSample) {
      nextSample += SAMPLE_EVERY_MS;
      nextTrace = Date.now() + TRACE_EVERY_MS;
      await sample(startedAt);
    } else if (Date.now() >= nextTrace) {
      nextTrace += TRACE_EVERY_MS;
      await traceRss(startedAt);
    }
    await sleep(Math.max(0, TICK_MS - (Date.now() - tickStarted)));
  }
  await sample(startedAt);
  const loadMs = Date.now() - startedAt;

  // Drain: every job fenced, every poison message dead-lettered, the queue empty.
  await waitUntil(
    "the soak load to drain",
    async () => ({
      applied: await applied(),
      deadLetters: (
        await sql.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM core.dead_letters WHERE starts_with(job_id, 'soak-poison-')",
        )
      ).rows[0]?.n,
      queue: await queueCounts(sqs, queue.url),
    }),
    (v) =>
      v.applied === jobs.length &&
      v.deadLetters === poison.length &&
      v.queue.visible + v.queue.inFlight + v.queue.delayed === 0,
    byTier({ everyday: 60_000, reliability: 180_000 }),
  );
  const { rows: effects } = await sql.query<{
    ledger: number;
    doubles: number;
    jobs: number;
    balance: string;
  }>(
    `SELECT (SELECT count(*)::int FROM award_points.ledger WHERE tenant_id = $1) AS ledger,
            (SELECT count(*)::int FROM (SELECT job_id FROM award_points.ledger WHERE tenant_id = $1
                                          GROUP BY job_id HAVING count(*) > 1) d) AS doubles,
            (SELECT count(DISTINCT job_id)::int FROM award_points.ledger WHERE tenant_id = $1) AS jobs,
            (SELECT coalesce(sum(balance), 0)::text FROM award_points.balances WHERE tenant_id = $1) AS balance`,
    [TENANT],
  );
  const effect = effects[0] as { ledger: number; doubles: number; jobs: number; balance: string };
  const expectedBalance = jobs.reduce((sum, _, k) => sum + (((k + 1) % 97) + 1), 0);
  const poisonRows = await sql.query<{ job_id: string; error_kind: string; status: string }>(
    "SELECT job_id, error_kind, status FROM core.dead_letters WHERE starts_with(job_id, 'soak-poison-')",
  );
  const stopped = await running.stop(20_000);
  stack = undefined;

  // Memory, after the first minute (half of the bounded run) of warm-up. Garbage collection makes
  // resident memory a sawtooth, so flat means: the highs of the last third of the run no higher
  // than those before, give or take a tenth.
  const warmUpSeconds = Math.min(60, DURATION_MS / 2000);
  const warm = samples.filter((s) => s.t >= warmUpSeconds);
  const rss = warm.map((s) => s.rssMiB);
  const rssSlopePerMinute =
    Math.round(
      slope(
        warm.map((s) => s.t / 60),
        rss,
      ) * 100,
    ) / 100;
  const lateFrom = warmUpSeconds + ((DURATION_MS / 1000 - warmUpSeconds) * 2) / 3;
  const warmTrace = fullTrace.filter((r) => r.t >= warmUpSeconds);
  const earlyHigh = Math.max(...warmTrace.filter((r) => r.t < lateFrom).map((r) => r.rssMiB));
  const lateHigh = Math.max(...warmTrace.filter((r) => r.t >= lateFrom).map((r) => r.rssMiB));
  const figures = {
    durationSeconds: Math.round(loadMs / 1000),
    ratePerSecond: RATE,
    sampleEverySeconds: SAMPLE_EVERY_MS / 1000,
    samples,
    connectionBudget: CONNECTION_BUDGET,
    rssMiB: {
      afterWarmUp: rss[0],
      last: rss.at(-1),
      low: Math.min(...warmTrace.map((r) => r.rssMiB)),
      high: Math.max(...warmTrace.map((r) => r.rssMiB)),
      earlyHigh,
      lateHigh,
      readings: fullTrace.length,
    },
    rssSlopeMiBPerMinute: rssSlopePerMinute,
    maxDbConnections: Math.max(...samples.map((s) => s.dbConnections)),
    maxBacklog: Math.max(...samples.map((s) => s.backlog)),
    messagesSent: sent,
    jobs: jobs.length,
    duplicatesSent,
    poisonSent: poison.length,
    applied: effect.jobs,
    doubles: effect.doubles,
    lost: jobs.length - effect.jobs,
    poisonDeadLetters: poisonRows.rows.length,
    apiStatuses,
    stackStop: { ...stopped, printedToStderr: running.stderr().length },
  };
  await reportFigures("soak", figures);

  expect(effect).toEqual({
    ledger: jobs.length,
    doubles: 0,
    jobs: jobs.length,
    balance: String(expectedBalance),
  });
  expect(
    poisonRows.rows.filter((r) => r.error_kind === "poison" && r.status === "pending_review"),
  ).toHaveLength(poison.length);
  expect(duplicatesSent).toBeGreaterThan(0);
  expect(apiStatuses).toEqual({ "200": expect.any(Number) });
  for (const s of samples) expect(s.dbConnections, JSON.stringify(s)).toBeLessThanOrEqual(CONNECTION_BUDGET);
  // The stack keeps up: the backlog at the end of the load is no bigger than a few seconds' work.
  expect((samples.at(-1) as Sample).backlog).toBeLessThanOrEqual(RATE * 10);
  // Flat memory: the late highs no higher than the early ones (a leak grows with the work done).
  expect(warm.length).toBeGreaterThanOrEqual(TEST_TIER === "reliability" ? 9 : 2);
  expect(lateHigh).toBeLessThanOrEqual(earlyHigh * 1.1);
  // It stops as Ctrl-C stops it, having printed no error all along.
  expect(stopped.forced, "had to be SIGKILLed").toBe(false);
  expect(running.stdout()).toMatch(/\bstopped\b/);
  expect(running.stderr()).toBe("");
}, 900_000);
