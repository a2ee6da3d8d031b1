/**
 * AC2 (reliability 2): the crash matrix. A crash between the work and the commit leaves neither
 * effect nor fence, and a crash anywhere else breaks no job either: for each named fault point
 * (shared/fault-points.ts) a real child process (test/reliability/support/crash-child.ts) is
 * killed with SIGKILL when it gets there:
 *
 *   fence:before, fence:after-insert, fence:after-work, fence:after-commit   (both commit modes)
 *   outbox:after-send                                                        (both commit modes)
 *   dead-letter:in-flight, dead-letter:after                                 (both commit modes)
 *   replay:after-send                                                        (single and bulk replay)
 *   cleanup:in-flight                                                        (TTL cleanup)
 *   outbox:sweep-after-send                                                  (the scheduled relay)
 *
 * The consuming child gets one batch of award-points jobs built so that every consumer point is
 * reached (several times: the kill may land on a later hit, after earlier jobs committed): plain
 * awards, a duplicate delivery, an award the business rule refuses (PermanentJobError: a hard dead
 * letter) and a body that is not JSON (poison). Then "restart and drain": a normal consumer in this
 * process polls the queue until it holds nothing, the queue's 1 s visibility timeout bringing back
 * what the dead child held; a crashed replay is retried by the operator, a crashed cleanup runs
 * again. For every job: at most one effect (award_points.ledger rows), and either applied once or
 * exactly one pending dead letter; the dead child leaves no session behind and the queue is empty.
 *
 * The chain downstream (the outbox, docs/design.md §11): every applied award sends notify-user one
 * follow-up. A kill after COMMIT and before the relay (fence:after-commit) or between the relay's
 * send and its DELETE (outbox:after-send) leaves the row for the scheduled relay; a kill of the
 * scheduled relay between its send and its COMMIT (outbox:sweep-after-send) leaves the rows to be
 * sent again. After each case every applied award's follow-up is applied downstream or waits in
 * the outbox (never neither); at the end, after the scheduled relay has run, each is applied by
 * notify-user exactly once and the outbox is empty, however often it was sent. Two interleavings
 * without a kill join them: the relay after COMMIT racing the scheduled relay, both ways round.
 *
 * The points before COMMIT (fence:after-insert, fence:after-work: a crash between the work and the fence leaves neither)
 * are held to more: right after the kill, the jobs the child was working on have no effect, no fence
 * and no dead letter; their messages come back as delivery 2 and the restart settles them without a
 * failure; and a further duplicate delivery of them after the restart changes nothing. The bounded
 * run kills there at the first hit (nothing committed before) as well as at a later one.
 */
import { randomBytes } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import type pg from "pg";
import { afterAll, beforeAll, describe, type ExpectStatic, expect, it } from "vitest";
import { localEventBridgeClient } from "../../local/aws-clients.ts";
import type { CommitMode } from "../../shared/consumer.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { planOperation, readOperation, startOperation } from "../../shared/dead-letters/bulk-operations.ts";
import { runBulkOperations } from "../../shared/dead-letters/bulk-worker.ts";
import { replayDeadLetter } from "../../shared/dead-letters/replay.ts";
import { stepKey } from "../../shared/envelope/step-key.ts";
import { FAULT_POINTS, type FaultPoint, installFaultHook } from "../../shared/fault-points.ts";
import { runFenceCleanup } from "../../shared/fence/cleanup.ts";
import { sweepOutbox } from "../../shared/outbox/sweep.ts";
import { TEST_SEAL_KEY } from "../support/api-harness.ts";
import { award, type ConsumerTestBed, consumerTestBed } from "../support/consumer-harness.ts";
import { insertDeadLetter } from "../support/fixtures.ts";
import { queueDepth, sendMessage } from "../support/sqs.ts";
import { byTier, TEST_TIER } from "../support/tier.ts";
import {
  IN_FLIGHT_POINTS,
  KILLER_USER_PREFIX,
  REFUSED_USER_PREFIX,
  STALL_USER_PREFIX,
} from "./support/crash-consumer.ts";
import {
  type CrashFate,
  crashFates,
  type DrainResult,
  drainQueue,
  followUpAccountedFor,
  followUpFates,
  followUpSettled,
  holdsInvariant,
  idleInTransaction,
  notificationJobId,
  runCrashChild,
  sessionsLeftBy,
} from "./support/crash-support.ts";
import { reportFigures } from "./support/figures.ts";

/** Tells this run's queues and sessions from those of a run sharing the server. */
const RUN = randomBytes(3).toString("hex");
const TENANT = "t_crash";

type Scenario = "consume" | "replay-single" | "replay-bulk" | "cleanup" | "sweep" | "steps";

interface CrashCase {
  /** Short and unique: prefixes the case's job ids, queue and session names. */
  readonly id: string;
  readonly label: string;
  readonly scenario: Scenario;
  readonly point: FaultPoint;
  /** The child dies the nth time it reaches the point. */
  readonly nth: number;
  readonly mode: CommitMode;
  /** Replays: retry the crashed replay before the drain, or after it (then it supersedes). */
  readonly restart: "replay-first" | "drain-first";
  /** In-flight points: ms between the statement's issue and the kill. */
  readonly inFlightMs: number;
}

const CONSUMER_POINTS = [
  "fence:before",
  "fence:after-insert",
  "fence:after-work",
  "fence:after-commit",
  "outbox:after-send",
  "dead-letter:in-flight",
  "dead-letter:after",
] as const satisfies readonly FaultPoint[];
type ConsumerPoint = (typeof CONSUMER_POINTS)[number];

/** A job's step, before its fence transaction (notify-user's email). */
const STEP_POINTS = [
  "step:before-call",
  "step:after-call",
  "step:after-checkpoint",
] as const satisfies readonly FaultPoint[];

/** The notify-user jobs a steps case sends: each must end with one notification and one email. */
const STEP_JOBS = 3;

/**
 * AC2's points: inside the fence transaction, before COMMIT (the fence inserted, the work not run;
 * the work run). A kill there must leave nothing of the job's transaction behind.
 */
const BEFORE_COMMIT_POINTS: ReadonlySet<FaultPoint> = new Set(["fence:after-insert", "fence:after-work"]);

/**
 * How many times the consuming child reaches each point with the batch {@link sendConsumeBatch}
 * sends (one receive of seven messages). Per record: one fence transaction per parsed record (six,
 * the duplicate's included), five fences new, four works committed, two dead letters (refused and
 * poison). Batch: the shared transaction runs twice (the refused award's failure makes it redo
 * without it), commits once; the same two dead letters.
 */
