/**
 * The spine's edge to the attempt ledger (core.message_attempts): a redelivery's claim, a failure
 * recorded, an interruption recorded, a claim released. A first delivery reads and writes none of
 * it. Each write is a statement or short transaction of its own, never the fence's.
 */
import type pg from "pg";
import { connectBefore, poolBefore } from "../db/connect-before.ts";
import {
  type AttemptEntry,
  type AttemptLedger,
  claimDelivery,
  type DeliveryKey,
  recordAttempt,
  releaseDelivery,
} from "../db/queries/message-attempts.ts";
import { InvocationDeadlineError } from "../errors/job.ts";
import { describeError } from "../errors/last-error.ts";
import { LedgerUnavailableError } from "../errors/transaction.ts";
import { untilDeadline } from "../invocation/deadline.ts";
import { currentAttempt, type RecordContext, whoFailed } from "./record-context.ts";

/** Where the ledger is, and whose. */
export interface LedgerAccess {
  readonly pool: pg.Pool;
  readonly consumer: string;
}

/**
 * A redelivery marks its work as started, right before its fence, in a statement of its own: it
 * learns its failures so far, and an interruption is counted when the delivery before it started
 * its work and never reported back. Committed only if the invocation's deadline has not passed
 * meanwhile: a claim that landed after the return would leave a marker for work that never ran.
 * Throws InvocationDeadlineError, or LedgerUnavailableError when the database cannot be reached.
 */
export async function claimRedelivery(ledger: LedgerAccess, rc: RecordContext): Promise<AttemptLedger> {
  try {
    return await beforeDeadline(ledger.pool, rc.signal, (db) =>
      claimDelivery(db, ledger.consumer, deliveryKey(rc)),
    );
  } catch (error) {
    if (rc.signal?.aborted)
      throw new InvocationDeadlineError("the invocation's time ran out during the claim");
    throw new LedgerUnavailableError(error);
  }
}

/** Records a failed run of the work; returns the ledger as it now is. Throws when it cannot. */
export function recordFailure(
  ledger: LedgerAccess,
  rc: RecordContext,
  error: unknown,
): Promise<AttemptLedger> {
  return recordAttempt(
    poolBefore(ledger.pool, rc.signal),
    ledger.consumer,
    deliveryKey(rc),
    attemptEntry(rc, error),
  );
}

/** Releases the delivery's claim, so the next delivery counts no interruption. Never throws. */
export async function releaseClaim(ledger: LedgerAccess, rc: RecordContext): Promise<void> {
  try {
    await releaseDelivery(ledger.pool, ledger.consumer, deliveryKey(rc));
  } catch {
    // A marker left set can only count an interruption against a job the holder decides.
  }
}

/**
 * The invocation's time ran out for the record: its work's interruption is recorded (when the work
 * was running), or its claim released (when it was stopped before or after its work), within
 * `timeoutMs`. Never throws: the next delivery's claim counts the interruption from its marker.
 */
export async function recordInterruption(
  ledger: LedgerAccess,
  rc: RecordContext,
  timeoutMs: number,
): Promise<void> {
  if (rc.working) {
    const entry = attemptEntry(
      rc,
      new InvocationDeadlineError("the invocation's time ran out while the record's work ran"),
    );
    await withinDeadline(ledger.pool, timeoutMs, (db) =>
      recordAttempt(db, ledger.consumer, deliveryKey(rc), { ...entry, kind: "interruption" }),
    );
  } else if (rc.claimed) {
    await withinDeadline(ledger.pool, timeoutMs, (db) =>
      releaseDelivery(db, ledger.consumer, deliveryKey(rc)),
    );
  }
}

/** The ledger's key for the record's delivery. */
function deliveryKey(rc: RecordContext): DeliveryKey {
  return {
    messageId: rc.record.messageId,
    jobId: whoFailed(rc).identity.jobId,
    receiveCount: rc.receiveCount,
  };
}

/** Bound on an error message kept in the history (last_error keeps the full one). */
const HISTORY_MESSAGE_LIMIT = 500;

/** The history entry of a failed run of the record's work. */
export function attemptEntry(rc: RecordContext, error: unknown): AttemptEntry {
  const described = describeError(error);
  const message =
    described.message.length <= HISTORY_MESSAGE_LIMIT
      ? described.message
      : `${described.message.slice(0, HISTORY_MESSAGE_LIMIT - 1)}…`.toWellFormed();
  return {
    attempt: currentAttempt(rc),
    at: new Date().toISOString(),
    receive_count: rc.receiveCount,
    kind: "failure",
    error: { name: described.class, message },
  };
}

/**
 * Runs `write` in a transaction of its own that commits only if `signal` has not aborted by then
 * (else it rolls back and throws InvocationDeadlineError). With `statementTimeoutMs` the server
 * also cancels its statements after that long.
 */
async function beforeDeadline<T>(
  pool: pg.Pool,
  signal: AbortSignal | undefined,
  write: (db: pg.PoolClient) => Promise<T>,
  statementTimeoutMs?: number,
): Promise<T> {
  const client = await connectBefore(pool, signal);
  try {
    if (signal?.aborted) throw new InvocationDeadlineError("the invocation's time ran out");
    await client.query(
      statementTimeoutMs === undefined
        ? "BEGIN"
        : `BEGIN; SET LOCAL statement_timeout = ${statementTimeoutMs}`,
    );
    const result = await write(client);
    if (signal?.aborted) throw new InvocationDeadlineError("the invocation's time ran out");
    await client.query("COMMIT");
    client.release();
    return result;
  } catch (error) {
    client.release(error instanceof Error ? error : new Error(String(error)));
    throw error;
  }
}

/**
 * {@link beforeDeadline} bounded by `timeoutMs` from now, waited for no longer than that: a write
 * made as the invocation's time runs out must not land after it returned, and once the bound has
 * passed whatever is still pending ends in ROLLBACK (a write that landed later would count again
 * what the next delivery's claim counts from the marker). Never throws.
 */
async function withinDeadline(
  pool: pg.Pool,
  timeoutMs: number,
  write: (db: pg.PoolClient) => Promise<unknown>,
): Promise<void> {
  const ms = Math.max(1, Math.floor(timeoutMs));
  const bound = AbortSignal.timeout(ms);
  const writing = beforeDeadline(pool, bound, write, ms);
  writing.catch(() => {});
  await untilDeadline(writing, bound).catch(() => {});
}
