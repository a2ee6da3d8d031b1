/** A page of dead letters, newest first, by keyset on (created_at, id): never OFFSET. */
import type { Queryable } from "../queryable.ts";
import { type DeadLetterSummaryRow, type KeysetPosition, SUMMARY_COLUMNS } from "./dead-letter-columns.ts";
import {
  containsPattern,
  type DeadLetterFilterColumns,
  OPS_DEAD_LETTERS,
  sqlWhere,
  whereOf,
} from "./dead-letter-filter.ts";

/**
 * A message match the planner expects at most this many rows for is collected through the trigram
 * index and sorted, rather than found by walking the time index newest first.
 */
export const RARE_MESSAGE_ROWS = 25_000;

/** One page, and the position after its last row when more rows follow. */
export interface DeadLetterPage {
  readonly items: DeadLetterSummaryRow[];
  readonly next: KeysetPosition | null;
}

export async function listDeadLetters(
  db: Queryable,
  filter: DeadLetterFilterColumns,
  limit: number,
  after?: KeysetPosition,
): Promise<DeadLetterPage> {
  const where = whereOf(filter, after ? { position: after, direction: "older" } : undefined);
  // One row more than the page tells whether another page follows, without a count. ORDER BY names
  // the table's columns: the select list renders created_at as text under the same name, and an
  // unqualified name there would sort by that text, in a full sort instead of an index scan.
  const order = (await isRareMessage(db, filter.message))
    ? // "+ interval '0 s'" keeps the order but not the index's: the planner then takes the trigram
      // index's few matches and sorts them. Walking the time index for them instead reads most of
      // the table when they are an old burst (measured at a million rows: seconds, against ~40 ms).
      "dead_letters.created_at + interval '0 s' DESC, dead_letters.id DESC"
    : "dead_letters.created_at DESC, dead_letters.id DESC";
  const { rows } = await db.query<DeadLetterSummaryRow>(
    `SELECT ${SUMMARY_COLUMNS} FROM ${OPS_DEAD_LETTERS} ${sqlWhere(where)}
      ORDER BY ${order} LIMIT ${Number(limit) + 1}`,
    where.params,
  );
  const items = rows.slice(0, limit);
  const last = items.at(-1);
  return { items, next: rows.length > limit && last ? { createdAt: last.created_at, id: last.id } : null };
}

/**
 * Whether the planner expects few rows to contain `message`, judged on the message alone: a rare
 * word stays cheap through the trigram index whatever else is filtered, a common one is found soon
 * enough newest first. One EXPLAIN, no execution.
 */
async function isRareMessage(db: Queryable, message: string | undefined): Promise<boolean> {
  if (message === undefined) return false;
  const { rows } = await db.query<{ "QUERY PLAN": Array<{ Plan: { "Plan Rows": number } }> }>(
    `EXPLAIN (FORMAT JSON) SELECT 1 FROM ${OPS_DEAD_LETTERS} WHERE (last_error ->> 'message') ILIKE $1`,
    [containsPattern(message)],
  );
  const estimate = rows[0]?.["QUERY PLAN"][0]?.Plan["Plan Rows"];
  return estimate !== undefined && estimate <= RARE_MESSAGE_ROWS;
}