const REACH: Record<CommitMode, Record<ConsumerPoint, number>> = {
  "per-record": {
    "fence:before": 6,
    "fence:after-insert": 5,
    "fence:after-work": 4,
    "fence:after-commit": 4,
    "outbox:after-send": 4,
    "dead-letter:in-flight": 2,
    "dead-letter:after": 2,
  },
  batch: {
    "fence:before": 2,
    "fence:after-insert": 2,
    "fence:after-work": 1,
    "fence:after-commit": 1,
    "outbox:after-send": 1,
    "dead-letter:in-flight": 2,
    "dead-letter:after": 2,
  },
};

/**
 * The bounded run's one kill per point and mode: a later hit where there is one, so jobs before it
 * have committed (unacked) when the process dies; in batch mode the second fence:before and
 * fence:after-insert are the redo after the refused award's failure.
 */
const BOUNDED_NTH: Record<CommitMode, Record<ConsumerPoint, number>> = {
  "per-record": {
    "fence:before": 2,
    "fence:after-insert": 2,
    "fence:after-work": 2,
    "fence:after-commit": 2,
    "outbox:after-send": 2,
    "dead-letter:in-flight": 1,
    "dead-letter:after": 2,
  },
  batch: {
    "fence:before": 2,
    "fence:after-insert": 2,
    "fence:after-work": 1,
    "fence:after-commit": 1,
    "outbox:after-send": 1,
    "dead-letter:in-flight": 2,
    "dead-letter:after": 1,
  },
};

/**
 * The scheduled relay's kill cases: follow-ups left in the outbox by a relay that could not send,
 * sent in rounds of {@link SWEEP.batchSize}, so the kill can land after an earlier round committed.
 */
const SWEEP = { followUps: 12, batchSize: 5 } as const;

/** Cleanup: expired and live fences seeded, deleted in batches of this size (so three batches). */
const CLEANUP = { expired: 120, live: 40, batchSize: 50 } as const;
const CLEANUP_BATCHES = Math.ceil(CLEANUP.expired / CLEANUP.batchSize);

/**
 * In-flight points: how long the statement runs before the kill. 0 kills at once, before the
 * statement has left the process (it never runs); a few ms usually let it commit before the kill.
 * The reliability tier takes several, so both outcomes are met.
 */
const IN_FLIGHT_WAITS = byTier({ everyday: [5], reliability: [0, 1, 5, 25] });

/**
 * The everyday tier meets each consumer point in one commit mode, the modes taken in turn down the
 * list; the full tier (CI) and the reliability tier meet each in both.
 */
const EVERYDAY_MODE = (point: (typeof CONSUMER_POINTS)[number]): "per-record" | "batch" =>
  CONSUMER_POINTS.indexOf(point) % 2 === 0 ? "per-record" : "batch";

function buildCases(): CrashCase[] {
  const cases: Array<Omit<CrashCase, "id" | "inFlightMs">> = [];
  for (const mode of ["per-record", "batch"] as const) {
    for (const point of CONSUMER_POINTS) {
      if (TEST_TIER === "everyday" && EVERYDAY_MODE(point) !== mode) continue;
      // Reliability tier: every hit the batch reaches; bounded: one, and for AC2's points the first as well.
      const hits =
        TEST_TIER === "reliability"
          ? Array.from({ length: REACH[mode][point] }, (_, i) => i + 1)
          : [...new Set([...(BEFORE_COMMIT_POINTS.has(point) ? [1] : []), BOUNDED_NTH[mode][point]])];
      for (const nth of hits) {
        cases.push({
          label: `${point} #${nth}, ${mode}${BEFORE_COMMIT_POINTS.has(point) ? " (before COMMIT)" : ""}`,
          scenario: "consume",
          point,
          nth,
          mode,
          restart: "drain-first",
        });
      }
    }
  }
  const replayRestarts = byTier({
    everyday: [["replay-single", "replay-first"]] as const,
    full: [
      ["replay-single", "replay-first"],
      ["replay-bulk", "drain-first"],
    ] as const,
    reliability: [
      ["replay-single", "replay-first"],
      ["replay-single", "drain-first"],
      ["replay-bulk", "replay-first"],
      ["replay-bulk", "drain-first"],
    ] as const,
  });
  for (const [scenario, restart] of replayRestarts) {
    cases.push({
      label: `replay:after-send, ${scenario === "replay-single" ? "single" : "bulk"}, restart ${restart}`,
      scenario,
      point: "replay:after-send",
      nth: 1,
      mode: "per-record",
      restart,
    });
  }
  const cleanupHits =
    TEST_TIER === "reliability" ? Array.from({ length: CLEANUP_BATCHES }, (_, i) => i + 1) : [2];
  for (const nth of cleanupHits) {
    cases.push({
      label: `cleanup:in-flight #${nth}`,
      scenario: "cleanup",
      point: "cleanup:in-flight",
      nth,
      mode: "per-record",
      restart: "drain-first",
    });
  }
  for (const nth of byTier({ everyday: [2], reliability: [1, 2, 3] })) {
    cases.push({
      label: `outbox:sweep-after-send #${nth}, scheduled relay`,
      scenario: "sweep",
      point: "outbox:sweep-after-send",
      nth,
      mode: "per-record",
      restart: "drain-first",
    });
  }
  // notify-user's email step through the fake provider: killed before the call, after the provider
  // acted (its answer not recorded), and after the checkpoint (the fence not begun).
  for (const point of STEP_POINTS) {
    for (const nth of byTier({ everyday: [2], reliability: [1, 2, 3] })) {
      cases.push({
        label: `${point} #${nth}, notify-user's email`,
        scenario: "steps",
        point,
        nth,
        mode: "per-record",
        restart: "drain-first",
      });
    }
  }
  const withWaits = cases.flatMap((c) =>
    IN_FLIGHT_POINTS.has(c.point)
      ? IN_FLIGHT_WAITS.map((inFlightMs) => ({
          ...c,
          label:
            TEST_TIER === "reliability"
              ? `${c.label}, killed ${inFlightMs === 0 ? "at once" : `${inFlightMs} ms into the statement`}`
              : c.label,
          inFlightMs,
        }))
      : [{ ...c, inFlightMs: 0 }],
  );
  return withWaits.map((c, i) => ({ ...c, id: `c${String(i).padStart(3, "0")}` }));
}

const CASES = buildCases();

