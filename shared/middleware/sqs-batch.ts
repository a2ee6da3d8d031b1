/**
 * The batch half of an SQS-triggered handler: runs each record through its per-record chain, one
 * after another, and reports partial batch failures (ReportBatchItemFailures). A record is left
 * out of batchItemFailures only when its outcome is acked. With `keepGroupOrder` (FIFO queues),
 * once a record of a message group fails, that group's later records are not run and are
 * reported too, so ordering within a group holds.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import type { Context, SQSBatchItemFailure, SQSBatchResponse, SQSEvent, SQSRecord } from "aws-lambda";
import { describeError } from "../dead-letters/last-error.ts";
import { METRIC } from "../metrics/names.ts";
import { isAcked, type RecordContext, type RecordOutcome } from "./record-context.ts";

/** Options of {@link sqsBatchProcessor}. */
export interface SqsBatchOptions<P> {
  /** Builds the record's context; may throw for an unusable record (it is then reported). */
  readonly contextOf: (record: SQSRecord) => RecordContext<P>;
  /** The per-record Middy chain. */
  readonly processRecord: (rc: RecordContext<P>, context: Context) => Promise<RecordOutcome>;
  readonly keepGroupOrder: boolean;
  readonly metrics: Metrics;
  readonly logger: Logger;
}

/** SPEC §4: the attempt number is ApproximateReceiveCount (1 if SQS did not send it). */
export function attemptOf(record: SQSRecord): number {
  const count = Number(record.attributes.ApproximateReceiveCount);
  return Number.isInteger(count) && count >= 1 ? count : 1;
}

export function sqsBatchProcessor<P>(
  options: SqsBatchOptions<P>,
): (event: SQSEvent, context: Context) => Promise<SQSBatchResponse> {
  const { metrics, logger } = options;

  const runRecord = async (record: SQSRecord, context: Context): Promise<RecordOutcome> => {
    try {
      return await options.processRecord(options.contextOf(record), context);
    } catch (error) {
      // Only an unusable event (no queue ARN) or a bug in a middleware gets here; the record
      // stays in the queue and, if it never gets through, reaches the backstop queue.
      metrics.addMetric(METRIC.recordFailed, MetricUnit.Count, 1);
      logger.error("record could not be processed; the message stays in the queue", {
        message_id: record.messageId,
        attempt: attemptOf(record),
        error: describeError(error),
      });
      return { status: "failed", error };
    }
  };

  return async (event, context) => {
    const batchItemFailures: SQSBatchItemFailure[] = [];
    const failedGroups = new Set<string>();
    for (const record of event.Records) {
      const group = options.keepGroupOrder ? record.attributes.MessageGroupId : undefined;
      if (group !== undefined && failedGroups.has(group)) {
        metrics.addMetric(METRIC.fifoSkipped, MetricUnit.Count, 1);
        logger.info("record left for redelivery behind a failure in its message group", {
          message_id: record.messageId,
          message_group_id: group,
        });
        batchItemFailures.push({ itemIdentifier: record.messageId });
        continue;
      }
      const outcome = await runRecord(record, context);
      if (!isAcked(outcome)) {
        batchItemFailures.push({ itemIdentifier: record.messageId });
        if (group !== undefined) failedGroups.add(group);
      }
    }
    return { batchItemFailures };
  };
}
