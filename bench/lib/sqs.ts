/**
 * SQS helpers the benchmarks share, for the emulator the local stack runs (fauxqs) or any endpoint:
 * a queue created with its attributes, many messages sent in batches, what a queue still holds, and
 * the SQS record Lambda would deliver for a benchmark's job.
 */

import {
  CreateQueueCommand,
  GetQueueAttributesCommand,
  SendMessageBatchCommand,
  SetQueueAttributesCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import { LOCAL_ACCOUNT } from "../../local/aws-clients.ts";

/** A queue's URL (path-style on `endpoint`) and ARN. */
export interface BenchQueue {
  readonly url: string;
  readonly arn: string;
}

/**
 * Creates queue `name` on `endpoint` and sets `attributes` (as local/stack.ts does: set after
 * creation, so an existing queue gets them too).
 */
export async function createQueueWith(
  sqs: SQSClient,
  endpoint: string,
  name: string,
  attributes: Record<string, string>,
): Promise<BenchQueue> {
  await sqs.send(new CreateQueueCommand({ QueueName: name }));
  // The emulator's own URLs name a host that does not resolve: address it path-style.
  const url = `${endpoint}/${LOCAL_ACCOUNT}/${name}`;
  await sqs.send(new SetQueueAttributesCommand({ QueueUrl: url, Attributes: attributes }));
  const described = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["QueueArn"] }),
  );
  const arn = described.Attributes?.QueueArn;
  if (!arn) throw new Error(`queue ${name}: GetQueueAttributes returned no QueueArn`);
  return { url, arn };
}

/**
 * Sends `bodies` to `url`, ten per SendMessageBatch (SQS's most), from `senders` loops taking the
 * next batch from one list; throws when any entry failed.
 */
export async function sendInBatches(
  sqs: SQSClient,
  url: string,
  bodies: readonly string[],
  senders = 4,
): Promise<void> {
  const batches: string[][] = [];
  for (let i = 0; i < bodies.length; i += 10) batches.push(bodies.slice(i, i + 10));
  let next = 0;
  await Promise.all(
    Array.from({ length: senders }, async () => {
      for (let b = next++; b < batches.length; b = next++) {
        const batch = batches[b] ?? [];
        const result = await sqs.send(
          new SendMessageBatchCommand({
            QueueUrl: url,
            Entries: batch.map((body, j) => ({ Id: String(j), MessageBody: body })),
          }),
        );
        if (result.Failed && result.Failed.length > 0)
          throw new Error(`SendMessageBatch failed: ${JSON.stringify(result.Failed)}`);
      }
    }),
  );
}

/** Messages the queue still holds: visible, in flight and delayed (SQS's approximate counts). */
export async function messagesLeft(sqs: SQSClient, url: string): Promise<number> {
  const { Attributes: a = {} } = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: url,
      AttributeNames: [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
      ],
    }),
  );
  return (
    Number(a.ApproximateNumberOfMessages ?? 0) +
    Number(a.ApproximateNumberOfMessagesNotVisible ?? 0) +
    Number(a.ApproximateNumberOfMessagesDelayed ?? 0)
  );
}
