/**
 * Reliability 1: the duplicate storm. Many deliveries of few jobs (full: 10,000 of 1,000; bounded:
 * 2,000 of 200) go through 32 award-points handler instances at once, each built by the real
 * factory with a connection of its own (32 Lambda containers), in both commit modes. The order of
 * the deliveries, their cut into SQS batches (1–10 records, the same job possibly twice in one)
 * and how close together a job's copies arrive come from a seed, repeated over several seeds.
 *
 * Every job must take effect exactly once: one ledger row and one fence per job, balances equal to
 * one award per job, no dead letter, every delivery acked, and every record's outcome either the
 * one `applied` of its job or a `duplicate`.
 *
 * The handlers are invoked directly with Lambda-shaped events, as the event source mapping would
 * (no SQS in between: the storm is about the fence, and it is the database that must decide). A
 * record a handler does not ack is delivered again later with its receive count raised, as SQS
 * would, so the end state is checked even then; but none may occur.
 */
import type { SQSRecord } from "aws-lambda";
import type pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { localEventBridgeClient, localSqsClient } from "../../local/aws-clients.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { type CommitMode, type ConsumerHandler, createConsumer } from "../../shared/consumer.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { award, sqsRecord } from "../support/consumer-harness.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { byTier } from "../support/tier.ts";
import { reportFigures, runSeeds } from "./support/figures.ts";
import { type StormOrdering, type StormPlan, stormPlan } from "./support/storm-plan.ts";

/** Each storm: jobs, deliveries of them (ten each on average), and the seeds each mode meets. */
const SIZE = byTier({
  everyday: { jobs: 60, deliveries: 600, seeds: 1 },
  full: { jobs: 200, deliveries: 2_000, seeds: 2 },
  reliability: { jobs: 1_000, deliveries: 10_000, seeds: 6 },
});
/** One storm's time limit. */
const STORM_TIMEOUT_MS = byTier({ everyday: 60_000, reliability: 180_000 });
/**
 * Concurrent handler instances, one connection each: with the run's own admin connections this
 * stays far below the embedded server's max_connections of 100, beside the other test files.
 */
const HANDLERS = 32;
const MODES = ["per-record", "batch"] as const satisfies readonly CommitMode[];
const TENANT = "t_storm";
const QUEUE_ARN = "arn:aws:sqs:eu-west-1:000000000000:award-points-storm";

/**
 * Nothing may need SQS or EventBridge in a storm (no retry, no dead letter); if something does,
 * these fail fast and the figures show the outcome that asked for them.
 */
const unreachableSqs = localSqsClient("http://127.0.0.1:9");
const unreachableEventBridge = localEventBridgeClient("http://127.0.0.1:9");

interface StormRun {
  readonly mode: CommitMode;
  readonly seed: number;
  readonly ordering: StormOrdering;
}

const SEEDS = runSeeds(SIZE.seeds);
/** Each mode meets both orderings: they alternate over the seeds, offset between the modes. */
const RUNS: StormRun[] = MODES.flatMap((mode, m) =>
  SEEDS.map((seed, s) => ({ mode, seed, ordering: (s + m) % 2 === 0 ? "uniform" : "bursty" }) as const),
);

interface RunFigures extends StormRun {
  deliveries: number;
  jobs: number;
  batches: number;
  batchesWithRepeats: number;
  maxCopies: number;
  /** Batches handed out while another invocation held a delivery of one of their jobs. */
  overlapping: number;
  lockWaits: LockWaits;
  outcomes: Record<string, number>;
  /** Records not acked on their delivery (each delivered again). */
  notAcked: number;
  ledgerRows: number;
  fences: number;
  deadLetters: number;
  doubles: number;
  lost: number;
  balanceMismatches: number;
  idleInTransaction: number;
  seconds: number;
  deliveriesPerSecond: number;
}

const results: RunFigures[] = [];

/** Delivers the plan through the handlers, `HANDLERS` invocations at a time; returns the outcomes. */
async function storm(
  plan: StormPlan,
  run: StormRun,
  handlers: readonly ConsumerHandler[],
): Promise<{ notAcked: number; overlapping: number }> {
  let delivery = 0;
  const jobOf = new Map<string, number>();
  const recordOf = (job: number): SQSRecord => {
    const record = sqsRecord(
      JSON.stringify(award(`storm-${job}`, plan.points[job], `storm-u-${job}`, TENANT)),
      { messageId: `${run.seed}-${run.mode}-${delivery++}`, queueArn: QUEUE_ARN },
    );
    jobOf.set(record.messageId, job);
    return record;
  };
  const queue: SQSRecord[][] = plan.batches.map((batch) => batch.map(recordOf));
  let next = 0;
  let notAcked = 0;
  // Deliveries handed to a handler while another invocation held a delivery of the same job: the
  // races the fence has to decide (a measure that the storm is one, not a proof of each race).
  const inFlight = new Map<number, number>();
  let overlapping = 0;

  // Each "container" takes the next batch when it is free, as Lambda's pollers hand them out.
  const container = async (handler: ConsumerHandler): Promise<void> => {
    while (next < queue.length) {
      const records = queue[next++] as SQSRecord[];
      const jobs = [...new Set(records.map((r) => jobOf.get(r.messageId) as number))];
      for (const job of jobs) {
        if ((inFlight.get(job) ?? 0) > 0) overlapping++;
        inFlight.set(job, (inFlight.get(job) ?? 0) + 1);
      }
      const response = await handler({ Records: records }, lambdaContext("award-points")).finally(() => {
        for (const job of jobs) inFlight.set(job, (inFlight.get(job) ?? 1) - 1);
      });
      const failed = new Set(response.batchItemFailures.map((f) => f.itemIdentifier));
      if (failed.size === 0) continue;
      notAcked += failed.size;
      // As SQS would: what was not acked comes back later, one receive count up.
      queue.push(
        records
          .filter((r) => failed.has(r.messageId))
          .map((r) => ({
            ...r,
            attributes: {
              ...r.attributes,
              ApproximateReceiveCount: String(Number(r.attributes.ApproximateReceiveCount) + 1),
            },
          })),
      );
    }
  };
  await Promise.all(handlers.map(container));
  return { notAcked, overlapping };
}

