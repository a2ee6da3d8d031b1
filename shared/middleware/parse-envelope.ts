/**
 * Middleware: schema validation, step 1 of the record protocol. The body becomes a typed
 * job, or PoisonMessageError goes down the error path to be dead-lettered with zero retries.
 */
import type { MiddlewareObj } from "@middy/core";
import type { RecordContext, RecordOutcome } from "../record/record-context.ts";

/** The step this middleware calls (RecordProtocol.parse). */
export interface ParseStep<P> {
  parse(rc: RecordContext<P>): void;
}

/** `before`: parse. */
export function parseEnvelope<P>(protocol: ParseStep<P>): MiddlewareObj<RecordContext<P>, RecordOutcome> {
  const parseEnvelopeBefore = (request: { event: RecordContext<P> }): void => protocol.parse(request.event);
  return { name: "jobfence-parse-envelope", before: parseEnvelopeBefore };
}
