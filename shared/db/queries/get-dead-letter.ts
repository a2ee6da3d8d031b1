/**
 * One whole dead letter by id: its body exactly as received, its payload and attributes exact to
 * the digit (see exact-json.ts).
 */

import { stepKey } from "../../envelope/step-key.ts";
import { parseJsonExact } from "../exact-json.ts";
import type { Queryable } from "../queryable.ts";
import { bodyOf } from "../stored-body.ts";
import type { DeadLetterStep } from "./dead-letter-columns.ts";
import { type DeadLetterRow, SUMMARY_COLUMNS, utc } from "./dead-letter-columns.ts";
import { JOB_CLAIM } from "./job-steps.ts";

/**
 * The job's steps (core.job_steps, migration 0027), oldest first, as one JSON array: its calls
 * outside the database, each with what it recorded (or nothing: called, its answer never recorded),
 * which a failure of its work does not undo. Results are kept as their exact text (json_agg of json
 * values copies them).
 */
const STEPS_COLUMN = `(SELECT coalesce(json_agg(json_build_object(
      'name', s.step, 'position', s.position, 'called_at', ${utc("s.called_at")},
      'recorded_at', ${utc("s.recorded_at")},
      'fingerprint', encode(uuid_send(s.fingerprint), 'hex'), 'result', s.result)
      ORDER BY s.position, s.called_at), '[]')::text
    FROM core.job_steps AS s JOIN core.consumer_roles AS c ON c.id = s.consumer_id
   WHERE c.consumer = dead_letters.consumer AND s.job_id = dead_letters.job_id AND s.step <> '${JOB_CLAIM}')`;

/** The steps as the API shows them, each with the key its provider saw. */
function stepsOf(consumer: string, jobId: string, text: string): DeadLetterStep[] {
  const steps = parseJsonExact(text) as Omit<DeadLetterStep, "key">[];
  return steps.map((s) => ({ ...s, key: stepKey(consumer, jobId, s.name) }));
}

type StoredRow = Omit<DeadLetterRow, "body" | "payload" | "message_attributes" | "steps"> & {
  body: string | null;
  body_utf16: Buffer | null;
  payload_text: string | null;
  message_attributes_text: string;
  steps_text: string;
};

export async function getDeadLetter(db: Queryable, id: string): Promise<DeadLetterRow | undefined> {
  const { rows } = await db.query<StoredRow>(
    `SELECT ${SUMMARY_COLUMNS}, body, body_utf16, payload::text AS payload_text,
            message_attributes::text AS message_attributes_text, attempt_history,
            ${STEPS_COLUMN} AS steps_text
       FROM core.dead_letters WHERE id = $1`,
    [id],
  );
  const row = rows[0];
  if (!row) return undefined;
  const { body: _body, body_utf16: _utf16, payload_text, message_attributes_text, steps_text, ...rest } = row;
  return {
    ...rest,
    steps: stepsOf(row.consumer, row.job_id, steps_text),
    body: bodyOf(row),
    payload: payload_text === null ? null : (parseJsonExact(payload_text) as Record<string, unknown>),
    message_attributes: parseJsonExact(message_attributes_text) as Record<string, unknown>,
  };
}
