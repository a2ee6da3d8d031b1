/**
 * The attempt ledger (core.message_attempts, migration 0009): what the harness knows of one SQS
 * message's earlier deliveries. Each write is one autocommit statement of its own, never part of a
 * fence transaction: a marker or a failure must stay recorded when the work's transaction rolls
 * back or its invocation dies.
 */
import type { Queryable } from "../queryable.ts";

/** Entries kept per message (the table's check holds the same bound); the oldest go first. */
export const HISTORY_LIMIT = 20;

/** One failed run or interruption, as the history keeps it. */
export interface AttemptEntry {
  /** The attempt it was: the run's number, 1 for the first. */
  readonly attempt: number;
  /** ISO 8601, the harness's clock. */
  readonly at: string;
  /** The delivery's ApproximateReceiveCount. */
  readonly receive_count: number;
  readonly kind: "failure" | "interruption";
  readonly error: { readonly name: string; readonly message: string };
}

/** What the ledger holds for a message. */
export interface AttemptLedger {
  /** Runs of the work that failed transiently. */
  readonly failures: number;
  /** Deliveries that ended without an outcome while this message's work was in flight. */
  readonly interruptions: number;
  readonly history: readonly AttemptEntry[];
}

/** The ledger of a message with no row: nothing has failed. */
export const EMPTY_LEDGER: AttemptLedger = Object.freeze({ failures: 0, interruptions: 0, history: [] });

/** Which message, and which delivery of it. */
export interface DeliveryKey {
  readonly messageId: string;
  readonly jobId: string;
  readonly receiveCount: number;
}

interface LedgerRow {
  message_id: string;
  failures: number;
  interruptions: number;
  history: AttemptEntry[];
}

const toLedger = (row: LedgerRow): AttemptLedger => ({
  failures: row.failures,
  interruptions: row.interruptions,
  history: row.history,
});

// Appending one entry to a full history drops its oldest (`- 0`), so the bound always holds.
const APPEND = (history: string, entry: string) =>
  `CASE WHEN jsonb_array_length(${history}) >= ${HISTORY_LIMIT} THEN (${history} - 0) ELSE ${history} END || ${entry}`;

/**
 * Marks the delivery's work as started. A marker left by an earlier delivery of the same message
 * (a lower receive count) means that delivery never reported back: counted as an interruption
 * here, in the same statement. Returns the message's ledger after the claim.
 */
const CLAIM = `
  INSERT INTO core.message_attempts AS a (consumer, message_id, job_id, started)
  VALUES ($1, $2, $3, $4)
  ON CONFLICT (consumer, message_id) DO UPDATE
     SET started = EXCLUDED.started,
         interruptions = a.interruptions + (a.started IS NOT NULL AND a.started < EXCLUDED.started)::int,
         history = CASE WHEN a.started IS NOT NULL AND a.started < EXCLUDED.started
                        THEN ${APPEND("a.history", "jsonb_build_array(jsonb_build_object('attempt', a.failures + 1, 'at', now(), 'receive_count', a.started, 'kind', 'interruption', 'error', jsonb_build_object('name', 'InvocationInterrupted', 'message', 'the delivery ended without an outcome while this record was in flight (timeout, crash or out of memory)')))")}
                        ELSE a.history END,
         updated_at = now()
  RETURNING message_id, failures, interruptions, history`;

export async function claimDelivery(
  db: Queryable,
  consumer: string,
  delivery: DeliveryKey,
): Promise<AttemptLedger> {
  const result = await db.query<LedgerRow>(CLAIM, [
    consumer,
    delivery.messageId,
    delivery.jobId,
    delivery.receiveCount,
  ]);
  const row = result.rows[0];
  if (!row) throw new RangeError("the attempt ledger returned no row");
  return toLedger(row);
}

const RECORD = `
  INSERT INTO core.message_attempts AS a (consumer, message_id, job_id, failures, interruptions, history)
  VALUES ($1, $2, $3, $4, $5, jsonb_build_array($6::jsonb))
  ON CONFLICT (consumer, message_id) DO UPDATE
     SET failures = a.failures + EXCLUDED.failures,
         interruptions = a.interruptions + EXCLUDED.interruptions,
         started = NULL,
         history = ${APPEND("a.history", "EXCLUDED.history")},
         updated_at = now()
  RETURNING message_id, failures, interruptions, history`;

/**
 * Records one failed run (`failure`) or one interruption the harness saw itself (`interruption`:
 * the record was still running when its invocation's time ran out), clears the marker, and returns
 * the ledger after it.
 */
export async function recordAttempt(
  db: Queryable,
  consumer: string,
  delivery: DeliveryKey,
  entry: AttemptEntry,
): Promise<AttemptLedger> {
  const failure = entry.kind === "failure" ? 1 : 0;
  const result = await db.query<LedgerRow>(RECORD, [
    consumer,
    delivery.messageId,
    delivery.jobId,
    failure,
    1 - failure,
    JSON.stringify(entry),
  ]);
  const row = result.rows[0];
  if (!row) throw new RangeError("the attempt ledger returned no row");
  return toLedger(row);
}

const RELEASE = `
  UPDATE core.message_attempts SET started = NULL, updated_at = now()
   WHERE consumer = $1 AND message_id = $2 AND started = $3`;

/** Clears the marker of a delivery that ended with an outcome the ledger does not count (a lock wait). */
export async function releaseDelivery(db: Queryable, consumer: string, delivery: DeliveryKey): Promise<void> {
  await db.query(RELEASE, [consumer, delivery.messageId, delivery.receiveCount]);
}
