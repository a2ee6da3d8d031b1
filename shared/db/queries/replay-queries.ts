/**
 * The writes and locked reads of replay and discard. Each function is one statement.
 */
import type { Queryable } from "../queryable.ts";
import { utc } from "./dead-letter-columns.ts";

/** What a replay needs of a dead letter: the stored body (sent as it was received) and the job's fingerprint. */
export interface ReplayRow {
  id: string;
  status: string;
  job_id: string;
  consumer: string;
  queue: string;
  body_form: string;
  body: string | null;
  body_utf16: Buffer | null;
  job_fingerprint: Buffer | null;
  /** Why it was recorded; `outlived` rows are replayed only by force (migration 0021). */
  error_kind: string;
  message_attributes: Record<string, unknown>;
  created_at: string;
  /** Whether `queue` is one registered for the row's consumer (core.replay_queue_allowed). */
  queue_allowed: boolean;
  /** An undelivered follow-up's sending consumer (migration 0019); null on every other row. */
  sender: string | null;
  /**
   * Why an undelivered follow-up's provenance fails (core.dead_letter_provenance_fault): its sender
   * does not declare its consumer as a target, its job id is not the one deriveJobId gives, its body
   * is another job's, or it was recorded without a sender. Null when it holds, and on every other row.
   */
  provenance_fault: string | null;
}

/** The columns of a {@link ReplayRow}, unqualified. */
export const REPLAY_COLUMNS = `id, status, job_id, consumer, queue, body_form, body, body_utf16, job_fingerprint,
  error_kind, message_attributes, ${utc("created_at")} AS created_at, core.replay_queue_allowed(consumer, queue) AS queue_allowed,
  sender, core.dead_letter_provenance_fault(error_kind, consumer, job_id, body_form, body, sender, parent_job_id,
                                            follow_up_key) AS provenance_fault`;

/** Locks one dead letter for a decision (replay or discard); waits for a concurrent one to finish. */
export async function lockDeadLetter(tx: Queryable, id: string): Promise<ReplayRow | undefined> {
  const { rows } = await tx.query<ReplayRow>(
    `SELECT ${REPLAY_COLUMNS} FROM core.dead_letters WHERE id = $1 FOR UPDATE`,
    [id],
  );
  return rows[0];
}

/**
 * The fences of these (job_id, consumer) pairs, by {@link fenceKey}: each present key's job was
 * applied, with the fingerprint given (null for a fence written before fingerprints). A fence names
 * its consumer by the registry's id (migration 0016); a consumer the registry does not have has no
 * fences.
 */
export async function fencesOf(
  db: Queryable,
  jobs: ReadonlyArray<{ job_id: string; consumer: string }>,
): Promise<Map<string, Buffer | null>> {
  if (jobs.length === 0) return new Map();
  const { rows } = await db.query<{ job_id: string; consumer: string; fingerprint: Buffer | null }>(
    `SELECT j.job_id, j.consumer, uuid_send(p.fingerprint) AS fingerprint
       FROM unnest($1::text[], $2::text[]) AS j(job_id, consumer)
       JOIN core.consumer_roles AS c ON c.consumer = j.consumer
       JOIN core.processed_jobs AS p ON p.job_id = j.job_id AND p.consumer_id = c.id`,
    [jobs.map((j) => j.job_id), jobs.map((j) => j.consumer)],
  );
  return new Map(rows.map((r) => [fenceKey(r), r.fingerprint]));
}

/** The key {@link fencesOf} returns for a job. */
export function fenceKey(job: { job_id: string; consumer: string }): string {
  return JSON.stringify([job.job_id, job.consumer]);
}

/** One resolution to record. */
export interface Resolution {
  readonly id: string;
  readonly status: "replayed" | "superseded" | "discarded";
  /** A discard's reason, or an outlived row's forced replay's (the only resolutions that carry one). */
  readonly reason?: string;
}

/**
 * Records resolutions by `actor`, all in one statement. Only rows still pending change; the ids
 * that did are returned (the database refuses any other transition anyway). The `= ANY` repeats
 * the join for the planner, which then reads the rows by primary key instead of scanning every
 * pending row.
 */
export async function resolveDeadLetters(
  tx: Queryable,
  resolutions: readonly Resolution[],
  actor: string,
): Promise<Set<string>> {
  if (resolutions.length === 0) return new Set();
  const { rows } = await tx.query<{ id: string }>(
    `UPDATE core.dead_letters d
        SET status = r.status, discard_reason = r.reason, resolved_at = now(), resolved_by = $4
       FROM unnest($1::uuid[], $2::text[], $3::text[]) AS r(id, status, reason)
      WHERE d.id = r.id AND d.id = ANY ($1::uuid[]) AND d.status = 'pending_review'
      RETURNING d.id`,
    [
      resolutions.map((r) => r.id),
      resolutions.map((r) => r.status),
      resolutions.map((r) => r.reason ?? null),
      actor,
    ],
  );
  return new Set(rows.map((r) => r.id));
}

/** The current status of a dead letter, or undefined when there is none with that id. */
export async function statusOf(db: Queryable, id: string): Promise<string | undefined> {
  const { rows } = await db.query<{ status: string }>("SELECT status FROM core.dead_letters WHERE id = $1", [
    id,
  ]);
  return rows[0]?.status;
}
