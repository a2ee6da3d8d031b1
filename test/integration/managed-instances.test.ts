/**
 * Lambda Managed Instances (docs/scaling.md): many invocations of one consumer at once in one
 * process, with the managed runtime's environment (`AWS_LAMBDA_MAX_CONCURRENCY`, one worker
 * thread) and its per-invocation store, through the real `createConsumer` against PostgreSQL.
 *
 * - The pool is sized from the environment's concurrency, so concurrent invocations do not queue
 *   behind two connections: 32 invocations of 5 records, 100 ms of work each, take about as long
 *   as one does.
 * - A record waiting for a connection gives up at its invocation's deadline: it ends interrupted,
 *   reported back and redone by the next delivery, and the connection its abandoned wait is granted
 *   later opens no fence (it goes straight back to the pool).
 */
import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from "aws-lambda";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { concurrentInvocations, type InvocationStore } from "../../local/invoke-store.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import type { ConsumerConfigInput } from "../../shared/config/consumer-config.ts";
import type { HostedConsumer } from "../../shared/consumer.ts";
import { installFaultHook } from "../../shared/fault-points.ts";
import { MANAGED_INSTANCE_ENV } from "../../shared/invocation/concurrency.ts";
import { type AwardPointsBed, awardPointsBed } from "../support/award-points-bed.ts";
import { award, sqsRecord } from "../support/consumer-harness.ts";

const CONCURRENCY = 32;

let bed: AwardPointsBed;
let invocations: InvocationStore;

beforeAll(async () => {
  bed = await awardPointsBed();
  // As the managed runtime starts: its per-invocation store first, then the environment it sets.
  invocations = concurrentInvocations(CONCURRENCY);
  vi.stubEnv(MANAGED_INSTANCE_ENV.maxConcurrency, String(CONCURRENCY));
  vi.stubEnv(MANAGED_INSTANCE_ENV.workerCount, "1");
});

afterAll(async () => {
  installFaultHook(undefined);
  vi.unstubAllEnvs();
  invocations?.release();
  await bed?.close();
});

/** The real consumer, building its own pool from the configuration and the environment. */
function consumer(
  work: (jobId: string, sleep: (seconds: number) => Promise<unknown>) => Promise<void>,
  configure: Partial<ConsumerConfigInput> = {},
): HostedConsumer {
  return bed.consumer({
    before: (job, tx) => work(job.jobId, (seconds) => tx.query("SELECT pg_sleep($1)", [seconds])),
    configure,
  });
}

/** One invocation as the managed runtime runs it: in its own store, with its own deadline. */
async function invoke(
  handler: HostedConsumer,
  records: SQSRecord[],
  timeoutMs = 30_000,
): Promise<{ response: SQSBatchResponse; ms: number; returnedAt: number }> {
  const context: Context = lambdaContext("award-points", timeoutMs);
  const event: SQSEvent = { Records: records };
  const started = performance.now();
  const response = await invocations.run(context, () => handler(event, context));
  return { response, ms: performance.now() - started, returnedAt: performance.now() };
}

async function ledgerRows(prefix: string): Promise<Map<string, number>> {
  return bed.db.withClient(async (c) => {
    const { rows } = await c.query<{ job_id: string; n: number }>(
      "SELECT job_id, count(*)::int AS n FROM award_points.ledger WHERE job_id LIKE $1 GROUP BY job_id",
      [`${prefix}%`],
    );
    return new Map(rows.map((r) => [r.job_id, r.n]));
  });
}

