/**
 * The batch loop: the SQS-triggered handler's half around the spine. It runs each record's path
 * (the spine's handleRecord, or a user's Middy chain over the same steps), one after another, and reports partial batch failures (ReportBatchItemFailures). A record is left
 * out of batchItemFailures only when its outcome is acked. With `keepGroupOrder` (FIFO queues),
 * once a record of a message group fails, that group's later records are not run and are
 * reported too, so ordering within a group holds.
 *
 * The invocation's time (docs/design.md §4.3): no record starts when less than the record budget remains, and
 * at the return reserve before the function timeout the loop stops waiting for a running
 * record (its spine rolls it back and records the interruption) and returns. Records that did
 * not run (left unstarted, or held back behind their group's failure) are made visible again at
 * once: they cost no attempt, and on FIFO their group stays behind its hidden head anyway. After
 * the return, the invocation's signal tells every record's steps to do nothing more.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import type { Context, SQSBatchItemFailure, SQSBatchResponse, SQSEvent, SQSRecord } from "aws-lambda";
import type { ReadMessage } from "../envelope/read-message.ts";
import { describeError } from "../errors/last-error.ts";
import type { FenceSettlement } from "../fence/settlement.ts";
import {
  DEADLINE,
  INTERRUPT_SHARE_OF_RESERVE,
  type InvocationBudget,
  type InvocationClock,
  invocationClock,
  RETURN_SHARE_OF_RESERVE,
  untilDeadline,
} from "../invocation/deadline.ts";
import { METRIC } from "../metrics/names.ts";
import { isAcked, type RecordOutcome } from "./outcome.ts";
import { type RecordContext, receiveCountOf } from "./record-context.ts";

/** What a batch transaction did with a record before its path runs: how it read it, and its settlement. */
export interface PreparedRecord<P> {
  readonly read: ReadMessage<P>;
  readonly settlement?: FenceSettlement;
}

/** Options of {@link batchLoop}. */
export interface BatchLoopOptions<P> {
  /**
   * Builds the record's context, with what the batch transaction did with it when there was one;
   * may throw for an unusable record (it is then reported).
   */
  readonly receive: (
    record: SQSRecord,
    signal: AbortSignal,
    prepared?: PreparedRecord<P>,
  ) => RecordContext<P>;
  /** One record's path, to its observed outcome. */
  readonly run: (rc: RecordContext<P>, context: Context) => Promise<RecordOutcome>;
  /**
   * Batch-commit mode: runs once per batch before any record's path, with every record in batch
   * order, and settles what it can in one transaction. @default none (per-record mode)
   */
  readonly settleFirst?: (
    records: readonly SQSRecord[],
    clock: InvocationClock,
  ) => Promise<Map<SQSRecord, PreparedRecord<P>>>;
  readonly keepGroupOrder: boolean;
  /** The invocation's time budget. @default none: every record runs, however long it takes */
  readonly timing?: InvocationTiming<P>;
  readonly metrics: Metrics;
  readonly logger: Logger;
}

/** How the loop spends an invocation's time, and what it does when the time is up. */
export interface InvocationTiming<P> extends InvocationBudget {
  /** The running record's time is up: roll it back and record that, within a share of the reserve. */
  readonly interrupt: (rc: RecordContext<P>) => Promise<void>;
  /** Makes records that did not run visible again at once, within `timeoutMs`. Never throws. */
  readonly returnUnrun: (records: readonly SQSRecord[], timeoutMs: number) => Promise<void>;
}

/**
 * The record's message group when its order must hold: on a FIFO queue only. A standard queue's
 * messages can carry a MessageGroupId too (SQS fair queues use it for fairness, not order), and
 * holding a group back there would only spend its messages' receives.
 */
export function orderedGroupOf(record: SQSRecord): string | undefined {
  return record.eventSourceARN?.endsWith(".fifo") ? record.attributes.MessageGroupId : undefined;
}

