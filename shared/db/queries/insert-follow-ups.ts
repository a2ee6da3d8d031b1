/**
 * Writes a transaction's follow-ups to the outbox (migration 0015): one statement for all of them,
 * sent on the fence's connection just before the COMMIT, so a job that sends pays one round trip
 * and one that sends nothing pays none.
 *
 * The row policy (migration 0019) checks each row as it goes in: a target the deployment declares
 * for the consumer, the job id deriveJobId gives for the parent and the key, a body of that id, and
 * the parent's fence written by this same transaction.
 */
import type { Queryable } from "../queryable.ts";

/** A follow-up as its outbox row holds it. */
export interface StagedFollowUp {
  readonly consumer: string;
  readonly parentJobId: string;
  readonly target: string;
  readonly jobId: string;
  /**
   * The key deriveJobId took after the parent job id, as its RFC 8785 JSON: stored with the row, so
   * the database recomputes the job id (migration 0019).
   */
  readonly key: string;
  readonly tenantId: string;
  readonly correlationId: string;
  /** The envelope as JSON text: the message body, sent as it is. */
  readonly body: string;
  readonly fingerprint: Buffer;
  readonly groupId: string | null;
  readonly traceparent: string | null;
}

const INSERT = `
  INSERT INTO core.outbox
    (consumer, parent_job_id, target, job_id, tenant_id, correlation_id, body, job_fingerprint, group_id, traceparent,
     follow_up_key)
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                       $8::bytea[], $9::text[], $10::text[], $11::text[])`;

/** Inserts the rows; throws what the server answers (the transaction then cannot commit). */
export async function insertFollowUps(db: Queryable, followUps: readonly StagedFollowUp[]): Promise<void> {
  if (followUps.length === 0) return;
  const column = <T>(pick: (f: StagedFollowUp) => T) => followUps.map(pick);
  await db.query(INSERT, [
    column((f) => f.consumer),
    column((f) => f.parentJobId),
    column((f) => f.target),
    column((f) => f.jobId),
    column((f) => f.tenantId),
    column((f) => f.correlationId),
    column((f) => f.body),
    column((f) => f.fingerprint),
    column((f) => f.groupId),
    column((f) => f.traceparent),
    column((f) => f.key),
  ]);
}
