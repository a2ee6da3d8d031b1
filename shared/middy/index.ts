/**
 * jobfence's Middy middlewares, for a user's own per-record chain: each is a thin adapter over the
 * consumer's spine (shared/record/spine.ts), so a chain with them applies each job exactly as
 * `createConsumer` does, with the user's middlewares around or between them.
 *
 *   const consumer = prepareConsumer(definition);
 *   const perRecord = middy(runWork(consumer))
 *     .use(mine)                       // sees every record's outcome
 *     .use(recordDeadLetter(consumer)) // a failure → retry, held or dead letter
 *     .use(validateJob(consumer))      // the body → a job, or poison
 *     .use(runSteps(consumer))         // the job's steps, each checkpointed (with `steps` only)
 *     .use(fenceTransaction(consumer)) // BEGIN + fence … COMMIT around what is inside it
 *     .use(tracing);                   // runs inside the fence transaction, around the work
 *   export const handler = middy(sqsRecords(consumer, perRecord)).use(injectLambdaContext(logger));
 *
 * Declared outside-in: `before` hooks run top to bottom, `after` and `onError` bottom to top.
 * validateJob must come before fenceTransaction (and runSteps between them, for a consumer with
 * steps), and runWork is the chain's handler; a step reached
 * out of order, twice, or with a context jobfence did not make (a copy, another consumer's) fails
 * the record with a RecordChainError and leaves it in the queue. Whatever the chain does or returns,
 * every record ends through the spine: a failure no middleware settled is settled, a fence
 * transaction left open (a middleware that returned early past the commit) is rolled back, and the
 * outcome is the spine's own (applied, a duplicate, or the failure as settled), never the chain's.
 * Per-record mode only.
 */
import type { MiddyfiedHandler } from "@middy/core";
import type { Context, SQSBatchResponse, SQSEvent } from "aws-lambda";
import type { z } from "zod";
import type { PreparedConsumer } from "../consumer.ts";
import { ConfigurationError } from "../errors/configuration.ts";
import type { RecordOutcome } from "../record/outcome.ts";
import type { RecordContext } from "../record/record-context.ts";

// The consumer a chain is built over: validated and wired once, at the Lambda's init.
export { type PreparedConsumer, prepareConsumer } from "../consumer.ts";
export { fenceTransaction } from "./fence-transaction.ts";
export { recordDeadLetter } from "./record-dead-letter.ts";
export { runSteps } from "./run-steps.ts";
export type { SpineOf } from "./spine-of.ts";
export { validateJob } from "./validate-job.ts";

/** The handler of a per-record chain: the consumer's work on the record's fence transaction. */
export function runWork<S extends z.ZodType>(
  consumer: PreparedConsumer<S>,
): (rc: RecordContext<z.output<S>>) => Promise<RecordOutcome> {
  return (rc) => consumer.spine.work(rc);
}

/**
 * The SQS handler that runs every record of an event through `chain`, reporting partial batch
 * failures. Each record's outcome is what the spine decided, whatever the chain returns. Refused for
 * a consumer in batch-commit mode: its batch commits before any record's chain runs, so nothing in
 * a chain could be inside the fence transaction.
 */
export function sqsRecords<S extends z.ZodType>(
  consumer: PreparedConsumer<S>,
  chain: MiddyfiedHandler<RecordContext<z.output<S>>, RecordOutcome, Error, Context>,
): (event: SQSEvent, context: Context) => Promise<SQSBatchResponse> {
  if (consumer.commitMode !== "per-record") {
    throw new ConfigurationError(`consumer "${consumer.consumer}"`, [
      `sqsRecords: a user's chain runs in per-record mode only (commitMode is "${consumer.commitMode}"): in batch-commit mode the batch commits before any record's chain runs`,
    ]);
  }
  const { spine } = consumer;
  return consumer.records(async (rc, context) => {
    try {
      await chain(rc, context);
    } catch (error) {
      await spine.settle(rc, error);
    }
    return spine.finish(rc);
  });
}
