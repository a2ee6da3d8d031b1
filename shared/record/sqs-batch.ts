/**
 * The batch half of an SQS-triggered handler: runs each record through its per-record chain, one
 * after another, and reports partial batch failures (ReportBatchItemFailures). A record is left
 * out of batchItemFailures only when its outcome is acked. With `keepGroupOrder` (FIFO queues),
 * once a record of a message group fails, that group's later records are not run and are
 * reported too, so ordering within a group holds.
 *
 * The invocation's time (docs/design.md §4.3): no record starts when less than the record budget remains, and
 * at the return reserve before the function timeout the processor stops waiting for a running
 * record (its protocol rolls it back and records the interruption) and returns. Records that did
 * not run (left unstarted, or held back behind their group's failure) are made visible again at
 * once: they cost no attempt, and on FIFO their group stays behind its hidden head anyway. After
 * the return, the invocation's signal tells every record's steps to do nothing more.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import type { Context, SQSBatchItemFailure, SQSBatchResponse, SQSEvent, SQSRecord } from "aws-lambda";
import { describeError } from "../errors/last-error.ts";
import { METRIC } from "../metrics/names.ts";
import { isAcked, type PreparedRecord, type RecordContext, type RecordOutcome } from "./record-context.ts";

/** Options of {@link sqsBatchProcessor}. */
export interface SqsBatchOptions<P> {
  /**
   * Builds the record's context, with what the batch transaction did with it when there was one;
   * may throw for an unusable record (it is then reported).
   */
  readonly contextOf: (
    record: SQSRecord,
    prepared: PreparedRecord<P> | undefined,
    signal: AbortSignal,
  ) => RecordContext<P>;
  /** The per-record Middy chain. */
  readonly processRecord: (rc: RecordContext<P>, context: Context) => Promise<RecordOutcome>;
  /**
   * Batch-commit mode: runs once per batch before any record's chain, with every record in batch
   * order, and settles what it can in one transaction. @default none (per-record mode)
   */
  readonly settleBatch?: (
    records: readonly SQSRecord[],
    clock: InvocationClock,
  ) => Promise<Map<SQSRecord, PreparedRecord<P>>>;
  readonly keepGroupOrder: boolean;
  /** The invocation's time budget. @default none: every record runs, however long it takes */
  readonly timing?: InvocationTiming<P>;
  readonly metrics: Metrics;
  readonly logger: Logger;
}

/** How the processor spends an invocation's time, and what it does when the time is up. */
export interface InvocationTiming<P> {
  /** No record starts when less than this remains of the invocation. */
  readonly recordBudgetMs: number;
  /** The processor returns this long before the function timeout, whatever is still running. */
  readonly returnReserveMs: number;
  /** The running record's time is up: roll it back and record that, within a share of the reserve. */
  readonly interrupt: (rc: RecordContext<P>) => Promise<void>;
  /** Makes records that did not run visible again at once, within `timeoutMs`. Never throws. */
  readonly returnUnrun: (records: readonly SQSRecord[], timeoutMs: number) => Promise<void>;
}

/** The deadline of one invocation, from its context. */
export interface InvocationClock {
  /** Aborted at the return reserve before the function timeout. */
  readonly signal: AbortSignal;
  /** Whether enough time is left to start a record. */
  canStart(): boolean;
  /** Milliseconds left before the function timeout. */
  remainingMs(): number;
  dispose(): void;
}

/** The clock of an invocation; without a timing (or a context that tells the time) it never runs out. */
export function invocationClock(
  context: Context,
  timing?: Pick<InvocationTiming<unknown>, "recordBudgetMs" | "returnReserveMs">,
): InvocationClock {
  const controller = new AbortController();
  const remaining = () =>
    typeof context?.getRemainingTimeInMillis === "function"
      ? context.getRemainingTimeInMillis()
      : Number.POSITIVE_INFINITY;
  const start = remaining();
  let timer: NodeJS.Timeout | undefined;
  if (timing && Number.isFinite(start)) {
    timer = setTimeout(
      () => controller.abort(new Error("the invocation's return reserve was reached")),
      Math.max(0, start - timing.returnReserveMs),
    );
    timer.unref?.();
  }
  return {
    signal: controller.signal,
    canStart: () => !timing || remaining() >= timing.recordBudgetMs,
    remainingMs: remaining,
    dispose: () => clearTimeout(timer),
  };
}

