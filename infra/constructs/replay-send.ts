/**
 * The one SQS grant a replay needs: `sqs:SendMessage` on the consumers' source queues and on
 * nothing else (IAM authorizes `SendMessageBatch` through `sqs:SendMessage`; there is no separate
 * action), plus use of a queue's KMS key where it has one. The dead-letter API (one replay) and the
 * bulk-operations worker (bulk replays) both send only there; a sending consumer's function and its
 * outbox relay get the same grant on its follow-up targets' queues.
 */
import * as iam from "aws-cdk-lib/aws-iam";
import type * as lambda from "aws-cdk-lib/aws-lambda";
import type * as sqs from "aws-cdk-lib/aws-sqs";

/** Lets `fn` send (one message or a batch) to `queues`, and only to them. */
export function grantReplaySend(fn: lambda.IFunction, queues: readonly sqs.IQueue[]): void {
  fn.addToRolePolicy(
    new iam.PolicyStatement({
      actions: ["sqs:SendMessage"],
      resources: queues.map((q) => q.queueArn),
    }),
  );
  for (const queue of queues) queue.encryptionMasterKey?.grantEncryptDecrypt(fn);
}
