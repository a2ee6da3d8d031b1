/**
 * Middleware: retry scheduling (SPEC §4). A transient failure with attempts left hides the message
 * for the backoff delay (ChangeMessageVisibility) and leaves it in the queue; on the last attempt
 * the failure becomes RetriesExhaustedError for the dead-letter middleware. Poison and permanent
 * failures are not retried and pass through untouched.
 */
import { ChangeMessageVisibilityCommand, type SQSClient } from "@aws-sdk/client-sqs";
import type { MiddlewareObj } from "@middy/core";
import { isTransient } from "../dead-letters/classify.ts";
import { RetriesExhaustedError } from "../errors.ts";
import { isLastAttempt, type RetryPolicy, retryDelaySeconds } from "../retry/policy.ts";
import type { RecordContext, RecordOutcome } from "./record-context.ts";

/** Options of {@link scheduleRetry}. */
export interface ScheduleRetryOptions {
  readonly sqs: SQSClient;
  readonly policy: RetryPolicy;
  /** Uniform [0, 1) source for the jitter. @default Math.random */
  readonly random?: () => number;
}

export function scheduleRetry(options: ScheduleRetryOptions): MiddlewareObj<RecordContext, RecordOutcome> {
  const random = options.random ?? Math.random;

  const scheduleRetryOnError = async (request: {
    event: RecordContext;
    error: unknown;
    response: RecordOutcome | null | undefined;
  }): Promise<void> => {
    if (request.response || !isTransient(request.error)) return;
    const rc = request.event;
    if (isLastAttempt(rc.attempt, options.policy)) {
      request.error = new RetriesExhaustedError(rc.attempt, request.error);
      return;
    }
    const delaySeconds = retryDelaySeconds(rc.attempt, options.policy, random);
    let visibilityChanged = true;
    try {
      await options.sqs.send(
        new ChangeMessageVisibilityCommand({
          QueueUrl: rc.queueUrl,
          ReceiptHandle: rc.record.receiptHandle,
          VisibilityTimeout: delaySeconds,
        }),
      );
    } catch {
      // SPEC §4: report the failure anyway; the queue's own visibility timeout then applies.
      visibilityChanged = false;
    }
    request.response = { status: "retry", delaySeconds, visibilityChanged, error: request.error };
  };

  return { name: "jobfence-schedule-retry", onError: scheduleRetryOnError };
}