describe("Lambda Managed Instances", () => {
  it("sizes the pool from AWS_LAMBDA_MAX_CONCURRENCY: 32 concurrent invocations run side by side, each job once", async () => {
    let running = 0;
    let peak = 0;
    const handler = consumer(async (_jobId, sleep) => {
      peak = Math.max(peak, ++running);
      try {
        // Long enough that the 32 invocations overlap even on a busy machine, where opening their
        // connections is slow: 100 ms once saw 11 of them side by side in a loaded CI run.
        await sleep(0.4);
      } finally {
        running--;
      }
    });
    expect(handler.pool.options.max).toBe(CONCURRENCY);
    const batches = Array.from({ length: CONCURRENCY }, (_, i) =>
      Array.from({ length: 5 }, (_, k) => sqsRecord(JSON.stringify(award(`lmi-size-${i}-${k}`, 1)))),
    );
    const runs = await Promise.all(batches.map((records) => invoke(handler, records)));
    expect(runs.flatMap((r) => r.response.batchItemFailures)).toEqual([]);
    const ledger = await ledgerRows("lmi-size-");
    expect(ledger.size).toBe(CONCURRENCY * 5);
    expect([...ledger.values()].every((n) => n === 1)).toBe(true);
    // The works ran side by side, each on its own connection: behind a pool of two, at most two
    // at a time, and each invocation would take about 32 × 5 × 400 ms ÷ 2 = 32 s instead of 2 s
    // (bench/managed-instances.ts measures it).
    expect(peak).toBeGreaterThanOrEqual(CONCURRENCY / 2);
  });

  it("a record waiting for a connection gives up at its deadline: interrupted, no fence opened after the return, redone once", async () => {
    const handler = consumer(
      async (jobId, sleep) => {
        if (jobId === "lmi-wait-holder") await sleep(4);
      },
      // One connection for every invocation: the others wait for it.
      {
        poolMax: 1,
        functionTimeoutSeconds: 4,
        lockTimeoutMs: 500,
        recordBudgetMs: 1200,
        returnReserveMs: 500,
      },
    );
    expect(handler.pool.options.max).toBe(1);
    const opened: { jobIds: readonly string[]; at: number }[] = [];
    installFaultHook((point, context) => {
      if (point === "fence:after-insert")
        opened.push({ jobIds: context.jobIds ?? [], at: performance.now() });
    });
    const waiters = ["lmi-wait-a", "lmi-wait-b", "lmi-wait-c"];
    // The holder takes the one connection and keeps it past the waiters' deadlines (2 s), until
    // its own (3.5 s) destroys it.
    const holding = invoke(handler, [sqsRecord(JSON.stringify(award("lmi-wait-holder", 1)))], 4000);
    await vi.waitFor(() => expect(opened.flatMap((o) => o.jobIds)).toContain("lmi-wait-holder"));
    const waiting = waiters.map((jobId) =>
      invoke(handler, [sqsRecord(JSON.stringify(award(jobId, 1)), { messageId: jobId })], 2000),
    );
    const waited = await Promise.all(waiting);
    const held = await holding;
    for (const [i, run] of waited.entries()) {
      expect(run.response.batchItemFailures).toEqual([{ itemIdentifier: waiters[i] }]);
      expect(run.ms).toBeLessThan(2000);
    }
    expect(held.response.batchItemFailures).toHaveLength(1);
    // The holder's connection is gone; a queued wait given it now would open its fence.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const late = opened.filter((o) => o.jobIds.some((id) => waiters.includes(id)));
    expect(late).toEqual([]);
    expect(await ledgerRows("lmi-wait-")).toEqual(new Map());

    // The next delivery of each runs it, once.
    installFaultHook(undefined);
    const again = await Promise.all(
      [...waiters, "lmi-wait-holder"].map((jobId) =>
        invoke(handler, [sqsRecord(JSON.stringify(award(jobId, 1)), { receiveCount: 2 })]),
      ),
    );
    expect(again.flatMap((r) => r.response.batchItemFailures)).toEqual([]);
    expect(await ledgerRows("lmi-wait-")).toEqual(
      new Map([...waiters, "lmi-wait-holder"].map((id) => [id, 1])),
    );
  });

  it("a dead letter waiting for a connection gives up at its deadline: none lands after the return, the next delivery writes it once", async () => {
    const handler = consumer(
      async (jobId, sleep) => {
        if (jobId === "lmi-dl-holder") await sleep(4);
      },
      {
        poolMax: 1,
        functionTimeoutSeconds: 4,
        lockTimeoutMs: 500,
        recordBudgetMs: 1200,
        returnReserveMs: 500,
      },
    );
    const opened: string[] = [];
    installFaultHook((point, context) => {
      if (point === "fence:after-insert") opened.push(...(context.jobIds ?? []));
    });
    const holding = invoke(handler, [sqsRecord(JSON.stringify(award("lmi-dl-holder", 1)))], 4000);
    await vi.waitFor(() => expect(opened).toContain("lmi-dl-holder"));
    // Poison: its only write is its dead letter, which waits for the one connection.
    const poison = () => sqsRecord("{not json", { messageId: "lmi-dl-poison" });
    const waited = await invoke(handler, [poison()], 2000);
    expect(waited.response.batchItemFailures).toEqual([{ itemIdentifier: "lmi-dl-poison" }]);
    await holding;
    // The holder's connection is gone: a write still queued for one would land now.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    installFaultHook(undefined);
    const deadLetters = () =>
      bed.db.withClient(async (c) => {
        const { rows } = await c.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM core.dead_letters WHERE job_id = 'lmi-dl-poison'",
        );
        return rows[0]?.n;
      });
    expect(await deadLetters()).toBe(0);
    const again = await invoke(handler, [poison()]);
    expect(again.response.batchItemFailures).toEqual([]);
    expect(await deadLetters()).toBe(1);
  });
});
