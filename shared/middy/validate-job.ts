/**
 * Middleware: schema validation, step 1 of the spine. `before`: the record's body becomes a typed
 * job, or PoisonMessageError goes down the error path to be dead-lettered with no retry.
 */
import type { MiddlewareObj } from "@middy/core";
import type { RecordOutcome } from "../record/outcome.ts";
import type { RecordContext } from "../record/record-context.ts";
import type { SpineOf } from "./spine-of.ts";

/** Reads each record's message before the rest of the chain. */
export function validateJob<P>(consumer: SpineOf<P>): MiddlewareObj<RecordContext<P>, RecordOutcome> {
  const validateJobBefore = (request: { event: RecordContext<P> }): void =>
    consumer.spine.read(request.event);
  return { name: "jobfence-validate-job", before: validateJobBefore };
}
