/** Queue addressing. Pure. */
import { InvalidEventError } from "../errors/configuration.ts";

/**
 * The queue URL for a queue ARN (`arn:aws:sqs:<region>:<account>:<name>`), as SQS itself forms
 * it. The SDK sends requests to its configured endpoint, so the URL only names the queue.
 */
export function queueUrlFromArn(arn: string): string {
  const parts = arn.split(":");
  if (parts.length !== 6 || parts[0] !== "arn" || parts[2] !== "sqs" || parts.some((part) => !part)) {
    throw new InvalidEventError(`not an SQS queue ARN: ${arn}`);
  }
  const [, partition, , region, account, name] = parts;
  const domain = partition === "aws-cn" ? "amazonaws.com.cn" : "amazonaws.com";
  return `https://sqs.${region}.${domain}/${account}/${name}`;
}

/** Whether the ARN or URL names a FIFO queue. */
export function isFifoQueue(arnOrUrl: string): boolean {
  return arnOrUrl.endsWith(".fifo");
}
