/**
 * Records a dead letter idempotently: at most one pending row per (consumer, job_id), enforced by
 * the unique partial index, so a second write for the same job (a redelivery after a crash
 * between the insert and the ack) returns the existing row instead of adding one.
 *
 * With `unlessApplied`, nothing is written when the job's fence exists: the job was applied after
 * all (an attempt whose COMMIT succeeded but whose answer was lost counts as failed), and a job must
 * never be both applied and dead-lettered. The check and the insert are one statement.
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
  /** Write nothing if the job's fence exists (every kind but poison, whose id may not be the job's). */
  readonly unlessApplied: boolean;
}

/** The pending dead letter of the job after the write, or that the job turned out applied. */
export type RecordedDeadLetter =
  | {
      readonly applied?: false;
      readonly id: string;
      /** False when an earlier write had already recorded this job's pending dead letter. */
      readonly created: boolean;
    }
  | { readonly applied: true };

const INSERT = `
  INSERT INTO core.dead_letters
    (job_id, consumer, queue, tenant_id, payload, message_attributes, attempts, error_kind, last_error, correlation_id)
  VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7, $8, $9::jsonb, $10)
  ON CONFLICT (consumer, job_id) WHERE status = 'pending_review' DO NOTHING
  RETURNING id`;

/** The same insert, skipped when the job's fence exists. */
const INSERT_UNLESS_APPLIED = `
  INSERT INTO core.dead_letters
    (job_id, consumer, queue, tenant_id, payload, message_attributes, attempts, error_kind, last_error, correlation_id)
  SELECT $1, $2, $3, $4, $5::jsonb, $6::jsonb, $7, $8, $9::jsonb, $10
   WHERE NOT EXISTS (SELECT 1 FROM core.processed_jobs WHERE job_id = $1 AND consumer = $2)
  ON CONFLICT (consumer, job_id) WHERE status = 'pending_review' DO NOTHING
  RETURNING id`;

const FENCE_EXISTS = "SELECT 1 FROM core.processed_jobs WHERE job_id = $1 AND consumer = $2";

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
    const inserted = await db.query<{ id: string }>(
      draft.unlessApplied ? INSERT_UNLESS_APPLIED : INSERT,
      params,
    );
    if (inserted.rows[0]) return { id: inserted.rows[0].id, created: true };
    if (draft.unlessApplied && (await db.query(FENCE_EXISTS, [draft.jobId, draft.consumer])).rowCount) {
      return { applied: true };
    }
    // A conflicting pending row exists (possibly committed after this statement's snapshot, which
    // is why it is looked up in a statement of its own).
    const existing = await db.query<{ id: string }>(FIND_PENDING, [draft.consumer, draft.jobId]);
    if (existing.rows[0]) return { id: existing.rows[0].id, created: false };
  }
  throw new Error(
    `could not record the dead letter of ${draft.consumer}/${draft.jobId}: its pending row kept changing`,
  );
}
