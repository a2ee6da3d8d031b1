/**
 * Middleware: dead-letter writing, step 5 of the record protocol. A failure from any
 * earlier step is decided: a retry through SQS visibility while attempts are left, otherwise a dead
 * letter in a transaction of its own, alerted, acked. The decision is the protocol's; this only
 * hands it the error and keeps the outcome.
 */
import type { MiddlewareObj } from "@middy/core";
import type { RecordContext, RecordOutcome } from "../record/record-context.ts";

/** The step this middleware calls (RecordProtocol.decide). */
export interface DecideStep<P> {
  decide(rc: RecordContext<P>, error: unknown): Promise<RecordOutcome>;
}

/** `onError`: decide what the failure becomes. */
export function recordDeadLetter<P>(protocol: DecideStep<P>): MiddlewareObj<RecordContext<P>, RecordOutcome> {
  const recordDeadLetterOnError = async (request: {
    event: RecordContext<P>;
    error: unknown;
    response: RecordOutcome | null | undefined;
  }): Promise<void> => {
    if (request.response) return;
    request.response = await protocol.decide(request.event, request.error);
  };
  return { name: "jobfence-record-dead-letter", onError: recordDeadLetterOnError };
}
