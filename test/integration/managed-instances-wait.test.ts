/**
 * On Lambda Managed Instances a consumer's concurrent invocations may outnumber its connections (a
 * pool capped with JOBFENCE_POOL_MAX). A record that waits for a connection waits within its own
 * deadline: pg-pool's fixed 10-second checkout timeout must not cut the wait short and charge a
 * failed attempt to a job whose work never ran (enough of those dead-letter it as `exhausted`).
 */
import type { SQSEvent } from "aws-lambda";
import { afterAll, beforeAll, expect, it, vi } from "vitest";
import { concurrentInvocations, type InvocationStore } from "../../local/invoke-store.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import type { HostedConsumer } from "../../shared/consumer.ts";
import { POOL_DEFAULTS } from "../../shared/db/pool.ts";
import { MANAGED_INSTANCE_ENV } from "../../shared/invocation/concurrency.ts";
import { type AwardPointsBed, awardPointsBed } from "../support/award-points-bed.ts";
import { award, sqsRecord } from "../support/consumer-harness.ts";

/** The function's timeout: far beyond the pool's own checkout timeout. */
const TIMEOUT_MS = 60_000;
/** How long the first record holds the one connection: past the pool's checkout timeout. */
const HOLD_SECONDS = POOL_DEFAULTS.connectionTimeoutMs / 1000 + 2;

let bed: AwardPointsBed;
let invocations: InvocationStore;
let handler: HostedConsumer;

beforeAll(async () => {
  bed = await awardPointsBed();
  invocations = concurrentInvocations(4);
  vi.stubEnv(MANAGED_INSTANCE_ENV.maxConcurrency, "4");
  vi.stubEnv(MANAGED_INSTANCE_ENV.workerCount, "1");
  handler = bed.consumer({
    before: (job, tx) =>
      job.jobId === "wait-holder" ? tx.query(`SELECT pg_sleep(${HOLD_SECONDS})`) : Promise.resolve(),
    // Capped below the environment's concurrency of 4.
    configure: { poolMax: 1, functionTimeoutSeconds: TIMEOUT_MS / 1000 },
  });
}, 60_000);

afterAll(async () => {
  vi.unstubAllEnvs();
  invocations?.release();
  await bed?.close();
});

async function invoke(jobId: string) {
  const context = lambdaContext("award-points", TIMEOUT_MS);
  const event: SQSEvent = {
    Records: [sqsRecord(JSON.stringify(award(jobId, 1)), { messageId: `m-${jobId}` })],
  };
  return invocations.run(context, () => handler(event, context));
}

it("a record waiting for a capped pool waits past the pool's checkout timeout, within its deadline, and is applied", async () => {
  const holder = invoke("wait-holder");
  // The holder has the one connection before the waiter asks for it.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const waiter = await invoke("wait-waiter");
  expect(await holder).toEqual({ batchItemFailures: [] });
  expect(waiter).toEqual({ batchItemFailures: [] });
  const attempts = await bed.db.withClient(
    async (c) =>
      (await c.query("SELECT job_id, failures FROM core.message_attempts WHERE job_id LIKE 'wait-%'")).rows,
  );
  expect(attempts).toEqual([]);
  const fences = await bed.db.withClient(
    async (c) =>
      (await c.query("SELECT job_id FROM core.processed_jobs WHERE job_id LIKE 'wait-%' ORDER BY job_id"))
        .rows,
  );
  expect(fences.map((f) => f.job_id)).toEqual(["wait-holder", "wait-waiter"]);
}, 45_000);
