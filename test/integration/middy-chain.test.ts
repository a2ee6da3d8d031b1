/**
 * jobfence's Middy middlewares in a user's own chain (shared/middy/): the user's middlewares
 * before, between and after jobfence's, on the real `middy()` against real PostgreSQL, in the
 * consumer's own role. The guarantee holds whatever the user's middlewares do (fail after the
 * commit, fail inside the fence, return early past the commit), and the hooks run in the order
 * the chain declares.
 */
import middy, { type MiddlewareObj } from "@middy/core";
import type { Context, SQSRecord } from "aws-lambda";
import type pg from "pg";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { awardPoints } from "../../functions/award-points/award.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { type ConsumerDefinition, type PreparedConsumer, prepareConsumer } from "../../shared/consumer.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import {
  fenceTransaction,
  recordDeadLetter,
  runWork,
  sqsRecords,
  validateJob,
} from "../../shared/middy/index.ts";
import type { RecordOutcome } from "../../shared/record/outcome.ts";
import type { RecordContext } from "../../shared/record/record-context.ts";
import { startTestServices, TEST_OPS_BUS, type TestServices } from "../../testing/services.ts";
import { award, effectsOf, sqsRecord } from "../support/consumer-harness.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

const payload = z.object({ user_id: z.string(), points: z.number().int().positive() });
type Payload = z.output<typeof payload>;

/** What the work does, per test. */
let behaviour: (job: { jobId: string }) => void = () => {};

const definition: ConsumerDefinition<typeof payload> = {
  name: "award-points",
  payload,
  work: async (job, tx) => {
    await awardPoints(tx, {
      jobId: job.jobId,
      tenantId: job.tenantId,
      userId: job.payload.user_id,
      points: job.payload.points,
    });
    behaviour(job);
  },
};

/** Every hook of the user's middlewares, in the order it ran, with the record's step at that moment. */
let hooks: string[] = [];

type Request = { event: RecordContext<Payload>; response?: RecordOutcome | null; error?: unknown };

/** A user's middleware that records its hooks (and may do more). */
function watching(
  name: string,
  extra: { after?: (r: Request) => unknown; before?: (r: Request) => unknown } = {},
): MiddlewareObj<RecordContext<Payload>, RecordOutcome> {
  return {
    before: (request: Request) => {
      hooks.push(`${name}.before@${request.event.state.step}`);
      return extra.before?.(request);
    },
    after: (request: Request) => {
      hooks.push(`${name}.after@${request.event.state.step}:${request.response?.status}`);
      return extra.after?.(request);
    },
    onError: (request: Request) => {
      hooks.push(`${name}.onError@${request.event.state.step}:${request.response?.status ?? "error"}`);
    },
  };
}

let db: TestDatabase;
let services: TestServices;
let pool: pg.Pool;
let consumer: PreparedConsumer<typeof payload>;
const context: Context = lambdaContext("award-points");

beforeAll(async () => {
  [db, services] = await Promise.all([createTestDatabase(), startTestServices()]);
  pool = createPool({ connectionString: db.url, role: consumerRoleName("award-points"), max: 4 });
  consumer = prepareConsumer(definition, {
    pool,
    sqs: services.sqs,
    eventBridge: services.eventBridge,
    config: { databaseUrl: db.url, opsBusName: TEST_OPS_BUS },
  });
});

afterAll(async () => {
  await pool?.end();
  await services?.stop();
  await db?.drop();
});

beforeEach(() => {
  hooks = [];
  behaviour = () => {};
});

/** The user's chain: `outer` around jobfence's three, `inner` between the fence and the work. */
function userHandler(
  options: { outer?: Parameters<typeof watching>[1]; inner?: Parameters<typeof watching>[1] } = {},
) {
  const chain = middy(runWork(consumer), { timeoutEarlyInMillis: 0 })
    .use(watching("outer", options.outer))
    .use(recordDeadLetter(consumer))
    .use(validateJob(consumer))
    .use(fenceTransaction(consumer))
    .use(watching("inner", options.inner));
  const handler = sqsRecords(consumer, chain);
  return async (records: SQSRecord[]) =>
    (await handler({ Records: records }, context)).batchItemFailures.map((f) => f.itemIdentifier);
}