/** The run's figures, filled in by every case (before its assertions, so a failure still counts). */
const figures = {
  cases: CASES.length,
  kills: {} as Record<string, number>,
  jobs: 0,
  applied: 0,
  deadLettered: 0,
  doubles: 0,
  lost: 0,
  broken: [] as Array<{ case: string; fate: CrashFate }>,
  /** Records the restart received again (what the dead child held, and replays sent twice). */
  redelivered: 0,
  /** Records the restart's consumer could not settle on first delivery. */
  drainFailures: 0,
  /** For the in-flight points: how often the statement had committed when the process died. */
  inFlight: {} as Record<string, { kills: number; committed: number }>,
  /** Interruption cases: how many, the children the culprits killed, the most rounds one needed. */
  interruptions: { cases: 0, kills: 0, rounds: 0 },
  /**
   * The chain: applied awards whose follow-up was checked at the end, how many of those the
   * scheduled relay sent (left by a kill or a failed relay), follow-up deliveries notify-user
   * received beyond the first (absorbed by its fence), and follow-ups lost or applied twice.
   */
  followUps: { jobs: 0, leftToRelay: 0, extraDeliveries: 0, lost: 0, doubled: 0 },
  /**
   * Steps: notify-user jobs whose email step a kill interrupted; what the fake provider did for them
   * (emails sent, requests it answered from a key it had seen), emails sent twice, and jobs without
   * their notification.
   */
  steps: { jobs: 0, emails: 0, replayedByProvider: 0, doubled: 0, lost: 0 },
  seconds: 0,
};

let bed: ConsumerTestBed;
let opsPool: pg.Pool;
let cleanupPool: pg.Pool;
let relayPool: pg.Pool;
const started = Date.now();

beforeAll(async () => {
  bed = await consumerTestBed();
  // The restart's replays and cleanups run as the roles the real functions use.
  opsPool = createPool({ connectionString: bed.db.url, role: "jobfence_ops", max: 2 });
  cleanupPool = createPool({ connectionString: bed.db.url, role: "jobfence_cleanup", max: 1 });
  relayPool = createPool({ connectionString: bed.db.url, role: consumerRoleName("award-points"), max: 1 });
});
afterAll(async () => {
  await opsPool?.end();
  await cleanupPool?.end();
  await relayPool?.end();
  await bed?.close();
});

/** Cleanup cases delete every expired fence of the database: one at a time, or they would take each other's. */
let cleanupTurn: Promise<void> = Promise.resolve();
function exclusively<T>(work: () => Promise<T>): Promise<T> {
  const run = cleanupTurn.then(work);
  cleanupTurn = run.then(
    () => {},
    () => {},
  );
  return run;
}

function tallyInFlight(point: FaultPoint, committed: boolean): void {
  const entry = figures.inFlight[point] ?? { kills: 0, committed: 0 };
  figures.inFlight[point] = entry;
  entry.kills++;
  if (committed) entry.committed++;
}

/**
 * What a case expects of each job after the restart. An applied job of a consume case has had no
 * dead letter at all (`deadLetters: 0`); a replayed one has its resolved one.
 */
type Expected =
  | { readonly fate: "applied"; readonly deadLetters?: number }
  | { readonly fate: "dead-lettered"; readonly kind: string };

/** Adds the jobs' fates to the figures and asserts the invariant and each job's expected end. */
async function checkJobs(
  expect: ExpectStatic,
  c: Pick<CrashCase, "label">,
  expected: ReadonlyMap<string, Expected>,
): Promise<CrashFate[]> {
  const fates = await bed.db.withClient((client) => crashFates(client, [...expected.keys()]));
  for (const fate of fates) {
    figures.jobs++;
    if (fate.ledger > 1) figures.doubles++;
    if (fate.ledger === 0 && fate.pending === 0) figures.lost++;
    if (!holdsInvariant(fate)) figures.broken.push({ case: c.label, fate });
    else if (fate.ledger === 1) figures.applied++;
    else figures.deadLettered++;
  }
  for (const fate of fates) {
    expect.soft(fate.ledger, `${fate.job_id}: effects`).toBeLessThanOrEqual(1);
    expect.soft(holdsInvariant(fate), `${fate.job_id}: ${JSON.stringify(fate)}`).toBe(true);
    const want = expected.get(fate.job_id);
    if (want?.fate === "applied") {
      expect.soft(fate, fate.job_id).toMatchObject({
        ledger: 1,
        fences: 1,
        pending: 0,
        ...(want.deadLetters !== undefined ? { dead_letters: want.deadLetters } : {}),
      });
    } else if (want?.fate === "dead-lettered") {
      // One dead letter, not two: a redelivery after the crash finds the pending row and reuses it.
      expect.soft(fate, fate.job_id).toMatchObject({
        ledger: 0,
        fences: 0,
        pending: 1,
        dead_letters: 1,
        kinds: [want.kind],
      });
    }
  }
  return fates;
}

/** Each user's balance equals the points of their ledger entries: the work's two writes are one. */
async function checkBalances(expect: ExpectStatic, userPrefix: string): Promise<void> {
  const mismatched = await bed.db.withClient(async (client) => {
    const { rows } = await client.query(
      `SELECT coalesce(b.user_id, l.user_id) AS user_id, b.balance::int AS balance, l.points::int AS points
         FROM (SELECT user_id, balance FROM award_points.balances
                WHERE tenant_id = $1 AND starts_with(user_id, $2)) b
         FULL JOIN (SELECT user_id, sum(points) AS points FROM award_points.ledger
                     WHERE tenant_id = $1 AND starts_with(user_id, $2) GROUP BY user_id) l USING (user_id)
        WHERE b.balance IS DISTINCT FROM l.points`,
      [TENANT, userPrefix],
    );
    return rows;
  });
  expect.soft(mismatched, "balances that differ from their ledger").toEqual([]);
}

/** Runs the child for a case and asserts it died by SIGKILL at the case's point and hit. */
async function crash(
  expect: ExpectStatic,
  c: CrashCase,
  role: Parameters<typeof runCrashChild>[0]["role"],
): Promise<readonly string[]> {
  const applicationName = `crash-${RUN}-${c.id}`;
  const end = await runCrashChild({
    role,
    point: c.point,
    nth: c.nth,
    inFlightMs: c.inFlightMs,
    databaseUrl: bed.db.url,
    sqsEndpoint: bed.emulator.endpoint,
    eventBridgeEndpoint: bed.sink.endpoint,
    applicationName,
  });
  expect(end.signal, `child output:\n${end.output}`).toBe("SIGKILL");
  expect(end.report, `child output:\n${end.output}`).toMatchObject({ point: c.point, hit: c.nth });
  figures.kills[c.point] = (figures.kills[c.point] ?? 0) + 1;
  // The dead child's sessions end by themselves: their transactions roll back, their locks go.
  expect(await sessionsLeftBy(bed.db, applicationName), "sessions the dead child left").toEqual([]);
  return end.report?.jobIds ?? [];
}

/**
 * Drains the case's queue with a normal consumer: the restart after the kill (counted in the
 * figures), or a later round the case sends itself (`"again"`, not counted).
 */
