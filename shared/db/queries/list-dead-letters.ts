/** A page of dead letters, newest first, by keyset on (created_at, id): never OFFSET. */
import type { DeadLetterFilter } from "../../dead-letters/api-schemas.ts";
import type { KeysetPosition } from "../../dead-letters/cursor.ts";
import type { Queryable } from "../queryable.ts";
import { type DeadLetterSummaryRow, SUMMARY_COLUMNS } from "./dead-letter-columns.ts";
import { sqlWhere, whereOf } from "./dead-letter-filter.ts";

/** One page, and the position after its last row when more rows follow. */
export interface DeadLetterPage {
  readonly items: DeadLetterSummaryRow[];
  readonly next: KeysetPosition | null;
}

export async function listDeadLetters(
  db: Queryable,
  filter: DeadLetterFilter,
  limit: number,
  after?: KeysetPosition,
): Promise<DeadLetterPage> {
  const where = whereOf(filter, after ? { position: after, direction: "older" } : undefined);
  // One row more than the page tells whether another page follows, without a count. ORDER BY names
  // the table's columns: the select list renders created_at as text under the same name, and an
  // unqualified name there would sort by that text, in a full sort instead of an index scan.
  const { rows } = await db.query<DeadLetterSummaryRow>(
    `SELECT ${SUMMARY_COLUMNS} FROM core.dead_letters ${sqlWhere(where)}
      ORDER BY dead_letters.created_at DESC, dead_letters.id DESC LIMIT ${Number(limit) + 1}`,
    where.params,
  );
  const items = rows.slice(0, limit);
  const last = items.at(-1);
  return { items, next: rows.length > limit && last ? { createdAt: last.created_at, id: last.id } : null };
}
