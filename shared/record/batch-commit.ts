/**
 * Batch-commit mode's first step: before any record's path runs, the batch's first deliveries
 * share one fence transaction (shared/fence/batch-transaction.ts), and each record then takes what
 * it decided as a value (its settlement). A redelivery takes its own path (and on FIFO so do the
 * later records of its group): it claims its delivery in the attempt ledger right before its work,
 * so a marker names only a record whose work really started.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import type { SQSRecord } from "aws-lambda";
import type pg from "pg";
import type { z } from "zod";
import type { ReadMessage } from "../envelope/read-message.ts";
import { describeError } from "../errors/last-error.ts";
import { type BatchRecord, settleBatch } from "../fence/batch-transaction.ts";
import { INTERRUPT_SHARE_OF_RESERVE, type InvocationClock } from "../invocation/deadline.ts";
import { METRIC } from "../metrics/names.ts";
import type { WorkFollowUps } from "../outbox/work-follow-ups.ts";
import { orderedGroupOf, type PreparedRecord } from "./batch-loop.ts";
import { receiveCountOf } from "./record-context.ts";
import type { RecordSpine } from "./spine.ts";

/** What the batch step needs beside the spine. */
export interface BatchCommitOptions {
  readonly consumer: string;
  readonly pool: pg.Pool;
  readonly ttlSeconds: number;
  /** The return reserve: the interrupted record's write gets its share of it. */
  readonly returnReserveMs: number;
  /** Relays what the batch's committed transaction wrote to the outbox. */
  readonly outbox: WorkFollowUps;
  readonly metrics: Metrics;
  readonly logger: Logger;
}

/** The batch loop's `settleFirst` for a consumer in batch-commit mode. */
export function batchCommit<S extends z.ZodType>(
  spine: RecordSpine<S>,
  o: BatchCommitOptions,
): (
  records: readonly SQSRecord[],
  clock: InvocationClock,
) => Promise<Map<SQSRecord, PreparedRecord<z.output<S>>>> {
  type Entry = BatchRecord<z.output<S>> & { record: SQSRecord; read: ReadMessage<z.output<S>> };
  return async (records, clock) => {
    const batch = records.map((record): Entry => {
      const read = spine.readMessage(record);
      const message = "poison" in read || receiveCountOf(record) > 1 ? undefined : read;
      return {
        record,
        read,
        message,
        group: orderedGroupOf(record),
        work: (fence) => spine.runWork(record, (message as NonNullable<typeof message>).job, 1, fence),
      };
    });
    const prepared = new Map<SQSRecord, PreparedRecord<z.output<S>>>(
      batch.map((r) => [r.record, { read: r.read }]),
    );
    try {
      const report = await settleBatch(
        { pool: o.pool, consumer: o.consumer, ttlSeconds: o.ttlSeconds, clock },
        batch,
      );
      for (const [r, settlement] of report.settlements) {
        const { record, read } = r as Entry;
        prepared.set(record, { read, settlement });
      }
      if (report.interrupted) {
        // The batch's time ran out in this record's work: the batch is rolled back and returned,
        // and the interruption is this record's.
        const { record, read } = report.interrupted as Entry;
        const interrupted = spine.receive(record, clock.signal, { read });
        await spine.interruptedInBatch(interrupted, o.returnReserveMs * INTERRUPT_SHARE_OF_RESERVE);
        o.metrics.addMetric(METRIC.recordInterrupted, MetricUnit.Count, 1);
        o.logger.warn(
          "the invocation's time ran out in the batch transaction; rolled back, every record returned",
          {
            message_id: record.messageId,
            receive_count: receiveCountOf(record),
            records: records.length,
          },
        );
      }
      // The batch committed: its follow-ups go now, before any record is reported.
      await o.outbox.relay(report.followUps, { records: records.length });
      if (report.redos > 0) o.metrics.addMetric(METRIC.batchRedone, MetricUnit.Count, report.redos);
      if (report.redos > 0 || report.deferred > 0) {
        o.logger.info("batch transaction: records taken out, redone or left to transactions of their own", {
          settled: report.settlements.size,
          deferred: report.deferred,
          redos: report.redos,
          committed: report.committed,
          records: records.length,
        });
      }
    } catch (error) {
      // A bug, not a database or work error (those are settlements): the records the batch did
      // not settle run one transaction each; their fences keep that safe.
      o.logger.error("batch transaction failed unexpectedly; records run one by one", {
        error: describeError(error),
      });
    }
    return prepared;
  };
}