/**
 * How the return reserve is spent once the invocation's time is up: recording the running record's
 * interruption gets this share, returning the records that did not run the next, and the rest is
 * slack before Lambda's own timeout.
 */
export const INTERRUPT_SHARE_OF_RESERVE = 0.4;
const RETURN_SHARE_OF_RESERVE = 0.3;

/** What the race of a record against the deadline gives when the deadline wins. */
const DEADLINE = Symbol("deadline");

/** What waits on a signal's deadline: resolves a race with DEADLINE when the signal aborts. */
type DeadlineWaiter = (deadline: typeof DEADLINE) => void;

/**
 * The races waiting on each signal. A signal gets one abort listener, added the first time a race
 * waits on it, however many records race against it: an invocation's records all race against
 * its clock's signal, and a listener added and removed per record costs more than the record's
 * own bookkeeping. A race leaves the set when its work settles, so nothing accumulates on a signal
 * that never aborts; the set goes with its signal.
 */
const waitersBySignal = new WeakMap<AbortSignal, Set<DeadlineWaiter>>();

function waitersOf(signal: AbortSignal): Set<DeadlineWaiter> {
  let waiters = waitersBySignal.get(signal);
  if (waiters === undefined) {
    const set = new Set<DeadlineWaiter>();
    waiters = set;
    waitersBySignal.set(signal, set);
    signal.addEventListener(
      "abort",
      () => {
        for (const waiter of set) waiter(DEADLINE);
        set.clear();
      },
      { once: true },
    );
  }
  return waiters;
}

/** `work`'s result, or DEADLINE once `signal` aborts first. */
export function untilDeadline<T>(work: Promise<T>, signal: AbortSignal): Promise<T | typeof DEADLINE> {
  if (signal.aborted) return Promise.resolve(DEADLINE);
  const waiters = waitersOf(signal);
  return new Promise<T | typeof DEADLINE>((resolve, reject) => {
    waiters.add(resolve);
    // Promise.resolve, as Promise.race would: a work that is a value or a thenable is taken as one.
    Promise.resolve(work).then(
      (value) => {
        waiters.delete(resolve);
        resolve(value);
      },
      (error: unknown) => {
        waiters.delete(resolve);
        reject(error);
      },
    );
  });
}

export { DEADLINE };

/**
 * The record's message group when its order must hold: on a FIFO queue only. A standard queue's
 * messages can carry a MessageGroupId too (SQS fair queues use it for fairness, not order), and
 * holding a group back there would only spend its messages' receives.
 */
export function orderedGroupOf(record: SQSRecord): string | undefined {
  return record.eventSourceARN?.endsWith(".fifo") ? record.attributes.MessageGroupId : undefined;
}

/** The record's ApproximateReceiveCount (1 if SQS did not send it): deliveries, not attempts. */
export function receiveCountOf(record: SQSRecord): number {
  const count = Number(record.attributes.ApproximateReceiveCount);
  if (!Number.isInteger(count) || count < 1) return 1;
  // The ledger keeps it as an integer column; no redrive allows anywhere near this many.
  return Math.min(count, MAX_RECEIVE_COUNT_KEPT);
}

/** The largest receive count the ledger keeps (int4): beyond it every count is this one. */
const MAX_RECEIVE_COUNT_KEPT = 2_147_483_647;

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
      receive_count: receiveCountOf(record),
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
          return options.contextOf(record, prepared?.get(record), clock.signal);
        } catch (error) {
          return { error };
        }
      });
    let contexts = build();
    // With an unusable record in the batch, its place in a message group is unknown to the batch
    // transaction: every record then runs on its own, as in per-record mode.
    if (options.settleBatch && contexts.every((c) => !("error" in c)) && clock.canStart()) {
      try {
        // The batch step is bounded by the deadline too: past it, every record comes back unrun (the
        // step itself commits nothing once the deadline has passed).
        const settling = options.settleBatch(event.Records, clock);
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
