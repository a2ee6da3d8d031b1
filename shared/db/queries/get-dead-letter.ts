/** One whole dead letter by id; its payload and attributes exact to the digit (see exact-json.ts). */
import { parseJsonExact } from "../exact-json.ts";
import type { Queryable } from "../queryable.ts";
import { type DeadLetterRow, SUMMARY_COLUMNS } from "./dead-letter-columns.ts";

export async function getDeadLetter(db: Queryable, id: string): Promise<DeadLetterRow | undefined> {
  const { rows } = await db.query<DeadLetterRow & { payload_text: string; message_attributes_text: string }>(
    `SELECT ${SUMMARY_COLUMNS}, payload::text AS payload_text, message_attributes::text AS message_attributes_text
       FROM core.dead_letters WHERE id = $1`,
    [id],
  );
  const row = rows[0];
  if (!row) return undefined;
  const { payload_text, message_attributes_text, ...rest } = row;
  return {
    ...rest,
    payload: parseJsonExact(payload_text) as Record<string, unknown>,
    message_attributes: parseJsonExact(message_attributes_text) as Record<string, unknown>,
  };
}
