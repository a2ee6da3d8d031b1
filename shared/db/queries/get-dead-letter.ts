/** One whole dead letter by id. */
import type { Queryable } from "../queryable.ts";
import { ALL_COLUMNS, type DeadLetterRow } from "./dead-letter-columns.ts";

export async function getDeadLetter(db: Queryable, id: string): Promise<DeadLetterRow | undefined> {
  const { rows } = await db.query<DeadLetterRow>(
    `SELECT ${ALL_COLUMNS} FROM core.dead_letters WHERE id = $1`,
    [id],
  );
  return rows[0];
}