describe("a user's Middy chain around and between jobfence's middlewares", () => {
  it("runs the hooks in the declared order, inside and outside the fence transaction, and applies a job once", async () => {
    const handler = userHandler();
    const record = sqsRecord(JSON.stringify(award("chain-order", 7, "u-order")));
    expect(await handler([record])).toEqual([]);
    expect(hooks).toEqual([
      // Outside: nothing read yet. Inside: the fence transaction is open around the work.
      "outer.before@received",
      "inner.before@open",
      // The work ran before `inner.after`, still inside the uncommitted transaction.
      "inner.after@worked:applied",
      // jobfence's commit ran between the two `after`s.
      "outer.after@applied:applied",
    ]);
    hooks = [];
    // The same message again (a duplicate delivery): the fence stops it before the work.
    expect(await handler([{ ...record, messageId: "chain-order-again" }])).toEqual([]);
    expect(hooks).toEqual([
      "outer.before@received",
      "inner.before@duplicate",
      "inner.after@duplicate:duplicate",
      "outer.after@duplicate:duplicate",
    ]);
    expect(await effectsOf(db, "chain-order")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
  });

  it("a failure of the work: the fence rolls back inside, the user's outer middleware sees the dead letter as the outcome", async () => {
    behaviour = () => {
      throw new PermanentJobError("no such user");
    };
    const handler = userHandler();
    expect(await handler([sqsRecord(JSON.stringify(award("chain-hard", 7, "u-hard")))])).toEqual([]);
    expect(hooks).toEqual([
      "outer.before@received",
      "inner.before@open",
      "inner.onError@working:error",
      "outer.onError@abandoned:dead-lettered",
    ]);
    expect(await effectsOf(db, "chain-hard")).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
  });

  it("a transient failure is retried: reported, nothing committed, no dead letter", async () => {
    behaviour = () => {
      throw new Error("gateway busy");
    };
    const handler = userHandler();
    const record = sqsRecord(JSON.stringify(award("chain-transient", 7, "u-transient")));
    expect(await handler([record])).toEqual([record.messageId]);
    expect(await effectsOf(db, "chain-transient")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
  });

  it("a user's middleware inside the fence that fails after the work: nothing of the work commits", async () => {
    const handler = userHandler({
      inner: {
        after: () => {
          throw new PermanentJobError("the user's audit refused the job");
        },
      },
    });
    expect(await handler([sqsRecord(JSON.stringify(award("chain-inner-fails", 7, "u-inner")))])).toEqual([]);
    expect(await effectsOf(db, "chain-inner-fails")).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
  });

  it("a user's middleware outside that fails after the commit: the job stays applied, once, and is acked", async () => {
    const handler = userHandler({
      outer: {
        after: () => {
          throw new Error("the user's reporting broke");
        },
      },
    });
    expect(await handler([sqsRecord(JSON.stringify(award("chain-outer-fails", 7, "u-outer")))])).toEqual([]);
    expect(await effectsOf(db, "chain-outer-fails")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
  });

  it("a user's middleware inside that returns early past the commit: rolled back and left in the queue, then applied once", async () => {
    let early = true;
    const handler = userHandler({
      inner: { after: () => (early ? { status: "applied" } : undefined) },
    });
    const record = sqsRecord(JSON.stringify(award("chain-early", 7, "u-early")));
    expect(await handler([record])).toEqual([record.messageId]);
    expect(await effectsOf(db, "chain-early")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
    early = false;
    expect(
      await handler([{ ...record, attributes: { ...record.attributes, ApproximateReceiveCount: "2" } }]),
    ).toEqual([]);
    expect(await effectsOf(db, "chain-early")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
  });

  it("a user's outer middleware that rethrows the settled failure: the failure is counted once, not settled again", async () => {
    behaviour = () => {
      throw new Error("gateway busy");
    };
    const chain = middy(runWork(consumer), { timeoutEarlyInMillis: 0 })
      .use({
        onError: (request: Request) => {
          throw request.error;
        },
      })
      .use(recordDeadLetter(consumer))
      .use(validateJob(consumer))
      .use(fenceTransaction(consumer));
    const handler = sqsRecords(consumer, chain);
    const record = sqsRecord(JSON.stringify(award("chain-rethrown", 7, "u-rethrown")));
    const response = await handler({ Records: [record] }, context);
    expect(response.batchItemFailures).toEqual([{ itemIdentifier: record.messageId }]);
    const { rows } = await db.withClient((c) =>
      c.query("SELECT failures FROM core.message_attempts WHERE job_id = $1", ["chain-rethrown"]),
    );
    expect(rows).toEqual([{ failures: 1 }]);
  });

  it("a chain's claimed outcome counts for nothing: an early 'applied' before any step, or a rewritten response after a failure, leaves the record in the queue", async () => {
    const early = userHandler({ outer: { before: () => ({ status: "applied" }) } });
    const first = sqsRecord(JSON.stringify(award("chain-claims-early", 7, "u-claims")));
    expect(await early([first])).toEqual([first.messageId]);
    expect(await effectsOf(db, "chain-claims-early")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });

    behaviour = () => {
      throw new Error("gateway busy");
    };
    const chain = middy(runWork(consumer), { timeoutEarlyInMillis: 0 })
      .use({
        onError: (request: Request) => {
          request.response = { status: "applied" };
        },
      })
      .use(recordDeadLetter(consumer))
      .use(validateJob(consumer))
      .use(fenceTransaction(consumer));
    const rewritten = sqsRecord(JSON.stringify(award("chain-claims-rewritten", 7, "u-claims")));
    const response = await sqsRecords(consumer, chain)({ Records: [rewritten] }, context);
    // The spine settled a retry: the record stays in the queue whatever the chain's response says.
    expect(response.batchItemFailures).toEqual([{ itemIdentifier: rewritten.messageId }]);
  });

  it("a chain whose handler is not runWork, or runs the work twice, commits nothing", async () => {
    const noWork = sqsRecords(
      consumer,
      middy(async (_rc: RecordContext<Payload>) => ({ status: "applied" }) as RecordOutcome, {
        timeoutEarlyInMillis: 0,
      })
        .use(recordDeadLetter(consumer))
        .use(validateJob(consumer))
        .use(fenceTransaction(consumer)),
    );
    const record = sqsRecord(JSON.stringify(award("chain-no-work", 7, "u-no-work")));
    expect((await noWork({ Records: [record] }, context)).batchItemFailures).toEqual([
      { itemIdentifier: record.messageId },
    ]);
    expect(await effectsOf(db, "chain-no-work")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });

    const twice = userHandler({ inner: { after: (request) => runWork(consumer)(request.event) } });
    const again = sqsRecord(JSON.stringify(award("chain-work-twice", 7, "u-twice")));
    expect(await twice([again])).toEqual([again.messageId]);
    expect(await effectsOf(db, "chain-work-twice")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
  });

  it("a middleware that hands the steps a copy of the record's context changes nothing the spine decides", async () => {
    const handler = userHandler({
      outer: {
        before: (request) => {
          request.event = { ...request.event };
        },
      },
      inner: { after: () => ({ status: "applied" }) },
    });
    const record = sqsRecord(JSON.stringify(award("chain-copy", 7, "u-copy")));
    expect(await handler([record])).toEqual([record.messageId]);
    expect(await effectsOf(db, "chain-copy")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
    // Nothing was left open: no session of the test database is idle in a transaction.
    const { rows } = await db.withClient((c) =>
      c.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
      ),
    );
    expect(rows).toEqual([{ n: 0 }]);
  });

  it("Middy's timeoutEarly answering while the work still runs: the after hooks cannot commit half a job", async () => {
    behaviour = () => {};
    const slow: ConsumerDefinition<typeof payload> = {
      ...definition,
      work: async (job, tx) => {
        await tx.query(
          "INSERT INTO award_points.ledger (job_id, tenant_id, user_id, points) VALUES ($1, $2, $3, 1)",
          [job.jobId, job.tenantId, job.payload.user_id],
        );
        await tx.query("SELECT pg_sleep(0.6)");
        await tx.query(
          "INSERT INTO award_points.ledger (job_id, tenant_id, user_id, points) VALUES ($1, $2, $3, 2)",
          [job.jobId, job.tenantId, job.payload.user_id],
        );
      },
    };
    const slowConsumer = prepareConsumer(slow, {
      pool,
      sqs: services.sqs,
      eventBridge: services.eventBridge,
      config: { databaseUrl: db.url, opsBusName: TEST_OPS_BUS },
    });
    const chain = middy(runWork(slowConsumer), {
      timeoutEarlyInMillis: 29_800,
      timeoutEarlyResponse: () => ({ status: "applied" }),
    })
      .use(recordDeadLetter(slowConsumer))
      .use(validateJob(slowConsumer))
      .use(fenceTransaction(slowConsumer));
    const record = sqsRecord(JSON.stringify(award("chain-timeout-early", 7, "u-timeout")));
    const response = await sqsRecords(slowConsumer, chain)({ Records: [record] }, context);
    expect(response.batchItemFailures).toEqual([{ itemIdentifier: record.messageId }]);
    await new Promise((resolve) => setTimeout(resolve, 800));
    expect(await effectsOf(db, "chain-timeout-early")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
  });

  it("a chain mixing two consumers' middlewares is refused: nothing runs under the other's fence", async () => {
    // Works that would succeed under either role: only the refusal can keep B's fence from committing A's job.
    const noop: ConsumerDefinition<typeof payload> = { name: "award-points", payload, work: async () => {} };
    const runtime = (p: pg.Pool) => ({
      pool: p,
      sqs: services.sqs,
      eventBridge: services.eventBridge,
      config: { databaseUrl: db.url, opsBusName: TEST_OPS_BUS },
    });
    const otherPool = createPool({ connectionString: db.url, role: consumerRoleName("notify-user"), max: 2 });
    try {
      const a = prepareConsumer(noop, runtime(pool));
      const b = prepareConsumer({ ...noop, name: "notify-user" }, runtime(otherPool));
      const chain = middy(runWork(a), { timeoutEarlyInMillis: 0 })
        .use(recordDeadLetter(a))
        .use(validateJob(a))
        .use(fenceTransaction(b));
      const record = sqsRecord(JSON.stringify(award("chain-mixed", 7, "u-mixed")));
      const response = await sqsRecords(a, chain)({ Records: [record] }, context);
      expect(response.batchItemFailures).toEqual([{ itemIdentifier: record.messageId }]);
      expect(await effectsOf(db, "chain-mixed")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
    } finally {
      await otherPool.end();
    }
  });

  it("a chain bug on a redelivery releases the delivery's claim: later deliveries count no interruption", async () => {
    const early = userHandler({ inner: { after: () => ({ status: "applied" }) } });
    const record = sqsRecord(JSON.stringify(award("chain-claim", 7, "u-claim")), { receiveCount: 2 });
    expect(await early([record])).toEqual([record.messageId]);
    const handler = userHandler();
    const next = { ...record, attributes: { ...record.attributes, ApproximateReceiveCount: "3" } };
    expect(await handler([next])).toEqual([]);
    const { rows } = await db.withClient((c) =>
      c.query("SELECT interruptions FROM core.message_attempts WHERE job_id = $1", ["chain-claim"]),
    );
    expect(rows.every((r) => r.interruptions === 0)).toBe(true);
    expect(await effectsOf(db, "chain-claim")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
  });

  it("a user's chain is refused at wiring for a consumer in batch-commit mode", () => {
    const batch = prepareConsumer(
      { ...definition, commitMode: "batch" },
      {
        pool,
        sqs: services.sqs,
        eventBridge: services.eventBridge,
        config: { databaseUrl: db.url, opsBusName: TEST_OPS_BUS },
      },
    );
    const chain = middy(runWork(batch))
      .use(recordDeadLetter(batch))
      .use(validateJob(batch))
      .use(fenceTransaction(batch));
    expect(() => sqsRecords(batch, chain)).toThrow(/per-record mode only/);
  });

  it("a chain with the fence before the validation: every record left in the queue, nothing dead-lettered or applied", async () => {
    const chain = middy(runWork(consumer), { timeoutEarlyInMillis: 0 })
      .use(recordDeadLetter(consumer))
      .use(fenceTransaction(consumer))
      .use(validateJob(consumer));
    const handler = sqsRecords(consumer, chain);
    const record = sqsRecord(JSON.stringify(award("chain-misordered", 7, "u-misordered")));
    const response = await handler({ Records: [record] }, context);
    expect(response.batchItemFailures).toEqual([{ itemIdentifier: record.messageId }]);
    expect(await effectsOf(db, "chain-misordered")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
  });
});