async function drain(
  c: Pick<CrashCase, "id" | "mode">,
  queue: CaseQueues,
  round: "restart" | "again" = "restart",
): Promise<DrainResult> {
  const result = await drainQueue({
    databaseUrl: bed.db.url,
    sqs: bed.sqs,
    eventBridgeEndpoint: bed.sink.endpoint,
    queueUrl: queue.url,
    queueArn: queue.arn,
    followUpQueueUrl: queue.followUps.url,
    commitMode: c.mode,
    applicationName: `crash-${round === "restart" ? "drain" : "again"}-${RUN}-${c.id}`,
  });
  if (round === "again") return result;
  figures.redelivered += result.received;
  figures.drainFailures += result.failed;
  return result;
}

/** A case's queue and the queue its consumers send their follow-ups to notify-user to. */
interface CaseQueues {
  readonly url: string;
  readonly arn: string;
  readonly followUps: { readonly url: string; readonly arn: string };
}

async function caseQueues(id: string): Promise<CaseQueues> {
  const queue = await bed.queue(`crash-${RUN}-${id}`, { VisibilityTimeout: "1" });
  const followUps = await bed.queue(`crash-${RUN}-${id}-fu`, { VisibilityTimeout: "1" });
  return { ...queue, followUps };
}

/** Every award job of the run, for the chain's check at the end. */
const chainJobs = new Set<string>();
/** How often notify-user received each follow-up, over every drain. */
const followUpDeliveries = new Map<string, number>();

/** notify-user drains `queue`, as `applicationName`. */
function drainNotifyUser(queue: { url: string; arn: string }, applicationName: string): Promise<DrainResult> {
  return drainQueue({
    databaseUrl: bed.db.url,
    sqs: bed.sqs,
    eventBridgeEndpoint: bed.sink.endpoint,
    queueUrl: queue.url,
    queueArn: queue.arn,
    followUpQueueUrl: queue.url,
    commitMode: "per-record",
    consumer: "notify-user",
    applicationName,
  });
}

/** notify-user drains `followUps`: what the relays sent applies downstream. */
async function drainFollowUps(id: string, followUps: { url: string; arn: string }): Promise<DrainResult> {
  const result = await drainNotifyUser(followUps, `crash-notify-${RUN}-${id}`);
  for (const record of result.records) {
    const jobId = jobIdOf(record.body);
    if (jobId) followUpDeliveries.set(jobId, (followUpDeliveries.get(jobId) ?? 0) + 1);
  }
  return result;
}

/**
 * After a case's restart, before any scheduled relay: drains the case's follow-ups into notify-user
 * and checks that each applied award's follow-up is applied downstream or waits in the outbox.
 */
async function checkFollowUps(expect: ExpectStatic, id: string, queue: CaseQueues, jobIds: Iterable<string>) {
  const jobs = [...jobIds];
  for (const jobId of jobs) chainJobs.add(jobId);
  await drainFollowUps(id, queue.followUps);
  const fates = await bed.db.withClient((client) => followUpFates(client, jobs));
  for (const fate of fates) {
    expect
      .soft(followUpAccountedFor(fate), `${fate.job_id}: its follow-up ${JSON.stringify(fate)}`)
      .toBe(true);
  }
}

function envelope(jobId: string, userId: string, points: number): Record<string, unknown> {
  return award(jobId, points, userId, TENANT);
}

/** The consuming child's batch: what each job must end as, and the envelopes of the parsable ones. */
interface ConsumeBatch {
  readonly expected: Map<string, Expected>;
  readonly envelopes: Map<string, Record<string, unknown>>;
}

/**
 * Sends the consuming child's batch, in send order: awards ok-1, refused, ok-2, poison, ok-3, ok-2
 * again, ok-4.
 */
async function sendConsumeBatch(c: CrashCase, queueUrl: string): Promise<ConsumeBatch> {
  const expected = new Map<string, Expected>();
  const envelopes = new Map<string, Record<string, unknown>>();
  const job = (jobId: string, userId: string, points: number, fate: Expected) => {
    expected.set(jobId, fate);
    envelopes.set(jobId, envelope(jobId, userId, points));
    return envelopes.get(jobId);
  };
  const ok = (n: number) =>
    job(`${c.id}-ok-${n}`, `u-${c.id}-${n}`, 10 + n, { fate: "applied", deadLetters: 0 });
  const refusedId = `${c.id}-refused`;
  await sendMessage(bed.sqs, queueUrl, ok(1));
  await sendMessage(
    bed.sqs,
    queueUrl,
    job(refusedId, `${REFUSED_USER_PREFIX}${c.id}`, 5, { fate: "dead-lettered", kind: "hard" }),
  );
  await sendMessage(bed.sqs, queueUrl, ok(2));
  // Poison: no job_id can be read, so its dead letter carries the SQS MessageId as job_id.
  const poisonId = await sendMessage(bed.sqs, queueUrl, `{"job_id": "${c.id}-poison", not json`);
  expected.set(poisonId, { fate: "dead-lettered", kind: "poison" });
  await sendMessage(bed.sqs, queueUrl, ok(3));
  await sendMessage(bed.sqs, queueUrl, ok(2));
  await sendMessage(bed.sqs, queueUrl, ok(4));
  return { expected, envelopes };
}

