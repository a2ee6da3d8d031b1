/** Creating a queue on the SQS emulator, addressed so SDK clients can reach it. */
import { CreateQueueCommand, GetQueueAttributesCommand, type SQSClient } from "@aws-sdk/client-sqs";
import { LOCAL_ACCOUNT } from "../local/aws-clients.ts";

/** A queue created for a test. */
export interface TestQueue {
  readonly name: string;
  readonly url: string;
  readonly arn: string;
}

/**
 * Creates a queue and returns its URL under `endpoint` (the emulator's, or a proxy's in front of
 * it) and its ARN. The URL is built path-style rather than taken from CreateQueue's answer: the
 * emulator's own URLs name a host that does not resolve.
 */
export async function createTestQueue(
  sqs: SQSClient,
  endpoint: string,
  name: string,
  attributes: Record<string, string> = {},
): Promise<TestQueue> {
  await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: attributes }));
  const url = `${endpoint}/${LOCAL_ACCOUNT}/${name}`;
  const { Attributes } = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["QueueArn"] }),
  );
  const arn = Attributes?.QueueArn;
  if (!arn) throw new Error(`the emulator reported no ARN for queue ${name}`);
  return { name, url, arn };
}
