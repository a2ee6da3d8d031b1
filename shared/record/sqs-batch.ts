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
import { isAcked, type PreparedRecord, type RecordContext, type RecordOutcome } from "./record-context.ts";

/** Options of {@link sqsBatchProcessor}. */
export interface SqsBatchOptions<P> {
  /**
   * Builds the record's context, with what the batch transaction did with it when there was one;
   * may throw for an unusable record (it is then reported).
   */
  readonly contextOf: (record: SQSRecord, prepared?: PreparedRecord<P>) => RecordContext<P>;
  /** The per-record Middy chain. */
  readonly processRecord: (rc: RecordContext<P>, context: Context) => Promise<RecordOutcome>;
  /**
   * Batch-commit mode: runs once per batch before any record's chain, with every record in batch
   * order, and settles what it can in one transaction. @default none (per-record mode)
   */
  readonly settleBatch?: (records: readonly SQSRecord[]) => Promise<Map<SQSRecord, PreparedRecord<P>>>;
  readonly keepGroupOrder: boolean;
  readonly metrics: Metrics;
  readonly logger: Logger;
}

/**
 * The record's message group when its order must hold: on a FIFO queue only. A standard queue's
 * messages can carry a MessageGroupId too (SQS fair queues use it for fairness, not order), and
 * holding a group back there would only spend its messages' receives.
 */
export function orderedGroupOf(record: SQSRecord): string | undefined {
  return record.eventSourceARN?.endsWith(".fifo") ? record.attributes.MessageGroupId : undefined;
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

  const unprocessable = (record: SQSRecord, error: unknown): RecordOutcome => {
    // Only an unusable event (no queue ARN) or a bug in a middleware gets here; the record
    // stays in the queue and, if it never gets through, reaches the backstop queue.
    metrics.addMetric(METRIC.recordFailed, MetricUnit.Count, 1);
    logger.error("record could not be processed; the message stays in the queue", {
      message_id: record.messageId,
      attempt: attemptOf(record),
      error: describeError(error),
    });
    return { status: "failed", error };
  };

  const runRecord = async (rc: RecordContext<P>, context: Context): Promise<RecordOutcome> => {
    try {
      return await options.processRecord(rc, context);
    } catch (error) {
      return unprocessable(rc.record, error);
    }
  };

  return async (event, context) => {
    const batchItemFailures: SQSBatchItemFailure[] = [];
    const failedGroups = new Set<string>();
    const build = (prepared?: Map<SQSRecord, PreparedRecord<P>>) =>
      event.Records.map((record): RecordContext<P> | { error: unknown } => {
        try {
          return options.contextOf(record, prepared?.get(record));
        } catch (error) {
          return { error };
        }
      });
    let contexts = build();
    // With an unusable record in the batch, its place in a message group is unknown to the batch
    // transaction: every record then runs on its own, as in per-record mode.
    if (options.settleBatch && contexts.every((c) => !("error" in c))) {
      try {
        contexts = build(await options.settleBatch(event.Records));
      } catch (error) {
        // A bug in the batch step, not a record's failure: every record runs on its own instead.
        logger.error("batch step failed; records run one by one", { error: describeError(error) });
      }
    }
    for (const [index, record] of event.Records.entries()) {
      const group = options.keepGroupOrder ? orderedGroupOf(record) : undefined;
      if (group !== undefined && failedGroups.has(group)) {
        metrics.addMetric(METRIC.fifoSkipped, MetricUnit.Count, 1);
        logger.info("record left for redelivery behind a failure in its message group", {
          message_id: record.messageId,
          message_group_id: group,
        });
        batchItemFailures.push({ itemIdentifier: record.messageId });
        continue;
      }
      const rc = contexts[index];
      const outcome =
        rc === undefined || "error" in rc ? unprocessable(record, rc?.error) : await runRecord(rc, context);
      if (!isAcked(outcome)) {
        batchItemFailures.push({ itemIdentifier: record.messageId });
        if (group !== undefined) failedGroups.add(group);
      }
    }
    return { batchItemFailures };
  };
}