/** The job_id of a record's body, when it has one. */
function jobIdOf(body: string): string | undefined {
  try {
    const id: unknown = JSON.parse(body)?.job_id;
    return typeof id === "string" ? id : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A steps case: notify-user jobs whose email goes through the fake provider in a step; the child
 * dies at the case's step point, notify-user drains the rest. Each job ends with exactly one
 * notification (its fence) and exactly one email at the provider, sent with the job's key.
 */
async function stepsCase(expect: ExpectStatic, c: CrashCase): Promise<void> {
  const queue = await caseQueues(c.id);
  const jobIds = Array.from({ length: STEP_JOBS }, (_, i) => `${c.id}-email-${i + 1}`);
  for (const [i, jobId] of jobIds.entries()) {
    await sendMessage(bed.sqs, queue.url, {
      job_id: jobId,
      tenant_id: TENANT,
      correlation_id: `corr-${jobId}`,
      payload: { user_id: `u-${jobId}`, kind: "points-awarded", points: i + 1 },
    });
  }
  await crash(expect, c, { kind: "notify", queueUrl: queue.url, queueArn: queue.arn });
  await drainNotifyUser(queue, `crash-steps-${RUN}-${c.id}`);
  const rows = await bed.db.withClient(async (client) => {
    const { rows } = await client.query<{
      job_id: string;
      notifications: number;
      fences: number;
      message_id: string | null;
    }>(
      `SELECT j.job_id,
              (SELECT count(*)::int FROM notify_user.notifications n WHERE n.job_id = j.job_id) AS notifications,
              (SELECT count(*)::int FROM core.processed_jobs p JOIN core.consumer_roles r ON r.id = p.consumer_id
                WHERE r.consumer = 'notify-user' AND p.job_id = j.job_id) AS fences,
              (SELECT n.provider_message_id FROM notify_user.notifications n WHERE n.job_id = j.job_id LIMIT 1) AS message_id
         FROM unnest($1::text[]) AS j(job_id) ORDER BY j.job_id`,
      [jobIds],
    );
    return rows;
  });
  const ledger = bed.emailProvider.ledger();
  const requests = bed.emailProvider.requests();
  for (const row of rows) {
    const key = stepKey("notify-user", row.job_id, "email");
    const emails = ledger.filter((entry) => entry.key === key);
    figures.steps.jobs++;
    figures.steps.emails += emails.length;
    figures.steps.replayedByProvider += requests.filter(
      (r) => r.key === key && r.outcome === "replayed",
    ).length;
    if (emails.length > 1) figures.steps.doubled++;
    if (row.notifications === 0) figures.steps.lost++;
    expect.soft(emails.length, `${row.job_id}: emails at the provider`).toBe(1);
    expect
      .soft(row, row.job_id)
      .toEqual({ job_id: row.job_id, notifications: 1, fences: 1, message_id: emails[0]?.id });
  }
}

async function consumeCase(expect: ExpectStatic, c: CrashCase): Promise<void> {
  const queue = await caseQueues(c.id);
  const { expected, envelopes } = await sendConsumeBatch(c, queue.url);
  const reportedJobs = await crash(expect, c, {
    kind: "consume",
    commitMode: c.mode,
    queueUrl: queue.url,
    queueArn: queue.arn,
    followUpQueueUrl: queue.followUps.url,
  });
  const beforeCommit = BEFORE_COMMIT_POINTS.has(c.point);
  /** The jobs the child was at when it died, each once (a batch transaction may hold one twice). */
  const heldJobs = [...new Set(reportedJobs)].sort();

  if (beforeCommit) {
    // AC2: killed inside the fence transaction, before COMMIT: nothing of it committed, for any
    // job the transaction held (the record's; in batch mode, the batch's).
    expect(heldJobs.length, "jobs the killed transaction held").toBeGreaterThan(0);
    const atKill = await bed.db.withClient((client) => crashFates(client, heldJobs));
    expect(
      atKill
        .map((f) => ({ job: f.job_id, ledger: f.ledger, fences: f.fences, deadLetters: f.dead_letters }))
        .sort((x, y) => (x.job < y.job ? -1 : 1)),
      "effects, fences and dead letters right after the kill",
    ).toEqual(heldJobs.map((job) => ({ job, ledger: 0, fences: 0, deadLetters: 0 })));
  }

  if (c.point === "dead-letter:in-flight") {
    const [jobId] = reportedJobs;
    const rows = await bed.db.withClient((client) =>
      client.query("SELECT 1 FROM core.dead_letters WHERE job_id = $1", [jobId]),
    );
    tallyInFlight(c.point, (rows.rowCount ?? 0) > 0);
  }

  const restart = await drain(c, queue);
  expect(await queueDepth(bed.sqs, queue.url), "messages left in the queue").toBe(0);
  const fates = await checkJobs(expect, c, expected);
  await checkBalances(expect, `u-${c.id}-`);
  await checkFollowUps(expect, c.id, queue, expected.keys());
  if (!beforeCommit) return;

  // AC2: the killed jobs' messages were never deleted: once their visibility lapsed they came back
  // as delivery 2, and the restart settled everything without a failure.
  expect(restart.failed, "records the restart failed").toBe(0);
  for (const jobId of heldJobs) {
    expect(
      restart.records.filter((r) => jobIdOf(r.body) === jobId).map((r) => r.receiveCount),
      `${jobId}: receive counts of its redeliveries`,
    ).toContain("2");
  }

  // AC2: and a further duplicate delivery of the same jobs changes nothing.
  for (const jobId of heldJobs) await sendMessage(bed.sqs, queue.url, envelopes.get(jobId));
  const again = await drain(c, queue, "again");
  expect({ received: again.received, failed: again.failed }, "the duplicate delivery").toEqual({
    received: heldJobs.length,
    failed: 0,
  });
  expect(await queueDepth(bed.sqs, queue.url), "messages left after the duplicate").toBe(0);
  const afterDuplicate = await bed.db.withClient((client) => crashFates(client, [...expected.keys()]));
  expect(afterDuplicate, "every job's traces after the duplicate delivery").toEqual(fates);
  await checkBalances(expect, `u-${c.id}-`);
  await checkFollowUps(expect, `${c.id}-again`, queue, expected.keys());
}

/** A pending dead letter of an award to `queueUrl`, as the harness would have written it. */
function seedDeadLetter(client: pg.ClientBase, queueUrl: string, jobId: string, userId: string) {
  return insertDeadLetter(client, {
    job_id: jobId,
    queue: queueUrl,
    tenant_id: TENANT,
    payload: envelope(jobId, userId, 7),
    correlation_id: `corr-${jobId}`,
    attempts: 5,
    error_kind: "exhausted",
  });
}

async function replayCase(expect: ExpectStatic, c: CrashCase): Promise<void> {
  const queue = await caseQueues(c.id);
  const bulk = c.scenario === "replay-bulk";
  const sentJobs = bulk ? [1, 2, 3].map((n) => `${c.id}-replay-${n}`) : [`${c.id}-replay-1`];
  // Bulk also meets a dead letter whose job already succeeded by another path: it supersedes.
  const fencedJob = `${c.id}-fenced`;
  const ids = await bed.db.withClient(async (client) => {
    const seeded: string[] = [];
    for (const [i, jobId] of sentJobs.entries()) {
      seeded.push(await seedDeadLetter(client, queue.url, jobId, `u-${c.id}-${i + 1}`));
    }
    if (bulk) {
      seeded.push(await seedDeadLetter(client, queue.url, fencedJob, `u-${c.id}-fenced`));
      await client.query(
        `WITH fence AS (
           INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at)
           VALUES ($1, core.consumer_id('award-points'), $2, now() + interval '7 days')),
         entry AS (
           INSERT INTO award_points.ledger (job_id, tenant_id, user_id, points) VALUES ($1, $2, $3, 7))
         INSERT INTO award_points.balances (tenant_id, user_id, balance) VALUES ($2, $3, 7)`,
        [fencedJob, TENANT, `u-${c.id}-fenced`],
      );
    }
    return seeded;
  });
  const jobs = bulk ? [...sentJobs, fencedJob] : sentJobs;
  // Bulk: the operator starts a bulk replay of the queue; the crashing child is the worker running it.
  const bulkDeps = { pool: opsPool, sealKey: TEST_SEAL_KEY };
  const filter = { queue: queue.url };
  const operation = bulk
    ? await startOperation(
        bulkDeps,
        {
          kind: "replay",
          filter,
          token: (await planOperation(bulkDeps, "replay", filter)).token ?? undefined,
          rate_per_second: 1000,
          delay_seconds: 0,
        },
        "crash-matrix",
      )
    : undefined;

  const reportedJobs = await crash(
    expect,
    c,
    bulk ? { kind: "replay-bulk" } : { kind: "replay-single", deadLetterId: ids[0] as string },
  );
  expect([...reportedJobs].sort()).toEqual([...sentJobs].sort());
  // Sent, not committed: the messages are in the queue and the dead letters still pending.
  expect(await queueDepth(bed.sqs, queue.url)).toBe(sentJobs.length);
  const pendingAfterKill = await bed.db.withClient((client) => crashFates(client, jobs));
  expect(pendingAfterKill.map((f) => f.pending)).toEqual(jobs.map(() => 1));

  // Restart: the operator, who never got an answer, replays again (bulk: the next worker run resumes
  // the operation); the consumer drains.
  const deps = { pool: opsPool, sqs: bed.sqs };
  const replayAgain = async (): Promise<string[]> => {
    if (!operation) return [(await replayDeadLetter(deps, ids[0] as string, "crash-matrix-restart")).status];
    await runBulkOperations(deps, { budgetMs: 10_000 });
    const done = await readOperation(opsPool, operation.id);
    expect(done).toMatchObject({ status: "completed", processed: jobs.length });
    return [
      ...Array.from({ length: done.replayed }, () => "replayed"),
      ...Array.from({ length: done.superseded }, () => "superseded"),
    ];
  };
  let outcomes: string[];
  if (c.restart === "replay-first") {
    outcomes = await replayAgain();
    await drain(c, queue);
    // The first replay's message and the second's: one applies, the other is a duplicate.
    expect(outcomes.sort()).toEqual(bulk ? ["replayed", "replayed", "replayed", "superseded"] : ["replayed"]);
  } else {
    await drain(c, queue);
    outcomes = await replayAgain();
    // The crashed replay's messages already applied the jobs: nothing is sent again.
    expect(outcomes).toEqual(jobs.map(() => "superseded"));
  }
  expect(await queueDepth(bed.sqs, queue.url), "messages left in the queue").toBe(0);
  await checkJobs(expect, c, new Map(jobs.map((j) => [j, { fate: "applied" } as const])));
  await checkBalances(expect, `u-${c.id}-`);
  // The job applied by another path sent no follow-up here; it has none anywhere.
  await checkFollowUps(expect, c.id, queue, sentJobs);
}

async function cleanupCase(expect: ExpectStatic, c: CrashCase): Promise<void> {
  const count = (kind: "expired" | "live") =>
    bed.db.withClient(async (client) => {
      const { rows } = await client.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM core.processed_jobs WHERE starts_with(job_id, $1)",
        [`${c.id}-${kind}-`],
      );
      return rows[0]?.n ?? 0;
    });
  await bed.db.withClient((client) =>
    client.query(
      `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, processed_at, expires_at)
       SELECT $1 || '-expired-' || n, core.consumer_id('award-points'), $3, now() - interval '8 days', now() - interval '1 hour'
         FROM generate_series(1, $4) AS n
       UNION ALL
       SELECT $1 || '-live-' || n, core.consumer_id('award-points'), $3, now() - interval '6 days', now() + interval '1 day'
         FROM generate_series(1, $2) AS n`,
      [c.id, CLEANUP.live, TENANT, CLEANUP.expired],
    ),
  );

  await crash(expect, c, { kind: "cleanup", batchSize: CLEANUP.batchSize });
  // Batches before the nth have committed; the nth was in flight and may have, or not.
  const before = Math.max(0, CLEANUP.expired - CLEANUP.batchSize * (c.nth - 1));
  const after = Math.max(0, before - CLEANUP.batchSize);
  const expiredLeft = await count("expired");
  expect([before, after]).toContain(expiredLeft);
  tallyInFlight(c.point, expiredLeft === after);
  expect(await count("live"), "live fences after the kill").toBe(CLEANUP.live);

  // Restart: the next scheduled run finishes the job.
  const report = await runFenceCleanup({ db: cleanupPool, budgetMs: 10_000, batchSize: CLEANUP.batchSize });
  expect(report.deleted).toBe(expiredLeft);
  expect(await count("expired"), "expired fences after the restart's run").toBe(0);
  expect(await count("live"), "live fences after the restart's run").toBe(CLEANUP.live);
}

/** award-points' scheduled relay, sending its follow-ups to notify-user to `followUpUrl`. */
function scheduledRelay(followUpUrl: string, batchSize: number = SWEEP.batchSize) {
  return sweepOutbox({
    pool: relayPool,
    sqs: bed.sqs,
    eventBridge: localEventBridgeClient(bed.sink.endpoint),
    opsBusName: "jobfence-ops-test",
    consumer: "award-points",
    queues: { "notify-user": followUpUrl },
    metrics: new Metrics({ namespace: "jobfence", serviceName: "award-points-outbox" }),
    logger: new Logger({ serviceName: "award-points-outbox", logLevel: "SILENT" }),
    batchSize,
  });
}

const outboxDepth = () =>
  bed.db.withClient(async (client) => {
    const { rows } = await client.query<{ n: number }>("SELECT count(*)::int AS n FROM core.outbox");
    return rows[0]?.n ?? 0;
  });

/** Makes every outbox row due now, as if the relay after COMMIT had had its 30 seconds. */
const dueNow = () =>
  bed.db.withClient((client) => client.query("UPDATE core.outbox SET next_attempt_at = now()"));

/**
 * The scheduled relay killed between its send and its COMMIT: awards are applied by a consumer
 * whose follow-up queue does not exist, so every follow-up waits in the outbox; the child relays
 * them in rounds and dies after the nth round's send. The rounds before it committed; the nth's
 * rows are still there and go again on the restart's run, which notify-user's fence absorbs.
 */
async function sweepCase(expect: ExpectStatic, c: CrashCase): Promise<void> {
  const queue = await caseQueues(c.id);
  const ids = Array.from({ length: SWEEP.followUps }, (_, i) => `${c.id}-sw-${i + 1}`);
  for (const [i, id] of ids.entries())
    await sendMessage(bed.sqs, queue.url, envelope(id, `u-${c.id}-${i}`, 2));
  const unreachable = {
    ...queue,
    followUps: { url: `${queue.followUps.url}-missing`, arn: queue.followUps.arn },
  };
  await drain(c, unreachable);
  await dueNow();
  const before = await outboxDepth();
  expect(before, "follow-ups waiting in the outbox").toBeGreaterThanOrEqual(ids.length);
  const round = await crash(expect, c, {
    kind: "sweep",
    batchSize: SWEEP.batchSize,
    followUpQueueUrl: queue.followUps.url,
  });
  expect(round, "the killed round's follow-ups").toHaveLength(SWEEP.batchSize);
  // The rounds before the nth committed their DELETEs; the nth's rows are back, unlocked.
  expect(await outboxDepth(), "rows after the kill").toBe(before - SWEEP.batchSize * (c.nth - 1));
  const restart = await scheduledRelay(queue.followUps.url);
  expect(restart.undelivered, "follow-ups dead-lettered by the restart").toEqual([]);
  expect(await outboxDepth(), "rows after the restart's run").toBe(0);
  figures.followUps.leftToRelay += restart.sent;
  await checkFollowUps(expect, c.id, queue, ids);
  const fates = await bed.db.withClient((client) => followUpFates(client, ids));
  for (const fate of fates) expect.soft(followUpSettled(fate), JSON.stringify(fate)).toBe(true);
  // The killed round was sent once more than before it: by the child, then by the restart. (It may
  // hold rows other cases left, sent once already; this case's rows had never been sent.)
  const own = new Set(ids.map(notificationJobId));
  for (const jobId of round) {
    expect.soft(followUpDeliveries.get(jobId), jobId).toBeGreaterThanOrEqual(2);
    if (own.has(jobId)) expect.soft(followUpDeliveries.get(jobId), jobId).toBe(2);
  }
}

/**
 * Two relays at once, without a kill: the relay after COMMIT and the scheduled relay (its rows
 * forced due) send the same row, the second at the point named; the target applies it once, the
 * outbox ends empty, and neither relay fails.
 */
const RELAY_RACES = [
  {
    id: "race-sweep-first",
    label: "the scheduled relay sends and deletes a row between the relay after COMMIT's send and its DELETE",
  },
  {
    id: "race-relay-waits",
    label:
      "the relay after COMMIT deletes a row the scheduled relay holds locked: it waits, then finds it gone",
  },
] as const;

async function raceCase(expect: ExpectStatic, race: (typeof RELAY_RACES)[number]): Promise<void> {
  const queue = await caseQueues(race.id);
  const jobId = `${race.id}-1`;
  const followUp = notificationJobId(jobId);
  let sweep: Promise<unknown> | undefined;
  let holding: (() => void) | undefined;
  const held = new Promise<void>((resolve) => {
    holding = resolve;
  });
  installFaultHook(async (point, context) => {
    if (race.id === "race-sweep-first" && point === "outbox:after-send" && !sweep) {
      await dueNow();
      sweep = scheduledRelay(queue.followUps.url);
      await sweep;
    }
    if (race.id === "race-relay-waits") {
      if (point === "fence:after-commit" && !sweep) {
        await dueNow();
        sweep = scheduledRelay(queue.followUps.url);
        await held;
      }
      if (point === "outbox:sweep-after-send" && context.jobIds?.includes(followUp)) {
        holding?.();
        // Holding the row's lock while the relay after COMMIT sends it and tries to DELETE it.
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
  });
  try {
    await sendMessage(bed.sqs, queue.url, envelope(jobId, `u-${race.id}`, 4));
    const result = await drain({ id: race.id, mode: "per-record" }, queue);
    await sweep;
    expect(result.failed, "records the racing drain failed").toBe(0);
  } finally {
    installFaultHook(undefined);
  }
  expect(await outboxDepth(), "rows left").toBe(0);
  await checkFollowUps(expect, race.id, queue, [jobId]);
  const [fate] = await bed.db.withClient((client) => followUpFates(client, [jobId]));
  expect(fate && followUpSettled(fate), JSON.stringify(fate)).toBe(true);
  expect(followUpDeliveries.get(followUp), "deliveries of the follow-up").toBe(2);
}

/** The product's TypeScript files (everything a deployment or the local stack runs). */
async function productSources(): Promise<Array<{ path: string; text: string }>> {
  const root = fileURLToPath(new URL("../../", import.meta.url));
  const files: Array<{ path: string; text: string }> = [];
  for (const dir of ["shared", "functions", "local", "infra", "scripts"]) {
    for (const entry of await readdir(join(root, dir), { recursive: true, withFileTypes: true })) {
      if (!entry.isFile() || !entry.name.endsWith(".ts")) continue;
      const path = join(entry.parentPath, entry.name);
      files.push({ path: relative(root, path), text: await readFile(path, "utf8") });
    }
  }
  return files;
}

describe("AC2 crash matrix: the fault points", () => {
  it("are each wired into the product and each met by a case of the matrix", async () => {
    const sources = await productSources();
    for (const point of FAULT_POINTS) {
      expect(
        sources.some((f) => f.path !== "shared/fault-points.ts" && f.text.includes(`faultHook("${point}"`)),
        point,
      ).toBe(true);
      expect(
        CASES.some((c) => c.point === point),
        point,
      ).toBe(true);
    }
  });

  it("exist only for tests and cost nothing unused: no product code installs a hook, every point is guarded", async () => {
    const sources = await productSources();
    expect(
      sources.filter((f) => f.path !== "shared/fault-points.ts" && f.text.includes("installFaultHook")),
    ).toEqual([]);
    // An unset hook must cost one check of a variable: no call, no await, no context object built.
    const unguarded = sources.flatMap((f) =>
      f.text
        .split("\n")
        .filter((line) => /\bfaultHook\(/.test(line) && !/if \(faultHook\) await faultHook\(/.test(line))
        .map((line) => `${f.path}: ${line.trim()}`),
    );
    expect(unguarded).toEqual([]);
  });
});

/**
 * Interruptions (docs/design.md §4.4): a culprit that ends its invocation without an outcome, every time it
 * runs. "container killed mid-batch": its work SIGKILLs the process (a crash or OOM looks the same
 * to SQS and the database). "invocation timed out mid-record": its work outlasts a 3 s function
 * timeout. Every delivery runs in a fresh child (the culprit would kill this process too), round
 * after round until the queue is empty. Then: the culprit is one `interrupted` dead letter and
 * never applied; every innocent batch-mate is applied once and never dead-lettered.
 */
const INTERRUPTION_CASES = (["per-record", "batch"] as const)
  .flatMap((mode) =>
    (["killed", "timed-out"] as const).map((how) => ({
      id: `i-${mode === "batch" ? "b" : "p"}-${how === "killed" ? "k" : "t"}`,
      label: `${how === "killed" ? "container killed mid-batch" : "invocation timed out mid-record"}, ${mode}`,
      mode,
      how,
    })),
  )
  // The everyday tier: each way of ending the invocation once, in one mode each; the full tier: all four.
  .filter((c) => TEST_TIER !== "everyday" || (c.mode === "per-record") === (c.how === "killed"));
/** Rounds of fresh children before a case gives up: the culprit needs at most maxInterruptions + 2. */
const MAX_ROUNDS = 10;

async function interruptionCase(expect: ExpectStatic, c: (typeof INTERRUPTION_CASES)[number]): Promise<void> {
  const queue = await caseQueues(c.id);
  const expected = new Map<string, Expected>();
  const send = async (jobId: string, userId: string, fate: Expected) => {
    expected.set(jobId, fate);
    await sendMessage(bed.sqs, queue.url, envelope(jobId, userId, 3));
  };
  const innocent = (n: number) =>
    send(`${c.id}-ok-${n}`, `u-${c.id}-${n}`, { fate: "applied", deadLetters: 0 });
  await innocent(1);
  await innocent(2);
  const culpritUser = `${c.how === "killed" ? KILLER_USER_PREFIX : STALL_USER_PREFIX}${c.id}`;
  await send(`${c.id}-culprit`, culpritUser, { fate: "dead-lettered", kind: "interrupted" });
  await innocent(3);
  await innocent(4);

  let kills = 0;
  let rounds = 0;
  while (rounds < MAX_ROUNDS && (await queueDepth(bed.sqs, queue.url)) > 0) {
    rounds++;
    const end = await runCrashChild({
      role: {
        kind: "consume",
        commitMode: c.mode,
        queueUrl: queue.url,
        queueArn: queue.arn,
        followUpQueueUrl: queue.followUps.url,
        ...(c.how === "timed-out" ? { timeoutSeconds: 3 } : {}),
      },
      // No fault point: the culprit's own work ends the child.
      point: "fence:before",
      nth: 0,
      inFlightMs: 0,
      databaseUrl: bed.db.url,
      sqsEndpoint: bed.emulator.endpoint,
      eventBridgeEndpoint: bed.sink.endpoint,
      applicationName: `crash-${RUN}-${c.id}-${rounds}`,
    });
    if (end.signal === "SIGKILL") kills++;
    else expect(end.code, `child output:\n${end.output}`).toBe(3);
    // What the child held comes back once its 1 s visibility lapses.
    await new Promise((resolve) => setTimeout(resolve, 1200));
  }
  figures.interruptions.cases++;
  figures.interruptions.kills += kills;
  figures.interruptions.rounds = Math.max(figures.interruptions.rounds, rounds);
  expect(await queueDepth(bed.sqs, queue.url), "messages left in the queue").toBe(0);
  if (c.how === "killed") expect(kills, "kills before the culprit was named").toBeLessThanOrEqual(3);
  else expect(kills).toBe(0);
  await checkJobs(expect, c, expected);
  await checkBalances(expect, `u-${c.id}-`);
  await checkFollowUps(expect, c.id, queue, expected.keys());
}

// The interruption cases (the longest) and the matrix's cases run as one concurrent group, the
// interruptions started first: each case has its queues, jobs and users of its own.
describe.concurrent("crash matrix: a record that keeps ending its invocation", () => {
  it.for(INTERRUPTION_CASES)("$label", { timeout: 90_000 }, async (c, { expect }) => {
    await interruptionCase(expect, c);
  });
});

describe.concurrent("AC2 crash matrix: SIGKILL at each fault point, then restart and drain", () => {
  it.for(CASES.filter((c) => c.scenario !== "sweep"))(
    "$label",
    { timeout: 90_000 },
    async (c, { expect }) => {
      if (c.scenario === "consume") await consumeCase(expect, c);
      else if (c.scenario === "steps") await stepsCase(expect, c);
      else if (c.scenario === "cleanup") await exclusively(() => cleanupCase(expect, c));
      else await replayCase(expect, c);
    },
  );
});

// One at a time, after the cases above: the scheduled relay takes every due row of award-points,
// and the races install this process's fault hook.
describe("crash matrix: the outbox's scheduled relay, killed and racing the relay after COMMIT", () => {
  it.for(CASES.filter((c) => c.scenario === "sweep"))(
    "$label",
    { timeout: 90_000 },
    async (c, { expect }) => {
      await sweepCase(expect, c);
    },
  );
  it.for(RELAY_RACES)("$label", { timeout: 60_000 }, async (race, { expect }) => {
    await raceCase(expect, race);
  });
});

describe("AC2 crash matrix: after every crash", () => {
  it("leaves no session idle in transaction, nothing doubled, nothing lost", async () => {
    // The test runs on the repository's Node, whatever the machine's own is.
    expect(Number(process.versions.node.split(".")[0])).toBeGreaterThanOrEqual(24);
    let idle = await idleInTransaction(bed.db);
    for (let waited = 0; idle > 0 && waited < 3_000; waited += 100) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      idle = await idleInTransaction(bed.db);
    }
    // The chain: the scheduled relay sends what every kill left in the outbox; notify-user applies it.
    const final = await caseQueues("final");
    await dueNow();
    const relayed = await scheduledRelay(final.followUps.url, 100);
    figures.followUps.leftToRelay += relayed.sent;
    await drainFollowUps("final", final.followUps);
    const chain = await bed.db.withClient((client) => followUpFates(client, [...chainJobs]));
    for (const fate of chain) {
      if (fate.ledger !== 1) continue;
      figures.followUps.jobs++;
      if (fate.notifications === 0) figures.followUps.lost++;
      if (fate.notifications > 1 || fate.fences > 1) figures.followUps.doubled++;
    }
    figures.followUps.extraDeliveries = [...followUpDeliveries.values()].reduce((n, d) => n + d - 1, 0);
    figures.seconds = Math.round((Date.now() - started) / 100) / 10;
    await reportFigures("crash-matrix", figures);
    expect(idle).toBe(0);
    expect(figures.broken).toEqual([]);
    expect(figures.doubles).toBe(0);
    expect(figures.lost).toBe(0);
    expect(relayed.undelivered, "follow-ups the final relay dead-lettered").toEqual([]);
    expect(await outboxDepth(), "rows left in the outbox").toBe(0);
    expect(
      chain.filter((fate) => !followUpSettled(fate)),
      "awards whose follow-up did not settle",
    ).toEqual([]);
    expect(figures.followUps.jobs, "applied awards whose chain was checked").toBeGreaterThan(CASES.length);
    expect(figures.followUps.lost).toBe(0);
    expect(figures.followUps.doubled).toBe(0);
    // A kill after COMMIT left follow-ups to the scheduled relay, and some were sent twice.
    expect(figures.followUps.leftToRelay).toBeGreaterThan(0);
    expect(figures.followUps.extraDeliveries).toBeGreaterThan(0);
    expect(Object.values(figures.kills).reduce((a, b) => a + b, 0)).toBe(CASES.length);
    expect(figures.interruptions.cases).toBe(INTERRUPTION_CASES.length);
    // Steps: every job one email and one notification; a kill after the provider acted made the
    // next delivery call again with the same key, which the provider answered from its record.
    expect(figures.steps.jobs).toBe(CASES.filter((c) => c.scenario === "steps").length * STEP_JOBS);
    expect(figures.steps.doubled).toBe(0);
    expect(figures.steps.lost).toBe(0);
    expect(figures.steps.emails).toBe(figures.steps.jobs);
    expect(figures.steps.replayedByProvider).toBeGreaterThan(0);
  });
});
