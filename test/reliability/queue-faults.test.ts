/**
 * Reliability 4: queue faults. The consumer runs as the local stack runs it (the event-source
 * poller: receive → handler → delete what it acked), with every SQS call going through a proxy
 * that fails chosen actions:
 *
 * - DeleteMessage(Batch) and ChangeMessageVisibility(Batch) fail at a rate, by a 500, a dropped
 *   connection, or a connection dropped after the emulator acted (the caller cannot know); a few
 *   ReceiveMessage answers are lost after the emulator hid the messages;
 * - the emulator is stopped (its state kept on disk) for windows of seconds, then started again.
 *
 * A failed delete leaves an applied or dead-lettered message in the queue: it comes back, and the
 * fence (or the idempotent dead-letter write) must absorb it. After the queue drains, every valid
 * job is applied exactly once, every poison message is exactly one pending dead letter that was
 * never retried, and nothing is lost.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, type ExpectStatic, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { localSqsClient } from "../../local/aws-clients.ts";
import { startPoller } from "../../local/poller.ts";
import { startSqsEmulator } from "../../local/sqs-emulator.ts";
import { describeError } from "../../shared/errors/last-error.ts";
import { recordLogKeys } from "../../shared/record/observe.ts";
import type { RetryPolicy } from "../../shared/retry/policy.ts";
import { type ConsumerTestBed, consumerTestBed } from "../support/consumer-harness.ts";
import { createQueue, messagesIn, sendBatch } from "../support/sqs.ts";
import { byTier, TEST_TIER } from "../support/tier.ts";
import { reportFigures, runSeed, seededRandom, tally } from "./support/figures.ts";
import { jobFates, judge } from "./support/job-fates.ts";
import { envelopeOf, loadJobs, sleep, waitUntil } from "./support/load.ts";
import { type FaultRule, startSqsFaultProxy } from "./support/sqs-fault-proxy.ts";

const CONSUMER = "award-points";
/** Attempts to spare: only a job's first attempt fails, so none may ever be exhausted. */
const RETRY: RetryPolicy = Object.freeze({ maxAttempts: 8, baseSeconds: 1, capSeconds: 1 });
/** How soon a message whose delete or visibility change failed comes back. */
const VISIBILITY_SECONDS = 2;
/** How long an outage window may outlast its length before a receive has met it. */
const OUTAGE_MET_WITHIN_MS = 30_000;
const SEED = runSeed();
const random = seededRandom(SEED);

let bed: ConsumerTestBed;
beforeAll(async () => {
  bed = await consumerTestBed();
});
afterAll(async () => {
  await bed?.close();
});

/** One in four valid jobs fails transiently on its first attempt: a ChangeMessageVisibility call. */
const flaky = (jobId: string) => Number(jobId.split("-").at(-1)) % 4 === 0;

interface QueueRunOptions {
  readonly scenario: string;
  readonly jobs: number;
  readonly poison: number;
  readonly rules: readonly FaultRule[];
  /** Runs while the consumer works (the emulator windows); returns what it did. */
  readonly disturb?: (run: QueueRun) => Promise<Record<string, number>>;
  readonly timeoutMs: number;
}

/** What a disturbance can act on. */
interface QueueRun {
  /**
   * Stops the emulator for `ms` and starts it again on its data (messages, in-flight ones
   * included, survive in its SQLite store); meanwhile every SQS call's connection is refused.
   */
  outage(ms: number): Promise<void>;
  settled(): Promise<number>;
  finished(): boolean;
}

