/**
 * Returns records that did not run (left unstarted by the time budget, or held back behind their
 * FIFO group's failure) to their queue at once: visibility 0, so they cost nothing but the receive.
 * On a FIFO queue that is safe for order: SQS hands out nothing of a group while an earlier
 * message of it is in flight, and the group's failed head is hidden for its backoff.
 */
import { ChangeMessageVisibilityBatchCommand, type SQSClient } from "@aws-sdk/client-sqs";
import type { SQSRecord } from "aws-lambda";
import { queueUrlFromArn } from "../sqs/queue-url.ts";

/** SQS takes at most 10 entries per batch call. */
const ENTRIES_PER_CALL = 10;

/**
 * Makes `records` visible again, within `timeoutMs`. Never throws: a record this cannot return
 * comes back when the queue's visibility timeout ends, which costs time and nothing else.
 */
export async function returnToQueue(
  sqs: SQSClient,
  queueUrl: string | undefined,
  records: readonly SQSRecord[],
  timeoutMs: number,
): Promise<void> {
  const byQueue = new Map<string, SQSRecord[]>();
  for (const record of records) {
    let url: string;
    try {
      url = queueUrl ?? queueUrlFromArn(record.eventSourceARN);
    } catch {
      continue;
    }
    byQueue.set(url, [...(byQueue.get(url) ?? []), record]);
  }
  const signal = AbortSignal.timeout(Math.max(1, Math.floor(timeoutMs)));
  const calls: Promise<unknown>[] = [];
  for (const [url, queued] of byQueue) {
    for (let i = 0; i < queued.length; i += ENTRIES_PER_CALL) {
      const entries = queued.slice(i, i + ENTRIES_PER_CALL).map((record, n) => ({
        Id: String(n),
        ReceiptHandle: record.receiptHandle,
        VisibilityTimeout: 0,
      }));
      calls.push(
        sqs.send(new ChangeMessageVisibilityBatchCommand({ QueueUrl: url, Entries: entries }), {
          abortSignal: signal,
        }),
      );
    }
  }
  await Promise.allSettled(calls);
}
