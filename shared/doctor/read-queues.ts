/**
 * The SQS edge of the doctor: each expected queue by name (GetQueueUrl), then its ARN, retention,
 * visibility timeout and redrive (GetQueueAttributes). Needs sqs:GetQueueUrl and
 * sqs:GetQueueAttributes on the queues.
 */
import {
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  QueueDoesNotExist,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import type { ExpectedConsumerQueues, ObservedConsumerQueues, ObservedQueue } from "./check-queues.ts";

const ATTRIBUTES = ["QueueArn", "MessageRetentionPeriod", "VisibilityTimeout", "RedrivePolicy"] as const;

/** Reads the queues `expected` names. A queue that does not exist is reported as such, not thrown. */
export async function observeQueues(
  sqs: SQSClient,
  expected: readonly ExpectedConsumerQueues[],
): Promise<ObservedConsumerQueues[]> {
  return Promise.all(
    expected.map(async (e) => ({
      consumer: e.consumer,
      source: await observeQueue(sqs, e.source.name),
      backstop: await observeQueue(sqs, e.backstop.name),
    })),
  );
}

async function observeQueue(sqs: SQSClient, name: string): Promise<ObservedQueue> {
  let url: string | undefined;
  try {
    url = (await sqs.send(new GetQueueUrlCommand({ QueueName: name }))).QueueUrl;
  } catch (error) {
    if (error instanceof QueueDoesNotExist) return { name, exists: false };
    throw error;
  }
  if (url === undefined) return { name, exists: false };
  const { Attributes: a = {} } = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: [...ATTRIBUTES] }),
  );
  return {
    name,
    exists: true,
    url,
    arn: a.QueueArn ?? "",
    retentionSeconds: Number(a.MessageRetentionPeriod),
    visibilityTimeoutSeconds: Number(a.VisibilityTimeout),
    redrive: parseRedrive(a.RedrivePolicy),
  };
}

/** The RedrivePolicy's target and count (SQS gives the count as a number or as a string). */
function parseRedrive(text: string | undefined): { targetArn: string; maxReceiveCount: number } | undefined {
  if (text === undefined || text === "") return undefined;
  const parsed = JSON.parse(text) as { deadLetterTargetArn?: unknown; maxReceiveCount?: unknown };
  return {
    targetArn: String(parsed.deadLetterTargetArn ?? ""),
    maxReceiveCount: Number(parsed.maxReceiveCount),
  };
}
