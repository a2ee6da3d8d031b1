/**
 * Middleware: dead-letter writing, step 5 of the spine. `onError`: a failure from anything inside
 * it is settled — a retry through SQS visibility while attempts are left, otherwise a dead letter
 * in a transaction of its own, alerted — and becomes the chain's response (its outcome), so the
 * middlewares outside it see an outcome, not an error.
 */
import type { MiddlewareObj } from "@middy/core";
import type { RecordOutcome } from "../record/outcome.ts";
import type { RecordContext } from "../record/record-context.ts";
import type { SpineOf } from "./spine-of.ts";

/** Turns each record's failure into its outcome. */
export function recordDeadLetter<P>(consumer: SpineOf<P>): MiddlewareObj<RecordContext<P>, RecordOutcome> {
  const recordDeadLetterOnError = async (request: {
    event: RecordContext<P>;
    error: unknown;
    response: RecordOutcome | null | undefined;
  }): Promise<void> => {
    request.response = await consumer.spine.settle(request.event, request.error);
  };
  return { name: "jobfence-record-dead-letter", onError: recordDeadLetterOnError };
}
