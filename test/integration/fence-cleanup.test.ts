/**
 * AC6: TTL cleanup removes expired fences and never removes one inside its retry window — at, just
 * before and just after the boundary, with fences inserted while it runs, and with two cleanups at
 * once. Runs as the least-privileged cleanup role.
 */

import { Logger } from "@aws-lambda-powertools/logger";
import { Metrics } from "@aws-lambda-powertools/metrics";
import pg from "pg";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { CLEANUP_METRIC, cleanupInvocation } from "../../functions/fence-cleanup/cleanup.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { createPool } from "../../shared/db/pool.ts";
import { runFenceCleanup } from "../../shared/fence/cleanup.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  invoke,
  sqsRecord,
} from "../support/consumer-harness.ts";

/**
 * The pause between batches where pacing is not what a test is about: the default (a quarter of a
 * second) made the 30,000-fence test sleep 15 s. Pacing has its own test below.
 */
const UNTESTED_PAUSE_MS = 20;

let bed: ConsumerTestBed;
let cleanupPool: pg.Pool;
beforeAll(async () => {
  bed = await consumerTestBed();
  cleanupPool = createPool({ connectionString: bed.db.url, role: "jobfence_cleanup", max: 4 });
});
afterAll(async () => {
  await cleanupPool?.end();
  await bed?.close();
});
beforeEach(async () => {
  await bed.db.withClient((c) => c.query("DELETE FROM core.processed_jobs"));
});

/** Inserts `count` fences expiring at `expiresSql` (an SQL expression), with ids `prefix-n`. */
async function seed(prefix: string, count: number, expiresSql: string): Promise<void> {
  await bed.db.withClient((c) =>
    c.query(
      `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, processed_at, expires_at)
       SELECT $1 || '-' || n, core.consumer_id('award-points'), 't', now() - interval '30 days', ${expiresSql}
         FROM generate_series(1, $2) AS n`,
      [prefix, count],
    ),
  );
}

async function remaining(prefix: string): Promise<number> {
  return bed.db.withClient(async (c) => {
    const { rows } = await c.query(
      "SELECT count(*)::int AS n FROM core.processed_jobs WHERE job_id LIKE $1 || '-%'",
      [prefix],
    );
    return rows[0].n;
  });
}

