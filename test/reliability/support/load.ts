/** Sending award-points jobs in bulk and waiting for a run to settle. */
import { SendMessageBatchCommand, type SQSClient } from "@aws-sdk/client-sqs";
import type { SqsEmulator } from "../../../local/sqs-emulator.ts";

/** One award-points job of a run. */
export interface LoadJob {
  readonly jobId: string;
  readonly tenantId: string;
  readonly userId: string;
  readonly points: number;
}

/** `count` jobs `<prefix>-<i>` of tenant `t-<prefix>`, spread over seven users. */
export function loadJobs(prefix: string, count: number): LoadJob[] {
  return Array.from({ length: count }, (_, i) => ({
    jobId: `${prefix}-${i}`,
    tenantId: `t-${prefix}`,
    userId: `u-${i % 7}`,
    points: (i % 9) + 1,
  }));
}

/** The envelope of a job. */
export function envelopeOf(job: LoadJob): string {
  return JSON.stringify({
    job_id: job.jobId,
    tenant_id: job.tenantId,
    correlation_id: `corr-${job.jobId}`,
    payload: { user_id: job.userId, points: job.points },
  });
}

/** Sends every body, ten per SendMessageBatch; throws if any entry failed. */
export async function sendBodies(sqs: SQSClient, queueUrl: string, bodies: readonly string[]): Promise<void> {
  for (let i = 0; i < bodies.length; i += 10) {
    const result = await sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: bodies.slice(i, i + 10).map((body, j) => ({ Id: String(j), MessageBody: body })),
      }),
    );
    if (result.Failed && result.Failed.length > 0)
      throw new Error(`SendMessageBatch failed: ${JSON.stringify(result.Failed)}`);
  }
}

/** Messages a queue of the in-process emulator holds: ready, delayed and in flight. */
export function messagesIn(emulator: SqsEmulator, queueName: string): number {
  const queue = emulator.server.inspectQueue(queueName);
  if (!queue) throw new Error(`the emulator has no queue ${queueName}`);
  return queue.messages.ready.length + queue.messages.delayed.length + queue.messages.inflight.length;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Polls `probe` until `done` accepts its value; a probe that throws (the database is down) counts
 * as not done. Throws with the last value after `timeoutMs`.
 */
export async function waitUntil<T>(
  what: string,
  probe: () => Promise<T>,
  done: (value: T) => boolean,
  timeoutMs: number,
  intervalMs = 250,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      last = value;
      if (done(value)) return value;
    } catch (error) {
      last = error instanceof Error ? error.message : error;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(last)}`);
    await sleep(intervalMs);
  }
}
