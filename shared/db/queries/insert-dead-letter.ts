/**
 * Records a dead letter idempotently: at most one pending row per (consumer, job_id), enforced by
 * the unique partial index, so a second write for the same job (a redelivery after a crash
 * between the insert and the ack) returns the existing row instead of adding one.
 */
import type { ErrorKind } from "../../dead-letters/error-kind.ts";
import type { LastError } from "../../dead-letters/last-error.ts";
import type { Queryable } from "../queryable.ts";

/** The columns a writer supplies; status, timestamps and id come from the database. */
export interface DeadLetterDraft {
  readonly jobId: string;
  readonly consumer: string;
  readonly queue: string;
  readonly tenantId: string | null;
  /** JSON text of an object that jsonb accepts (see `storablePayload`). */
  readonly payloadJson: string;
  readonly messageAttributes: Record<string, unknown>;
  readonly attempts: number;
  readonly errorKind: ErrorKind;
  readonly lastError: LastError;
  readonly correlationId: string;
}

/** The pending dead letter of the job after the write. */
export interface RecordedDeadLetter {
  readonly id: string;
  /** False when an earlier write had already recorded this job's pending dead letter. */
  readonly created: boolean;
}

const INSERT = `
  INSERT INTO core.dead_letters
    (job_id, consumer, queue, tenant_id, payload, message_attributes, attempts, error_kind, last_error, correlation_id)
  VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7, $8, $9::jsonb, $10)
  ON CONFLICT (consumer, job_id) WHERE status = 'pending_review' DO NOTHING
  RETURNING id`;

const FIND_PENDING = `
  SELECT id FROM core.dead_letters
   WHERE consumer = $1 AND job_id = $2 AND status = 'pending_review'`;

/** Bounded: each retry means the pending row was resolved between two of our statements. */
const MAX_TRIES = 3;

/** Writes the dead letter, or finds the pending one already recorded for the same job. */
export async function insertDeadLetter(db: Queryable, draft: DeadLetterDraft): Promise<RecordedDeadLetter> {
  const params = [
    draft.jobId,
    draft.consumer,
    draft.queue,
    draft.tenantId,
    draft.payloadJson,
    JSON.stringify(draft.messageAttributes),
    draft.attempts,
    draft.errorKind,
    JSON.stringify(draft.lastError),
    draft.correlationId,
  ];
  for (let tries = 0; tries < MAX_TRIES; tries++) {
    const inserted = await db.query<{ id: string }>(INSERT, params);
    if (inserted.rows[0]) return { id: inserted.rows[0].id, created: true };
    // A conflicting pending row exists (possibly committed after this statement's snapshot, which
    // is why it is looked up in a statement of its own).
    const existing = await db.query<{ id: string }>(FIND_PENDING, [draft.consumer, draft.jobId]);
    if (existing.rows[0]) return { id: existing.rows[0].id, created: false };
  }
  throw new Error(
    `could not record the dead letter of ${draft.consumer}/${draft.jobId}: its pending row kept changing`,
  );
}
