/**
 * Middleware: dead-letter writing (SPEC §5). Poison, permanent and exhausted failures become a
 * `core.dead_letters` row in a transaction of their own (the work's transaction has already rolled
 * back), then `DeadLetterRecorded` is published, then the record is acked. A failed write leaves
 * the record in the queue; a failed alert is reported in the outcome but never un-acks the record,
 * because the row, not the alert, is the evidence.
 */
import type { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import type { MiddlewareObj } from "@middy/core";
import type pg from "pg";
import { deadLetterRecordedDetail, publishDeadLetterRecorded } from "../alerts/ops-bus.ts";
import { insertDeadLetter } from "../db/queries/insert-dead-letter.ts";
import { errorKindOf } from "../dead-letters/classify.ts";
import { ERROR_KIND } from "../dead-letters/error-kind.ts";
import { describeError } from "../dead-letters/last-error.ts";
import { storablePayload } from "../envelope/storable-payload.ts";
import { faultHook } from "../fault-points.ts";
import type { RecordContext, RecordOutcome } from "./record-context.ts";

/** Options of {@link recordDeadLetter}. */
export interface RecordDeadLetterOptions {
  readonly pool: pg.Pool;
  readonly consumer: string;
  readonly eventBridge: EventBridgeClient;
  readonly opsBusName: string;
}

/**
 * What the row keeps of the SQS message besides its body: everything a replay needs to send it
 * again as it was (message attributes, FIFO group and deduplication ids) and what an operator needs
 * to trace it.
 */
export function messageAttributesOf(rc: RecordContext): Record<string, unknown> {
  const { record } = rc;
  const attributes: Record<string, unknown> = {
    message_id: record.messageId,
    sent_timestamp: record.attributes.SentTimestamp,
    approximate_receive_count: record.attributes.ApproximateReceiveCount,
    message_attributes: record.messageAttributes ?? {},
  };
  if (record.attributes.MessageGroupId !== undefined)
    attributes.message_group_id = record.attributes.MessageGroupId;
  if (record.attributes.MessageDeduplicationId !== undefined) {
    attributes.message_deduplication_id = record.attributes.MessageDeduplicationId;
  }
  return attributes;
}

export function recordDeadLetter(
  options: RecordDeadLetterOptions,
): MiddlewareObj<RecordContext, RecordOutcome> {
  const recordDeadLetterOnError = async (request: {
    event: RecordContext;
    error: unknown;
    response: RecordOutcome | null | undefined;
  }): Promise<void> => {
    if (request.response) return;
    const kind = errorKindOf(request.error);
    if (!kind) return;
    const rc = request.event;
    const identity = rc.identity ?? {
      jobId: rc.record.messageId,
      tenantId: null,
      correlationId: rc.record.messageId,
    };
    const lastError = describeError(request.error, { unwrapCause: kind === ERROR_KIND.exhausted });

    let recorded: Awaited<ReturnType<typeof insertDeadLetter>>;
    try {
      const inserting = insertDeadLetter(options.pool, {
        jobId: identity.jobId,
        consumer: options.consumer,
        queue: rc.queueUrl,
        tenantId: identity.tenantId,
        payloadJson: storablePayload(rc.record.body ?? ""),
        messageAttributes: messageAttributesOf(rc),
        attempts: rc.attempt,
        errorKind: kind,
        lastError,
        correlationId: identity.correlationId,
        // A poison message's job id may not be a job's at all; for every other kind the fence says
        // whether the job was applied after all (a COMMIT whose answer was lost).
        unlessApplied: kind !== ERROR_KIND.poison,
      });
      if (faultHook) await faultHook("dead-letter:in-flight", { jobIds: [identity.jobId] });
      recorded = await inserting;
    } catch (writeError) {
      request.response = { status: "dead-letter-failed", kind, error: request.error, writeError };
      return;
    }
    if (recorded.applied) {
      // The job's fence exists: an earlier attempt committed and only its answer was lost. The job
      // is applied, so this delivery is a duplicate, not a failure: acked, and no dead letter.
      request.response = { status: "duplicate" };
      return;
    }
    if (faultHook) await faultHook("dead-letter:after", { jobIds: [identity.jobId] });

    let alertError: unknown;
    try {
      await publishDeadLetterRecorded(
        options.eventBridge,
        options.opsBusName,
        deadLetterRecordedDetail({
          id: recorded.id,
          consumer: options.consumer,
          queue: rc.queueUrl,
          job_id: identity.jobId,
          error_kind: kind,
          attempts: rc.attempt,
          correlation_id: identity.correlationId,
          lastError,
          first_recorded: recorded.created,
        }),
      );
    } catch (error) {
      alertError = error;
    }
    request.response = {
      status: "dead-lettered",
      kind,
      deadLetterId: recorded.id,
      created: recorded.created,
      error: request.error,
      ...(alertError === undefined ? {} : { alertError }),
    };
  };

  return { name: "jobfence-record-dead-letter", onError: recordDeadLetterOnError };
}
