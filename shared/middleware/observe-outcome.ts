/**
 * Middleware: metrics and logs, step 6 of the record protocol, on both paths. An error
 * no step turned into an outcome becomes `failed` here (left in the queue), so one record's bug
 * never throws out of the batch.
 */
import type { MiddlewareObj } from "@middy/core";
import type { RecordContext, RecordOutcome } from "../record/record-context.ts";

/** The step this middleware calls (RecordProtocol.observe). */
export interface ObserveStep<P> {
  observe(rc: RecordContext<P>, outcome: RecordOutcome): void;
}

/** `after` and `onError`: observe the outcome. */
export function observeOutcome<P>(protocol: ObserveStep<P>): MiddlewareObj<RecordContext<P>, RecordOutcome> {
  const observe = (request: {
    event: RecordContext<P>;
    error?: unknown;
    response: RecordOutcome | null | undefined;
  }): void => {
    request.response ??= { status: "failed", error: request.error };
    protocol.observe(request.event, request.response);
  };
  return { name: "jobfence-observe-outcome", after: observe, onError: observe };
}
