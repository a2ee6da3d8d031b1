/**
 * A redelivery's claim whose COMMIT the server applies before the invocation's deadline and whose
 * acknowledgement arrives after it (latency, a stalled network). The invocation's interruption has
 * already run and found no claim to release; the claim then returns with the work never started.
 * Its marker must not stay behind: the next delivery would count an interruption of a work that
 * never ran, and enough of them dead-letter a job as `interrupted` that was never attempted.
 */
import type { SQSEvent } from "aws-lambda";
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { lambdaContext } from "../../local/lambda-context.ts";
import type { HostedConsumer } from "../../shared/consumer.ts";
import { type AwardPointsBed, awardPointsBed } from "../support/award-points-bed.ts";
import { award, sqsRecord } from "../support/consumer-harness.ts";

/** The function's timeout, and how late the one slowed COMMIT's acknowledgement comes: past it. */
const TIMEOUT_MS = 3000;
const LATE_ACK_MS = 2800;

let bed: AwardPointsBed;
let handler: HostedConsumer;
let worked = 0;
/** The next COMMIT's acknowledgement is held back this long (then the delay is spent). */
let lateAckMs = 0;
const query = pg.Client.prototype.query;

beforeAll(async () => {
  bed = await awardPointsBed();
  (pg.Client.prototype as { query: unknown }).query = function (this: pg.Client, ...args: unknown[]) {
    const sent = (query as (...a: unknown[]) => unknown).apply(this, args);
    if (args[0] !== "COMMIT" || lateAckMs === 0 || !(sent instanceof Promise)) return sent;
    const ms = lateAckMs;
    lateAckMs = 0;
    return sent.then((answer) => new Promise((resolve) => setTimeout(() => resolve(answer), ms)));
  };
  handler = bed.consumer({
    before: async () => {
      worked++;
    },
    configure: {
      functionTimeoutSeconds: TIMEOUT_MS / 1000,
      lockTimeoutMs: 400,
      recordBudgetMs: 1000,
      returnReserveMs: 500,
    },
  });
});

afterAll(async () => {
  (pg.Client.prototype as { query: unknown }).query = query;
  await bed?.close();
});

/** Delivers the one message as its `receiveCount`-th delivery; `late`: its claim's COMMIT is acknowledged after the deadline. */
async function deliver(receiveCount: number, late: boolean) {
  lateAckMs = late ? LATE_ACK_MS : 0;
  const event: SQSEvent = {
    Records: [sqsRecord(JSON.stringify(award("late-claim", 1)), { messageId: "m-late-claim", receiveCount })],
  };
  const response = await handler(event, lambdaContext("award-points", TIMEOUT_MS));
  // The late acknowledgement and whatever follows it land before the next delivery.
  await new Promise((resolve) => setTimeout(resolve, LATE_ACK_MS - 2000 + 500));
  return response;
}

it("counts no interruption for a claim acknowledged after the deadline, and the job is applied once", async () => {
  expect((await deliver(2, true)).batchItemFailures).toHaveLength(1);
  expect((await deliver(3, true)).batchItemFailures).toHaveLength(1);
  expect(worked).toBe(0);
  expect((await deliver(4, false)).batchItemFailures).toEqual([]);
  const [ledger] = await bed.db.withClient(
    async (c) =>
      (
        await c.query(
          "SELECT started, interruptions FROM core.message_attempts WHERE message_id = 'm-late-claim'",
        )
      ).rows,
  );
  const letters = await bed.db.withClient(
    async (c) => (await c.query("SELECT error_kind FROM core.dead_letters WHERE job_id = 'late-claim'")).rows,
  );
  expect({ worked, letters, interruptions: ledger?.interruptions }).toEqual({
    worked: 1,
    letters: [],
    interruptions: 0,
  });
});
