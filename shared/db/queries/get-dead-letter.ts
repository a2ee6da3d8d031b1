/**
 * One whole dead letter by id: its body exactly as received, its payload and attributes exact to
 * the digit (see exact-json.ts).
 */

import { parseJsonExact } from "../exact-json.ts";
import type { Queryable } from "../queryable.ts";
import { bodyOf } from "../stored-body.ts";
import { type DeadLetterRow, SUMMARY_COLUMNS } from "./dead-letter-columns.ts";

type StoredRow = Omit<DeadLetterRow, "body" | "payload" | "message_attributes"> & {
  body: string | null;
  body_utf16: Buffer | null;
  payload_text: string | null;
  message_attributes_text: string;
};

export async function getDeadLetter(db: Queryable, id: string): Promise<DeadLetterRow | undefined> {
  const { rows } = await db.query<StoredRow>(
    `SELECT ${SUMMARY_COLUMNS}, body, body_utf16, payload::text AS payload_text,
            message_attributes::text AS message_attributes_text, attempt_history
       FROM core.dead_letters WHERE id = $1`,
    [id],
  );
  const row = rows[0];
  if (!row) return undefined;
  const { body: _body, body_utf16: _utf16, payload_text, message_attributes_text, ...rest } = row;
  return {
    ...rest,
    body: bodyOf(row),
    payload: payload_text === null ? null : (parseJsonExact(payload_text) as Record<string, unknown>),
    message_attributes: parseJsonExact(message_attributes_text) as Record<string, unknown>,
  };
}
