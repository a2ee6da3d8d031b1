/**
 * The select lists of dead-letter reads, shared by the queries that return rows to the API.
 * Timestamps are rendered by PostgreSQL as RFC 3339 UTC with all six fractional digits, so a
 * keyset position taken from a row is exact (a JavaScript Date would drop the microseconds).
 */

import type { AttemptEntry } from "./message-attempts.ts";

/** A position in (created_at, id) order. `createdAt` is PostgreSQL's text, microseconds kept. */
export interface KeysetPosition {
  readonly createdAt: string;
  readonly id: string;
}

/** RFC 3339 UTC with microseconds, from a timestamptz expression. */
export function utc(column: string): string {
  return `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

/**
 * Every column but the body, the payload and the message attributes; fingerprints as hex; and the
 * replay links both ways (the successor through its unique index). The row is named `dead_letters`
 * in every query that uses it (the table, or core.ops_dead_letters under that alias).
 */
export const SUMMARY_COLUMNS = `
  id, job_id, consumer, queue, tenant_id, attempts, error_kind, last_error, status, discard_reason,
  correlation_id, ${utc("created_at")} AS created_at, ${utc("resolved_at")} AS resolved_at, resolved_by,
  body_form, encode(job_fingerprint, 'hex') AS job_fingerprint, encode(fence_fingerprint, 'hex') AS fence_fingerprint,
  error_class, encode(error_fingerprint, 'hex') AS "group", replay_of,
  (SELECT successor.id FROM core.dead_letters AS successor WHERE successor.replay_of = dead_letters.id)
    AS replay_failed_as`;

/** A dead letter as the API returns it. */
export interface DeadLetterSummaryRow {
  id: string;
  job_id: string;
  consumer: string;
  queue: string;
  tenant_id: string | null;
  attempts: number;
  error_kind: string;
  last_error: { class: string; message: string; stack?: string };
  status: string;
  discard_reason: string | null;
  correlation_id: string;
  created_at: string;
  resolved_at: string | null;
  resolved_by: string | null;
  body_form: string;
  job_fingerprint: string | null;
  fence_fingerprint: string | null;
  error_class: string | null;
  /** The failure group: the error fingerprint as hex. */
  group: string;
  /** The replayed dead letter whose replay's failure recorded this one (migration 0025). */
  replay_of: string | null;
  /** This one replayed, and its replay's run failed again: the dead letter that failure recorded. */
  replay_failed_as: string | null;
}

/** A step of its job (core.job_steps): a call outside the database, and what it recorded. */
export interface DeadLetterStep {
  /** The step's name. */
  name: string;
  /** Its place in the job's run, from 1. */
  position: number;
  /** The idempotency key its provider was given. */
  key: string;
  /** When it was (first) called. */
  called_at: string;
  /** When its result was recorded; null: called, its answer never recorded (the provider may have acted). */
  recorded_at: string | null;
  /** The fingerprint (hex) of the job that recorded it: the dead letter's own, or another body's under the same id. */
  fingerprint: string | null;
  /** The result, as its schema accepted it; null while none was recorded. */
  result: unknown;
}

/** A whole dead letter. */
export interface DeadLetterRow extends DeadLetterSummaryRow {
  /** The body exactly as received. */
  body: string;
  payload: Record<string, unknown> | null;
  message_attributes: Record<string, unknown>;
  /** The failed runs and interruptions that led to it, oldest first. */
  attempt_history: AttemptEntry[];
  /**
   * The steps its job recorded, oldest first: calls outside the database that happened and that no
   * failure of the work undid (compensating them is the consumer author's decision).
   */
  steps: DeadLetterStep[];
}
