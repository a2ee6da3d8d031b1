/**
 * Pending dead letters whose job was applied after all: the fence exists (a replay that crashed
 * between its SQS send and its commit, or a producer that sent the job again). They are
 * resolved as `superseded`, as a replay would have found them, when the applied job is theirs
 * (the same fingerprint, or a fence from before fingerprints). A dead letter carrying another job
 * under the same id stays pending: that is a conflict for a person to decide, as is a job whose work
 * committed the fence's transaction itself (ForeignTransactionError: the fence exists, the effect
 * may be half done). A poison row is superseded when its job id was read from the envelope and
 * that job is applied (a corrected resend), whatever fingerprint its malformed payload had; a poison
 * row whose job id is the SQS message id standing in names no job and stays.
 */
import type { Queryable } from "../queryable.ts";

/** Marks them superseded by `actor`; returns how many. */
export async function supersedeAppliedDeadLetters(db: Queryable, actor: string): Promise<number> {
  const { rowCount } = await db.query(
    `UPDATE core.dead_letters AS d
        SET status = 'superseded', resolved_at = now(), resolved_by = $1
      WHERE d.status = 'pending_review'
        AND d.error_kind <> 'conflict'
        -- The work committed its own transaction: the fence exists, the job may be half done.
        AND d.last_error ->> 'class' IS DISTINCT FROM 'ForeignTransactionError'
        AND (CASE WHEN d.error_kind = 'poison'
                  -- A poison row names a job only when its job id was read from the envelope (not
                  -- the SQS message id standing in); that job applied by a corrected resend heals
                  -- it, whatever the malformed payload would have hashed to.
                  THEN d.job_id IS DISTINCT FROM d.message_attributes ->> 'message_id'
                       AND NOT starts_with(d.job_id, 'sqs-message:')
                       AND EXISTS (SELECT 1 FROM core.consumer_roles AS c
                                     JOIN core.processed_jobs AS p ON p.consumer_id = c.id
                                    WHERE c.consumer = d.consumer AND p.job_id = d.job_id)
                  ELSE EXISTS (SELECT 1 FROM core.consumer_roles AS c
                                 JOIN core.processed_jobs AS p ON p.consumer_id = c.id
                                WHERE c.consumer = d.consumer AND p.job_id = d.job_id
                                  AND (p.fingerprint IS NULL OR d.job_fingerprint IS NULL
                                       OR uuid_send(p.fingerprint) = d.job_fingerprint)) END)`,
    [actor],
  );
  return rowCount ?? 0;
}