/** The loop over an event's records, reporting partial batch failures. */
export function batchLoop<P>(
  options: BatchLoopOptions<P>,
): (event: SQSEvent, context: Context) => Promise<SQSBatchResponse> {
  const { metrics, logger } = options;

  const unprocessable = (record: SQSRecord, error: unknown): RecordOutcome => {
    // Only an unusable event (no queue ARN) or a bug in a middleware gets here; the record
    // stays in the queue and, if it never gets through, reaches the backstop queue.
    metrics.addMetric(METRIC.recordFailed, MetricUnit.Count, 1);
    logger.error("record could not be processed; the message stays in the queue", {
      message_id: record.messageId,
      receive_count: receiveCountOf(record),
      error: describeError(error),
    });
    return { status: "failed", error };
  };

  const runRecord = async (rc: RecordContext<P>, context: Context): Promise<RecordOutcome> => {
    try {
      return await options.run(rc, context);
    } catch (error) {
      return unprocessable(rc.record, error);
    }
  };

  return async (event, context) => {
    const { timing } = options;
    const clock = invocationClock(context, timing);
    try {
      return await processBatch(event, context, clock);
    } finally {
      clock.dispose();
    }
  };

  async function processBatch(
    event: SQSEvent,
    context: Context,
    clock: InvocationClock,
  ): Promise<SQSBatchResponse> {
    const { timing } = options;
    const batchItemFailures: SQSBatchItemFailure[] = [];
    const failedGroups = new Set<string>();
    /** Records that did not run: made visible again before the return. */
    const unrun: SQSRecord[] = [];
    const build = (prepared?: Map<SQSRecord, PreparedRecord<P>>) =>
      event.Records.map((record): RecordContext<P> | { error: unknown } => {
        try {
          return options.receive(record, clock.signal, prepared?.get(record));
        } catch (error) {
          return { error };
        }
      });
    let contexts = build();
    // With an unusable record in the batch, its place in a message group is unknown to the batch
    // transaction: every record then runs on its own, as in per-record mode.
    if (options.settleFirst && contexts.every((c) => !("error" in c)) && clock.canStart()) {
      try {
        // The batch step is bounded by the deadline too: past it, every record comes back unrun (the
        // step itself commits nothing once the deadline has passed).
        const settling = options.settleFirst(event.Records, clock);
        const settled = await untilDeadline(settling, clock.signal);
        if (settled !== DEADLINE) contexts = build(settled);
        // The step records the interruption of the record whose work the deadline stopped; it
        // gets the same share of the reserve as a record's own interruption, then the return goes on.
        else if (timing)
          await untilDeadline(
            settling,
            AbortSignal.timeout(timing.returnReserveMs * INTERRUPT_SHARE_OF_RESERVE),
          );
      } catch (error) {
        // A bug in the batch step, not a record's failure: every record runs on its own instead.
        logger.error("batch step failed; records run one by one", { error: describeError(error) });
      }
    }
    let timeUp = false;
    for (const [index, record] of event.Records.entries()) {
      const group = options.keepGroupOrder ? orderedGroupOf(record) : undefined;
      if (group !== undefined && failedGroups.has(group)) {
        metrics.addMetric(METRIC.fifoSkipped, MetricUnit.Count, 1);
        logger.info("record left for redelivery behind a failure in its message group", {
          message_id: record.messageId,
          message_group_id: group,
        });
        batchItemFailures.push({ itemIdentifier: record.messageId });
        unrun.push(record);
        continue;
      }
      const rc = contexts[index];
      const settlement = rc !== undefined && !("error" in rc) ? rc.settlement : undefined;
      if (settlement && clock.signal.aborted) {
        // The batch transaction settled it, and no time is left for its chain: what committed
        // is acked (SQS would only hand it back as a duplicate); anything else comes back unrun.
        if (settlement.status === "applied" || settlement.status === "duplicate") continue;
        batchItemFailures.push({ itemIdentifier: record.messageId });
        unrun.push(record);
        if (group !== undefined) failedGroups.add(group);
        continue;
      }
      // A record the batch settled has nothing left to start: its chain only reports (and, for a
      // failure, records) what the batch did.
      if (!settlement && (timeUp || clock.signal.aborted || !clock.canStart())) {
        // Too little time left to start it: back to the queue at once, no attempt spent.
        timeUp = true;
        if (rc !== undefined && !("error" in rc)) observeUnstarted(rc);
        batchItemFailures.push({ itemIdentifier: record.messageId });
        unrun.push(record);
        if (group !== undefined) failedGroups.add(group);
        continue;
      }
      let outcome: RecordOutcome;
      if (rc === undefined || "error" in rc) {
        outcome = unprocessable(record, rc?.error);
      } else {
        const raced = await untilDeadline(runRecord(rc, context), clock.signal);
        if (raced === DEADLINE) {
          timeUp = true;
          if (timing) await timing.interrupt(rc);
          outcome = { status: "interrupted", wasRunning: true };
          observeInterrupted(rc);
        } else {
          outcome = raced;
        }
      }
      if (!isAcked(outcome)) {
        batchItemFailures.push({ itemIdentifier: record.messageId });
        if (group !== undefined) failedGroups.add(group);
      }
    }
    if (timing && unrun.length > 0) {
      await timing.returnUnrun(unrun, timing.returnReserveMs * RETURN_SHARE_OF_RESERVE);
    }
    return { batchItemFailures };
  }

  function observeUnstarted(rc: RecordContext<P>): void {
    metrics.addMetric(METRIC.recordUnstarted, MetricUnit.Count, 1);
    logger.info("record left unstarted: too little of the invocation's time was left", {
      message_id: rc.record.messageId,
      receive_count: rc.receiveCount,
    });
  }

  function observeInterrupted(rc: RecordContext<P>): void {
    metrics.addMetric(METRIC.recordInterrupted, MetricUnit.Count, 1);
    logger.warn("the invocation's time ran out while the record ran; rolled back and returned to the queue", {
      message_id: rc.record.messageId,
      receive_count: rc.receiveCount,
    });
  }
}