interface LockWaits {
  /** Times the sampler looked at pg_locks. */
  samples: number;
  /** Samples that found a session of the storm waiting for a lock (a duplicate on a fence). */
  withWaiter: number;
  /** The most sessions seen waiting at once. */
  maxWaiting: number;
}

/**
 * Looks at pg_locks every few ms while the storm runs: evidence that duplicates really met on the
 * fence's lock (waited for the first delivery's commit), not only ran one after another.
 */
function lockWaitSampler(db: TestDatabase): { stop(): void; result: Promise<LockWaits> } {
  let running = true;
  const result = db.withClient(async (c) => {
    const waits: LockWaits = { samples: 0, withWaiter: 0, maxWaiting: 0 };
    while (running) {
      const { rows } = await c.query<{ n: number }>(
        `SELECT count(DISTINCT l.pid)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid)
          WHERE NOT l.granted AND a.datname = current_database()`,
      );
      const waiting = rows[0]?.n ?? 0;
      waits.samples++;
      if (waiting > 0) waits.withWaiter++;
      waits.maxWaiting = Math.max(waits.maxWaiting, waiting);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    return waits;
  });
  return {
    stop: () => {
      running = false;
    },
    result,
  };
}

/** What the database holds after the storm. */
async function endState(db: TestDatabase, plan: StormPlan) {
  return db.withClient(async (c) => {
    const jobIds = plan.points.map((_, job) => `storm-${job}`);
    const { rows } = await c.query<{
      ledger_rows: number;
      fences: number;
      dead_letters: number;
      doubles: number;
      lost: number;
      balance_mismatches: number;
      idle_in_transaction: number;
    }>(
      `WITH expected AS (
         SELECT job_id, 'storm-u-' || substr(job_id, 7) AS user_id, points
           FROM unnest($1::text[], $2::int[]) AS e(job_id, points)),
       per_job AS (
         SELECT e.job_id, (SELECT count(*) FROM award_points.ledger l WHERE l.job_id = e.job_id) AS n
           FROM expected e)
       SELECT (SELECT count(*)::int FROM award_points.ledger) AS ledger_rows,
              (SELECT count(*)::int FROM core.processed_jobs) AS fences,
              (SELECT count(*)::int FROM core.dead_letters) AS dead_letters,
              (SELECT count(*)::int FROM per_job WHERE n > 1) AS doubles,
              (SELECT count(*)::int FROM per_job WHERE n = 0) AS lost,
              (SELECT count(*)::int FROM expected e
                 FULL JOIN (SELECT user_id, balance FROM award_points.balances WHERE tenant_id = $3) b
                   USING (user_id)
                WHERE b.balance IS DISTINCT FROM e.points) AS balance_mismatches,
              (SELECT count(*)::int FROM pg_stat_activity
                WHERE datname = current_database() AND state LIKE 'idle in transaction%') AS idle_in_transaction`,
      [jobIds, plan.points, TENANT],
    );
    const fencesPerJob = await c.query<{ job_id: string }>(
      `SELECT job_id FROM core.processed_jobs GROUP BY job_id, consumer_id HAVING count(*) <> 1
       UNION ALL
       SELECT j FROM unnest($1::text[]) AS j
        WHERE NOT EXISTS (SELECT 1 FROM core.processed_jobs p
                           WHERE p.job_id = j AND p.consumer_id = core.consumer_id('award-points'))`,
      [jobIds],
    );
    // The storm's applying delivery of each job wrote its one follow-up; no duplicate wrote one.
    const followUpsPerJob = await c.query<{ job_id: string }>(
      `SELECT j FROM unnest($1::text[]) AS j
        WHERE (SELECT count(*) FROM core.outbox o WHERE o.parent_job_id = j AND o.consumer = 'award-points') <> 1`,
      [jobIds],
    );
    return {
      ...(rows[0] as NonNullable<(typeof rows)[0]>),
      jobsWithoutOneFence: fencesPerJob.rowCount ?? 0,
      jobsWithoutOneFollowUp: followUpsPerJob.rowCount ?? 0,
    };
  });
}

describe("duplicate storm: one effect per job, whatever the duplicates and their interleaving", () => {
  afterAll(async () => {
    const deliveries = results.reduce((n, r) => n + r.deliveries, 0);
    await reportFigures("duplicate-storm", {
      handlers: HANDLERS,
      seeds: SEEDS,
      runs: results.length,
      deliveries,
      jobs: results.reduce((n, r) => n + r.jobs, 0),
      doubles: results.reduce((n, r) => n + r.doubles, 0),
      lost: results.reduce((n, r) => n + r.lost, 0),
      notAcked: results.reduce((n, r) => n + r.notAcked, 0),
      perRun: results,
    });
  });

  it.for(RUNS)(
    "$mode, seed $seed, $ordering ordering",
    { timeout: STORM_TIMEOUT_MS },
    async (run, { expect }) => {
      const plan = stormPlan({
        seed: run.seed,
        jobs: SIZE.jobs,
        deliveries: SIZE.deliveries,
        ordering: run.ordering,
      });
      const db = await createTestDatabase();
      const pools: pg.Pool[] = [];
      try {
        const outcomes: Record<string, number> = {};
        const handlers = Array.from({ length: HANDLERS }, (_, i) => {
          const pool = createPool({
            connectionString: db.url,
            role: consumerRoleName("award-points"),
            max: 1,
            applicationName: `storm-${i}`,
          });
          pools.push(pool);
          return createConsumer(
            {
              ...awardPointsConsumer,
              commitMode: run.mode,
              work: async (job, tx) => {
                await awardPointsConsumer.work(job, tx);
                const hold = plan.holdMs[Number(job.jobId.slice("storm-".length))] ?? 0;
                if (hold > 0) await new Promise((resolve) => setTimeout(resolve, hold));
              },
            },
            {
              // SQS is unreachable, so every follow-up stays in the outbox, where it is counted.
              config: {
                databaseUrl: db.url,
                opsBusName: "jobfence-ops-test",
                outboxQueues: { "notify-user": "http://127.0.0.1:9/000000000000/notify-user" },
              },
              pool,
              sqs: unreachableSqs,
              eventBridge: unreachableEventBridge,
              onOutcome: (outcome) => {
                outcomes[outcome.status] = (outcomes[outcome.status] ?? 0) + 1;
              },
            },
          );
        });

        const sampler = lockWaitSampler(db);
        const startedAt = performance.now();
        const { notAcked, overlapping } = await storm(plan, run, handlers).finally(() => sampler.stop());
        const seconds = (performance.now() - startedAt) / 1000;
        const lockWaits = await sampler.result;
        const state = await endState(db, plan);
        const figures: RunFigures = {
          ...run,
          deliveries: SIZE.deliveries,
          jobs: SIZE.jobs,
          batches: plan.batches.length,
          batchesWithRepeats: plan.batchesWithRepeats,
          maxCopies: plan.maxCopies,
          overlapping,
          lockWaits,
          outcomes,
          notAcked,
          ledgerRows: state.ledger_rows,
          fences: state.fences,
          deadLetters: state.dead_letters,
          doubles: state.doubles,
          lost: state.lost,
          balanceMismatches: state.balance_mismatches,
          idleInTransaction: state.idle_in_transaction,
          seconds: Math.round(seconds * 100) / 100,
          deliveriesPerSecond: Math.round(SIZE.deliveries / seconds),
        };
        results.push(figures);

        // The plan really is a storm: every job several times, repeats inside batches.
        expect(plan.batches.flat()).toHaveLength(SIZE.deliveries);
        expect(plan.batchesWithRepeats).toBeGreaterThan(0);
        expect(overlapping, "deliveries racing another of the same job").toBeGreaterThan(0);

        expect.soft(state.doubles, "jobs with more than one effect").toBe(0);
        expect.soft(state.lost, "jobs with no effect").toBe(0);
        expect.soft(state.ledger_rows, "ledger rows").toBe(SIZE.jobs);
        expect.soft(state.fences, "fences").toBe(SIZE.jobs);
        expect.soft(state.jobsWithoutOneFence, "jobs without exactly one fence").toBe(0);
        expect.soft(state.jobsWithoutOneFollowUp, "jobs without exactly one follow-up").toBe(0);
        expect.soft(state.balance_mismatches, "users whose balance is not their one award").toBe(0);
        expect.soft(state.dead_letters, "dead letters").toBe(0);
        expect.soft(notAcked, "deliveries not acked").toBe(0);
        expect.soft(outcomes, "record outcomes").toEqual({
          applied: SIZE.jobs,
          duplicate: SIZE.deliveries - SIZE.jobs,
        });
        expect.soft(state.idle_in_transaction, "sessions idle in transaction").toBe(0);
      } finally {
        await Promise.all(pools.map((p) => p.end()));
        await db.drop();
      }
    },
  );

  it("runs on the repository's Node", () => {
    expect(Number(process.versions.node.split(".")[0])).toBeGreaterThanOrEqual(24);
  });
});
