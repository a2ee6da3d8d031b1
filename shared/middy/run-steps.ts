/**
 * Middleware: a job's steps, between step 1 and step 2 of the spine. `before`: the job's calls
 * outside the database, each checkpointed as it returns (shared/steps/), so the fence transaction
 * that follows (fenceTransaction) gives the work their results. Between validateJob and
 * fenceTransaction; a consumer without steps passes through it untouched.
 */
import type { MiddlewareObj } from "@middy/core";
import type { RecordOutcome } from "../record/outcome.ts";
import type { RecordContext } from "../record/record-context.ts";
import type { SpineOf } from "./spine-of.ts";

/** Runs each record's steps before the fence transaction. */
export function runSteps<P>(consumer: SpineOf<P>): MiddlewareObj<RecordContext<P>, RecordOutcome> {
  const runStepsBefore = (request: { event: RecordContext<P> }): Promise<void> =>
    consumer.spine.steps(request.event);
  return { name: "jobfence-run-steps", before: runStepsBefore };
}
