/**
 * Records a dead letter idempotently per distinct message content: at most one pending row per
 * (consumer, job_id, body fingerprint), enforced by a unique partial index, so the same body
 * written again (a redelivery after a crash between the insert and the ack) finds its row, while a
 * different body of the same job gets a row of its own.
 *
 * With `checkFence`, the job's fence decides in the same statement: a fence with the message's
 * fingerprint (or one written before fingerprints) means the job was applied after all (an attempt
 * whose COMMIT succeeded but whose answer was lost), and nothing is written; a fence with another
 * fingerprint means this message is a different job under an applied job's id, and the row is
 * written as a `conflict` naming both fingerprints.
 *
 * Either way the statement locks the job's fence, when there is one, until the dead letter commits
 * (core.hold_fence, migration 0013): the TTL cleanup then cannot delete it between looking for
 * pending dead letters and this one committing, so a replay always finds it.
 *
 * A failure is never merged into a row that is leaving pending_review (migration 0020): a replay
 * or a bulk chunk holds the row FOR UPDATE while it sends the body to SQS, and the copy it sent may
 * fail again before the replay commits. So the pending row a write collides with is looked up
 * FOR SHARE (core.hold_pending_dead_letter), which waits for whatever transaction is resolving
 * it; a row that transaction resolved is not returned, and the write inserts a row of its own.
 * Only the conflict path changes: a write that inserts takes the one statement it always took.
 * A wait that outlasts the session's lock_timeout is an error, so the record stays in its queue.
 */

import { DeadLetterRaceError } from "../../errors/dead-letter.ts";
import type { ErrorKind } from "../../errors/error-kind.ts";
import type { LastError } from "../../errors/last-error.ts";
import type { Queryable } from "../queryable.ts";
import type { StoredBody } from "../stored-body.ts";
import type { AttemptEntry } from "./message-attempts.ts";

/** The columns a writer supplies; status, timestamps, id and the body fingerprint come from the database. */
export interface DeadLetterDraft {
  readonly jobId: string;
  readonly consumer: string;
  readonly queue: string;
  readonly tenantId: string | null;
  readonly correlationId: string;
  readonly body: StoredBody;
  /** JSON text of an object for the `payload` column, or null (see `jsonbCandidate`). */
  readonly payloadJson: string | null;
  readonly messageAttributes: Record<string, unknown>;
  readonly attempts: number;
  /** The failed runs and interruptions before this dead letter, oldest first. */
  readonly attemptHistory: readonly AttemptEntry[];
  readonly errorKind: ErrorKind;
  readonly lastError: LastError;
  /** The message's job fingerprint, when its envelope could be read. */
  readonly jobFingerprint: Buffer | null;
  /** Conflicts: the applied job's fingerprint. */
  readonly fenceFingerprint: Buffer | null;
  /** Let the job's fence decide (see the module comment). Needs `jobFingerprint`. */
  readonly checkFence: boolean;
}

/** The pending dead letter of the message after the write, or that the job turned out applied. */
export type RecordedDeadLetter =
  | {
      readonly applied?: false;
      readonly id: string;
      /** The row's kind: the draft's, or `conflict` when the fence named another job. */
      readonly errorKind: ErrorKind;
      /** False when an earlier write had already recorded this body's pending dead letter. */
      readonly created: boolean;
    }
  | { readonly applied: true };

const INSERT = `
  WITH held AS MATERIALIZED (
    SELECT uuid_send(fingerprint) AS fingerprint FROM core.hold_fence($1, $2)
  ), fence AS (
    SELECT fingerprint FROM held WHERE $17::boolean
  )
  INSERT INTO core.dead_letters
    (job_id, consumer, queue, tenant_id, correlation_id, body_form, body, body_utf16, body_fingerprint,
     payload, message_attributes, attempts, error_kind, last_error, job_fingerprint, fence_fingerprint,
     attempt_history)
  SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11::jsonb, $12,
         CASE WHEN fence.fingerprint IS NULL THEN $13 ELSE 'conflict' END,
         $14::jsonb, $15, coalesce(fence.fingerprint, $16), $18::jsonb
    FROM (VALUES (1)) AS one
    LEFT JOIN fence ON true
   WHERE NOT EXISTS (SELECT 1 FROM fence WHERE fence.fingerprint IS NULL OR fence.fingerprint = $15)
     -- Always evaluated, so the fence is locked even when it does not decide (the drain's writes).
     AND (SELECT count(*) FROM held) >= 0
  ON CONFLICT (consumer, job_id, body_fingerprint) WHERE status = 'pending_review' DO NOTHING
  RETURNING id, error_kind`;

const FENCE_MATCHES = `
  SELECT 1 FROM core.consumer_roles AS c JOIN core.processed_jobs AS p ON p.consumer_id = c.id
   WHERE p.job_id = $1 AND c.consumer = $2 AND (p.fingerprint IS NULL OR uuid_send(p.fingerprint) = $3)`;

// The pending row of this body, locked FOR SHARE until this write's transaction ends: it waits for
// a replay, bulk chunk, discard or supersede that holds the row, and returns nothing when that
// resolved it.
const HOLD_PENDING = "SELECT id, error_kind FROM core.hold_pending_dead_letter($1, $2, $3)";

/** Bounded: each retry means the pending row was resolved between two of our statements. */
const MAX_TRIES = 3;

/** Writes the dead letter, or finds the pending one already recorded for the same body. */
export async function insertDeadLetter(db: Queryable, draft: DeadLetterDraft): Promise<RecordedDeadLetter> {
  if (draft.checkFence && draft.jobFingerprint === null) {
    throw new RangeError("a dead letter checked against the fence needs the job's fingerprint");
  }
  const { body } = draft;
  const params = [
    draft.jobId,
    draft.consumer,
    draft.queue,
    draft.tenantId,
    draft.correlationId,
    body.form,
    body.form === "text" ? body.text : null,
    body.form === "utf16" ? body.utf16 : null,
    body.fingerprint,
    draft.payloadJson,
    JSON.stringify(draft.messageAttributes),
    draft.attempts,
    draft.errorKind,
    JSON.stringify(draft.lastError),
    draft.jobFingerprint,
    draft.fenceFingerprint,
    draft.checkFence,
    JSON.stringify(draft.attemptHistory),
  ];
  for (let tries = 0; tries < MAX_TRIES; tries++) {
    const inserted = await db.query<{ id: string; error_kind: ErrorKind }>(INSERT, params);
    const row = inserted.rows[0];
    if (row) return { id: row.id, errorKind: row.error_kind, created: true };
    if (
      draft.checkFence &&
      (await db.query(FENCE_MATCHES, [draft.jobId, draft.consumer, draft.jobFingerprint])).rowCount
    ) {
      return { applied: true };
    }
    // A pending row of this body exists (possibly committed after this statement's snapshot, which
    // is why it is looked up in a statement of its own). Merge into it only once no transition can
    // be taking it; if one did, insert again.
    const existing = await db.query<{ id: string; error_kind: ErrorKind }>(HOLD_PENDING, [
      draft.consumer,
      draft.jobId,
      body.fingerprint,
    ]);
    const found = existing.rows[0];
    if (found) return { id: found.id, errorKind: found.error_kind, created: false };
  }
  throw new DeadLetterRaceError(draft.consumer, draft.jobId);
}