async function queueRun(o: QueueRunOptions, emulatorDir: string) {
  let emulator = await startSqsEmulator({ dataDir: emulatorDir });
  const proxy = await startSqsFaultProxy(emulator.endpoint, random);
  const sqs = localSqsClient(proxy.endpoint);
  try {
    // Addressed through the proxy.
    const { url: queueUrl, arn: queueArn } = await createQueue(sqs, proxy.endpoint, o.scenario, {
      VisibilityTimeout: String(VISIBILITY_SECONDS),
    });

    const valid = loadJobs(o.scenario, o.jobs);
    const poison = Array.from({ length: o.poison }, (_, i) => `${o.scenario}-poison-${i}`);
    const bodies = [
      ...valid.map(envelopeOf),
      // Valid envelopes whose payload the consumer's schema refuses.
      ...poison.map((jobId) =>
        JSON.stringify({
          job_id: jobId,
          tenant_id: `t-${o.scenario}`,
          payload: { user_id: "u", points: -1 },
        }),
      ),
    ];
    // Shuffled so poison and flaky jobs share batches with good ones.
    for (let i = bodies.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [bodies[i], bodies[j]] = [bodies[j] as string, bodies[i] as string];
    }
    await sendBatch(sqs, queueUrl, bodies);

    const outcomes: Record<string, number> = {};
    const pollerErrors: Record<string, number> = {};
    const poisonRetries: string[] = [];
    let deliveries = 0;
    let redeliveries = 0;
    const handler = bed.consumer(
      {
        ...awardPointsConsumer,
        work: async (job, tx) => {
          if (flaky(job.jobId) && job.attempt === 1) throw new Error("downstream unavailable");
          await awardPointsConsumer.work(job, tx);
        },
      },
      {
        sqs,
        queueUrl,
        retryPolicy: RETRY,
        onOutcome: (outcome, rc) => {
          deliveries++;
          if (rc.receiveCount > 1) redeliveries++;
          tally(
            outcomes,
            outcome.status === "dead-lettered" ? `dead-lettered:${outcome.kind}` : outcome.status,
          );
          const jobId = String(recordLogKeys(rc).job_id);
          if (outcome.status === "retry" && jobId.includes("-poison-")) poisonRetries.push(jobId);
        },
      },
    );
    // The fault rules apply from here: setting up the queue is not what is under test.
    proxy.setRules(o.rules);
    const poller = startPoller({
      source: { sqs, queueUrl, queueArn, batchSize: 10, waitSeconds: 1 },
      handler,
      functionName: CONSUMER,
      concurrency: 4,
      timeoutSeconds: 30,
      onError: (error) => tally(pollerErrors, describeError(error).message.slice(0, 60)),
    });

    const all = [...valid.map((j) => j.jobId), ...poison];
    const settledCount = () =>
      bed.db.withClient(async (c) => {
        const { rows } = await c.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM unnest($1::text[]) AS j(job_id)
            WHERE EXISTS (SELECT 1 FROM core.processed_jobs f WHERE f.job_id = j.job_id AND f.consumer_id = core.consumer_id($2))
               OR EXISTS (SELECT 1 FROM core.dead_letters d WHERE d.job_id = j.job_id AND d.consumer = $2)`,
          [all, CONSUMER],
        );
        return rows[0]?.n ?? 0;
      });
    let finished = false;
    let disturbed: Record<string, number> = {};
    const started = Date.now();
    try {
      const disturbing = o.disturb?.({
        outage: async (ms) => {
          const refusedReceives = () => proxy.counts.injected.ReceiveMessage?.["emulator-down"] ?? 0;
          const refusedBefore = refusedReceives();
          proxy.setTarget(undefined);
          await emulator.stop();
          await sleep(ms);
          // On a busy machine the poller may not have run inside the window: it lasts until a
          // receive has met it, so every window is an outage the consumer saw.
          await waitUntil(
            "a receive to meet the outage",
            async () => refusedReceives(),
            (refused) => refused > refusedBefore,
            OUTAGE_MET_WITHIN_MS,
            50,
          );
          emulator = await startSqsEmulator({ dataDir: emulatorDir });
          proxy.setTarget(emulator.endpoint);
        },
        settled: settledCount,
        finished: () => finished,
      });
      try {
        await waitUntil(
          `every ${o.scenario} message settled and the queue empty`,
          async () => ({ settled: await settledCount(), queued: messagesIn(emulator, o.scenario) }),
          (v) => v.settled === all.length && v.queued === 0,
          o.timeoutMs,
        );
      } finally {
        finished = true;
        disturbed = (await disturbing) ?? {};
      }
    } finally {
      finished = true;
      await poller.stop();
    }
    const durationMs = Date.now() - started;
    // Whatever the last delete left behind would show here after its visibility timeout.
    const leftInQueue = messagesIn(emulator, o.scenario);

    const validFates = await bed.db.withClient((c) =>
      jobFates(
        c,
        CONSUMER,
        valid.map((j) => j.jobId),
      ),
    );
    const poisonRows = await bed.db.withClient(async (c) => {
      const { rows } = await c.query<{
        job_id: string;
        error_kind: string;
        status: string;
        attempts: number;
      }>(
        `SELECT job_id, error_kind, status, attempts FROM core.dead_letters
          WHERE consumer = $1 AND job_id = ANY($2::text[]) ORDER BY job_id`,
        [CONSUMER, poison],
      );
      return rows;
    });
    const poisonFences = await bed.db.withClient(async (c) => {
      const { rows } = await c.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM core.processed_jobs WHERE consumer_id = core.consumer_id($1) AND job_id = ANY($2::text[])",
        [CONSUMER, poison],
      );
      return rows[0]?.n ?? 0;
    });
    const verdict = judge(validFates);
    const balance = await bed.db.withClient(async (c) => {
      const { rows } = await c.query<{ total: string | null }>(
        "SELECT sum(balance)::text AS total FROM award_points.balances WHERE tenant_id = $1",
        [`t-${o.scenario}`],
      );
      return Number(rows[0]?.total ?? 0);
    });
    const poisonLost = poison.length - new Set(poisonRows.map((r) => r.job_id)).size;

    const figures = {
      seed: SEED,
      jobs: valid.length,
      poisonMessages: poison.length,
      durationMs,
      faultsInjected: proxy.counts.injected,
      faultsInjectedTotal: proxy.injectedTotal(),
      requestsForwarded: proxy.counts.forwarded,
      ...(Object.keys(disturbed).length > 0 ? { disturbances: disturbed } : {}),
      deliveries,
      redeliveries,
      outcomes,
      duplicatesAbsorbed: outcomes.duplicate ?? 0,
      pollerErrors,
      applied: verdict.applied,
      doubles: verdict.doubles,
      lost: verdict.lost + poisonLost,
      poisonDeadLetters: poisonRows.length,
      poisonRetries: poisonRetries.length,
    };
    const check = (expect: ExpectStatic) => {
      // Every valid job applied exactly once (no job can exhaust: only its first attempt fails).
      expect(verdict.broken).toEqual([]);
      expect(verdict.applied).toBe(valid.length);
      expect(verdict.doubles).toBe(0);
      expect(verdict.lost).toBe(0);
      expect(balance).toBe(valid.reduce((sum, j) => sum + j.points, 0));
      // Every poison message: one pending poison dead letter, never retried, no fence.
      expect(poisonRows.map((r) => r.job_id)).toEqual([...poison].sort());
      for (const row of poisonRows)
        expect(row).toMatchObject({ error_kind: "poison", status: "pending_review" });
      expect(poisonRetries).toEqual([]);
      expect(poisonFences).toBe(0);
      expect(leftInQueue).toBe(0);
    };
    return { figures, check };
  } finally {
    sqs.destroy();
    await proxy.close();
    await emulator.stop();
  }
}

/** Every mode, so deletes fail both before the emulator acted and after. */
const EVERY_MODE = ["http-500", "drop", "drop-after-forward"] as const;

const scenarios = TEST_TIER === "reliability" ? describe : describe.concurrent;

scenarios("reliability: queue faults", () => {
  let dirs: string[] = [];
  const emulatorDir = async () => {
    const dir = await mkdtemp(join(tmpdir(), "jobfence-rel-sqs-"));
    dirs.push(dir);
    return dir;
  };
  afterAll(async () => {
    await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
    dirs = [];
  });

  it("deletes and visibility changes failing at a rate: redeliveries absorbed, nothing lost", async ({
    expect,
  }) => {
    const scenario = "queue-rate";
    const { figures, check } = await queueRun(
      {
        scenario,
        jobs: byTier({ everyday: 50, full: 100, reliability: 2000 }),
        poison: byTier({ everyday: 5, reliability: 100 }),
        rules: [
          { actions: ["DeleteMessage", "DeleteMessageBatch"], first: 2, rate: 0.25, modes: EVERY_MODE },
          {
            actions: ["ChangeMessageVisibility", "ChangeMessageVisibilityBatch"],
            first: 2,
            rate: 0.25,
            modes: EVERY_MODE,
          },
          // A lost answer to a receive: the messages are hidden, and nobody has them.
          { actions: ["ReceiveMessage"], rate: 0.03, modes: ["drop-after-forward"] },
        ],
        timeoutMs: byTier({ everyday: 60_000, reliability: 600_000 }),
      },
      await emulatorDir(),
    );
    await reportFigures(scenario, figures);
    check(expect);
    const injected = figures.faultsInjected;
    expect(injected.DeleteMessageBatch?.["http-500"] ?? 0).toBeGreaterThanOrEqual(2);
    expect(injected.ChangeMessageVisibility?.["http-500"] ?? 0).toBeGreaterThanOrEqual(2);
    // The deletes that failed before the emulator acted brought applied jobs back: the fence held.
    expect(figures.duplicatesAbsorbed).toBeGreaterThan(0);
  }, 900_000);

  it("the emulator stopped for windows under load: everything resumes, nothing lost or doubled", async ({
    expect,
  }) => {
    const scenario = "queue-outage";
    const windows = byTier({ everyday: 1, reliability: 3 });
    const downMs = byTier({ everyday: 2000, reliability: 5000 });
    const jobs = byTier({ everyday: 50, full: 100, reliability: 2000 });
    const { figures, check } = await queueRun(
      {
        scenario,
        jobs,
        poison: byTier({ everyday: 5, reliability: 100 }),
        rules: [],
        timeoutMs: byTier({ everyday: 60_000, reliability: 600_000 }),
        disturb: async (run) => {
          const done: Record<string, number> = {};
          for (let w = 1; w <= windows && !run.finished(); w++) {
            while (!run.finished() && (await run.settled()) < (w / (windows + 1)) * jobs) await sleep(50);
            if (run.finished()) break;
            await run.outage(downMs);
            tally(done, "emulator stopped");
          }
          return done;
        },
      },
      await emulatorDir(),
    );
    await reportFigures(scenario, { ...figures, downtimeMsPerWindow: downMs });
    check(expect);
    expect(figures.disturbances).toEqual({ "emulator stopped": windows });
    expect(figures.faultsInjected.ReceiveMessage?.["emulator-down"] ?? 0).toBeGreaterThan(0);
  }, 900_000);
});
