/**
 * A replay to a FIFO queue that is tried again after its first send's answer was lost (issue 30,
 * class 2, found by review): the first copy reached SQS, failed again at once and merged into the
 * still-pending dead letter; a second try under the same deduplication id was dropped by SQS yet
 * marked the row replayed, and the job was neither applied nor pending. Each replay attempt now
 * sends under a deduplication id of its own, so a retry is delivered and its failure recorded.
 */
import { DeleteMessageCommand, type SQSClient } from "@aws-sdk/client-sqs";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { createPool } from "../../shared/db/pool.ts";
import { planOperation, startOperation } from "../../shared/dead-letters/bulk-operations.ts";
import { runChunk } from "../../shared/dead-letters/bulk-worker.ts";
import { replayDeadLetter } from "../../shared/dead-letters/replay.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import { TEST_SEAL_KEY } from "../support/api-harness.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  invoke,
  sqsRecord,
} from "../support/consumer-harness.ts";
import { receiveAll } from "../support/sqs.ts";

let bed: ConsumerTestBed;
let ops: pg.Pool;
let queueUrl: string;
let admin: pg.Client;

/** award-points whose every run fails for good: each copy of a job becomes, or merges into, a dead letter. */
const alwaysHard = {
  ...awardPointsConsumer,
  retry: { maxAttempts: 1, rationale: "every run fails for good in this test" },
  work: async () => {
    throw new PermanentJobError("account closed");
  },
} as typeof awardPointsConsumer;

/** An SQS client whose sends reach SQS and whose answers are lost (`error` is thrown after). */
function answerLost(error: Error): SQSClient {
  return {
    async send(command: unknown) {
      await bed.sqs.send(command as never);
      throw error;
    },
  } as unknown as SQSClient;
}

beforeAll(async () => {
  bed = await consumerTestBed();
  ops = createPool({ connectionString: bed.db.url, role: "jobfence_ops", max: 4 });
  queueUrl = (await bed.queue("fifo-replay-retry.fifo", { FifoQueue: "true" })).url;
  admin = new pg.Client({ connectionString: bed.db.url });
  await admin.connect();
});

afterAll(async () => {
  await admin?.end();
  await ops?.end();
  await bed?.close();
});

/** Delivers every message on the queue to the failing consumer. */
async function deliverAll(): Promise<number> {
  const handler = bed.consumer(alwaysHard, { queueUrl });
  const messages = await receiveAll(bed.sqs, queueUrl);
  for (const m of messages) {
    expect(await invoke(handler, [sqsRecord(m.Body as string, { groupId: "g" })])).toEqual([]);
    // Acked, as Lambda's event source deletes a record the handler did not report (a FIFO group
    // holds its later messages back while one is in flight).
    await bed.sqs.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: m.ReceiptHandle }));
  }
  return messages.length;
}

/** The job's dead letters by status: it must end applied or with exactly one pending. */
async function statusesOf(jobId: string): Promise<string[]> {
  const { rows } = await ops.query<{ status: string }>(
    "SELECT status FROM core.dead_letters WHERE job_id = $1 ORDER BY created_at, id",
    [jobId],
  );
  return rows.map((r) => r.status);
}

async function failOnce(jobId: string, tenant: string): Promise<string> {
  const handler = bed.consumer(alwaysHard, { queueUrl });
  expect(
    await invoke(handler, [sqsRecord(JSON.stringify(award(jobId, 5, "u-1", tenant)), { groupId: jobId })]),
  ).toEqual([]);
  const { rows } = await ops.query<{ id: string }>("SELECT id FROM core.dead_letters WHERE job_id = $1", [
    jobId,
  ]);
  return rows[0]?.id as string;
}

describe("a FIFO replay tried again after its first send's answer was lost", () => {
  it("single replay: the retry is delivered, and its failure stays pending", async () => {
    const jobId = "frr-single";
    const id = await failOnce(jobId, "t_frr_single");
    const timeout = Object.assign(new Error("socket hang up"), { name: "TimeoutError" });
    await expect(replayDeadLetter({ pool: ops, sqs: answerLost(timeout) }, id, "operator")).rejects.toThrow(
      /not sent/,
    );
    // The first copy fails again while the row is pending and nobody holds it: merged, acked.
    expect(await deliverAll()).toBe(1);
    expect(await statusesOf(jobId)).toEqual(["pending_review"]);
    // The operator tries again, as the API's answer advised.
    await replayDeadLetter({ pool: ops, sqs: bed.sqs }, id, "operator");
    expect(await deliverAll()).toBe(1);
    expect(await statusesOf(jobId)).toEqual(["replayed", "pending_review"]);
  });

  it("bulk replay: a chunk rerun after its send's answer was lost sends again, and each failure stays pending", async () => {
    const tenant = "t_frr_bulk";
    const jobs = ["frr-bulk-1", "frr-bulk-2"];
    for (const jobId of jobs) await failOnce(jobId, tenant);
    const deps = { pool: ops, sealKey: TEST_SEAL_KEY };
    const plan = await planOperation(deps, "replay", { tenant_id: tenant });
    await startOperation(
      deps,
      {
        kind: "replay",
        filter: { tenant_id: tenant },
        token: plan.token as string,
        rate_per_second: 1000,
        delay_seconds: 0,
      },
      "operator",
    );
    const unavailable = Object.assign(new Error("Service Unavailable"), {
      name: "ServiceUnavailable",
      $metadata: { httpStatusCode: 503 },
      $retryable: {},
    });
    await runChunk({ pool: ops, sqs: answerLost(unavailable) });
    expect(await deliverAll()).toBe(2);
    for (const jobId of jobs) expect(await statusesOf(jobId)).toEqual(["pending_review"]);
    // The worker reruns the chunk once its backoff has passed (brought forward here).
    await admin.query("UPDATE core.bulk_operations SET next_run_at = now() WHERE status = 'running'");
    await runChunk({ pool: ops, sqs: bed.sqs });
    expect(await deliverAll()).toBe(2);
    for (const jobId of jobs) expect(await statusesOf(jobId)).toEqual(["replayed", "pending_review"]);
  });
});