describe("AC6 TTL cleanup", () => {
  it("deletes what expired before now, keeps what expires at now or later (same-transaction boundary)", async () => {
    // Inside one transaction now() is fixed, so the boundary can be probed to the microsecond.
    const client = new pg.Client({ connectionString: bed.db.url });
    await client.connect();
    try {
      await client.query("BEGIN");
      await client.query(`
        INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, processed_at, expires_at)
        SELECT job_id, core.consumer_id('award-points'), 't', processed_at, expires_at FROM (VALUES
          ('before-1us', now() - interval '7 days', now() - interval '1 microsecond'),
          ('at-now',     now() - interval '7 days', now()),
          ('after-1us',  now() - interval '7 days', now() + interval '1 microsecond'),
          ('in-window',  now() - interval '1 day',  now() + interval '6 days')) AS f (job_id, processed_at, expires_at)`);
      await client.query("SET LOCAL ROLE jobfence_cleanup");
      const { rows } = await client.query("SELECT core.delete_expired_fences(100) AS deleted");
      expect(rows[0].deleted).toBe(1);
      await client.query("RESET ROLE");
      const kept = await client.query("SELECT job_id FROM core.processed_jobs ORDER BY job_id");
      expect(kept.rows.map((r) => r.job_id)).toEqual(["after-1us", "at-now", "in-window"]);
    } finally {
      await client.query("ROLLBACK");
      await client.end();
    }
  });

  it("deletes attempt-ledger rows only once SQS can no longer deliver their message (14 days)", async () => {
    await bed.db.withClient((c) =>
      c.query(`
        INSERT INTO core.message_attempts (consumer, message_id, job_id, failures, updated_at) VALUES
          ('award-points', 'stale-1', 'j-1', 2, now() - interval '14 days 1 second'),
          ('award-points', 'stale-2', 'j-2', 1, now() - interval '20 days'),
          ('award-points', 'kept-1',  'j-3', 4, now() - interval '13 days 23 hours'),
          ('award-points', 'kept-2',  'j-4', 1, now())`),
    );
    const report = await runFenceCleanup({ db: cleanupPool, budgetMs: 10_000, batchSize: 1000, pauseMs: 0 });
    expect(report.staleAttemptsDeleted).toBe(2);
    const kept = await bed.db.withClient(async (c) => {
      const { rows } = await c.query<{ message_id: string }>(
        "SELECT message_id FROM core.message_attempts WHERE message_id LIKE 'stale-%' OR message_id LIKE 'kept-%' ORDER BY 1",
      );
      return rows.map((r) => r.message_id);
    });
    expect(kept).toEqual(["kept-1", "kept-2"]);
    // The cleanup role reaches the ledger only through the function.
    const direct = await cleanupPool
      .query("DELETE FROM core.message_attempts")
      .catch((e: { code?: string }) => e);
    expect(direct).toMatchObject({ code: "42501" });
  });

  it("removes every expired fence in bounded batches and reports what it did", async () => {
    await seed("old", 12_345, "now() - interval '1 hour'");
    await seed("live", 500, "now() + interval '2 seconds'");
    // No pause: the live fences expire in 2 seconds, and the batching is what is tested here.
    const report = await runFenceCleanup({ db: cleanupPool, budgetMs: 60_000, batchSize: 1000, pauseMs: 0 });
    expect(report).toMatchObject({ deleted: 12_345, batches: 13, backlog: 0, stoppedBy: "empty" });
    expect(await remaining("old")).toBe(0);
    expect(await remaining("live")).toBe(500);
  });

  it("pauses after each full batch, never after the last, and never beyond its budget", async () => {
    await seed("paced", 300, "now() - interval '1 hour'");
    const paced = await runFenceCleanup({ db: cleanupPool, budgetMs: 60_000, batchSize: 100, pauseMs: 80 });
    // Three full batches, each followed by a pause, then the short one that ends the run.
    expect(paced).toMatchObject({ deleted: 300, batches: 4, stoppedBy: "empty" });
    expect(paced.elapsedMs).toBeGreaterThanOrEqual(3 * 80);
    await seed("unpaced", 300, "now() - interval '1 hour'");
    const started = performance.now();
    // A pause that would run past the budget ends the run instead, reporting the backlog left.
    const capped = await runFenceCleanup({
      db: cleanupPool,
      budgetMs: 5_000,
      batchSize: 100,
      pauseMs: 10_000,
    });
    expect(capped).toMatchObject({ deleted: 100, batches: 1, backlog: 200, stoppedBy: "budget" });
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(await remaining("unpaced")).toBe(200);
  });

  it("stops when its time budget is spent and reports the backlog left", async () => {
    await seed("backlog", 5000, "now() - interval '1 day'");
    let tick = 0;
    const report = await runFenceCleanup({
      db: cleanupPool,
      budgetMs: 3, // the fake clock advances 1 per reading: two batches fit
      batchSize: 1000,
      pauseMs: 0,
      clock: () => tick++,
    });
    expect(report.stoppedBy).toBe("budget");
    expect(report.batches).toBe(2);
    expect(report.deleted).toBe(2000);
    expect(report.backlog).toBe(3000);
  });

  it("fences inserted while cleanup runs survive it (and their jobs stay fenced)", async () => {
    await seed("expired", 30_000, "now() - interval '1 minute'");
    const consumer = bed.consumer(awardPointsConsumer);
    let firstInsertedAt = Number.POSITIVE_INFINITY;
    const inserting = (async () => {
      for (let i = 0; i < 40; i++) {
        expect(
          await invoke(consumer, [sqsRecord(JSON.stringify(award(`during-${i}`, 1, "u-during")))]),
        ).toEqual([]);
        firstInsertedAt = Math.min(firstInsertedAt, performance.now());
      }
    })();
    const cleaning = runFenceCleanup({
      db: cleanupPool,
      budgetMs: 60_000,
      batchSize: 500,
      pauseMs: UNTESTED_PAUSE_MS,
    }).then((done) => ({ report: done, endedAt: performance.now() }));
    const [{ report, endedAt: cleanupEndedAt }] = await Promise.all([cleaning, inserting]);
    // The inserts did run while the cleanup did: one was committed before it ended.
    expect(firstInsertedAt).toBeLessThan(cleanupEndedAt);
    expect(report.deleted).toBe(30_000);
    expect(await remaining("expired")).toBe(0);
    expect(await remaining("during")).toBe(40);
    // A redelivery of any of them is still a duplicate.
    expect(await invoke(consumer, [sqsRecord(JSON.stringify(award("during-7", 1, "u-during")))])).toEqual([]);
    const ledger = await bed.db.withClient(
      async (c) =>
        (await c.query("SELECT count(*)::int AS n FROM award_points.ledger WHERE job_id = 'during-7'"))
          .rows[0].n,
    );
    expect(ledger).toBe(1);
  });

  it("two cleanups at once divide the work: every expired fence deleted once, no live one touched", async () => {
    await seed("twice", 20_000, "now() - interval '1 second'");
    await seed("keep", 1000, "now() + interval '1 hour'");
    const [a, b] = await Promise.all([
      runFenceCleanup({ db: cleanupPool, budgetMs: 60_000, batchSize: 700, pauseMs: UNTESTED_PAUSE_MS }),
      runFenceCleanup({ db: cleanupPool, budgetMs: 60_000, batchSize: 700, pauseMs: UNTESTED_PAUSE_MS }),
    ]);
    expect(a.deleted + b.deleted).toBe(20_000);
    expect(await remaining("twice")).toBe(0);
    expect(await remaining("keep")).toBe(1000);
  });

  it("the scheduled function spends a fraction of its remaining time and emits rows deleted and backlog", async () => {
    await seed("fn", 2500, "now() - interval '1 day'");
    const metrics = new Metrics({ namespace: "jobfence", serviceName: "fence-cleanup" });
    const added: Array<[string, number]> = [];
    metrics.addMetric = ((name: string, _unit: unknown, value: number) => {
      added.push([name, value]);
    }) as Metrics["addMetric"];
    const report = await cleanupInvocation(
      {
        db: cleanupPool,
        metrics,
        logger: new Logger({ serviceName: "fence-cleanup", logLevel: "SILENT" }),
        batchSize: 1000,
      },
      lambdaContext("fence-cleanup", 60_000),
    );
    expect(report).toMatchObject({ deleted: 2500, backlog: 0, stoppedBy: "empty" });
    expect(added).toEqual([
      [CLEANUP_METRIC.deleted, 2500],
      [CLEANUP_METRIC.backlog, 0],
      [CLEANUP_METRIC.held, 0],
      [CLEANUP_METRIC.staleAttempts, 0],
      [CLEANUP_METRIC.steps, 0],
      [CLEANUP_METRIC.idempotencyKeys, 0],
    ]);
  });
});
