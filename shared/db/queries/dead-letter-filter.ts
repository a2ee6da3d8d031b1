/**
 * Turns an API filter into a parameterised WHERE clause. Only fixed SQL fragments are spliced;
 * every value a client sent travels as a parameter, so no filter string can change the query.
 */
import type { KeysetPosition } from "./dead-letter-columns.ts";

/**
 * What the ops API's filtered reads select from: every dead letter, through the view of migration
 * 0018, so that they are planned with the table's statistics (row-level security withholds them
 * from jobfence_ops for ILIKE, and a message filter was then planned blind). Named `dead_letters`,
 * as the queries qualify their columns. Only jobfence_ops may read it.
 */
export const OPS_DEAD_LETTERS = "core.ops_dead_letters AS dead_letters";

/**
 * What the dead-letter reads filter on, each field already validated: the ops API's list filter
 * (dead-letters/api-schemas.ts) has exactly these fields, which its schema checks against this.
 */
export interface DeadLetterFilterColumns {
  readonly status?: string;
  readonly consumer?: string;
  readonly queue?: string;
  readonly error_kind?: string;
  readonly tenant_id?: string;
  readonly job_id?: string;
  readonly correlation_id?: string;
  /** Created at or after this instant (RFC 3339). */
  readonly created_after?: string;
  /** Created strictly before this instant (RFC 3339). */
  readonly created_before?: string;
  /** A failure group: the error fingerprint as hex. */
  readonly group?: string;
  /** `last_error.class`. */
  readonly error_class?: string;
  /** Text `last_error.message` contains, case-insensitively. */
  readonly message?: string;
}

/** What a bulk operation filters on: only pending dead letters are acted on, so status is no filter. */
export type BulkFilterColumns = Omit<DeadLetterFilterColumns, "status">;

/** Conditions and their parameters, to be joined with AND. */
export interface WhereClause {
  readonly conditions: string[];
  readonly params: unknown[];
}

const EQUALITY: ReadonlyArray<keyof DeadLetterFilterColumns> = [
  "status",
  "consumer",
  "queue",
  "error_kind",
  "tenant_id",
  "job_id",
  "correlation_id",
  "error_class",
];

/** `text` as a LIKE pattern that matches it literally, anywhere. */
export function containsPattern(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/** The WHERE clause of a filter, optionally resuming after a keyset position in `direction`. */
export function whereOf(
  filter: DeadLetterFilterColumns,
  after?: { position: KeysetPosition; direction: "older" | "newer" },
): WhereClause {
  const conditions: string[] = [];
  const params: unknown[] = [];
  const param = (value: unknown) => {
    params.push(value);
    return `$${params.length}`;
  };
  for (const column of EQUALITY) {
    const value = filter[column];
    if (value !== undefined) conditions.push(`${column} = ${param(value)}`);
  }
  if (filter.group !== undefined)
    conditions.push(`error_fingerprint = decode(${param(filter.group)}, 'hex')`);
  // The same expression as the trigram index (migration 0011), so a rare match is an index lookup.
  if (filter.message !== undefined)
    conditions.push(`(last_error ->> 'message') ILIKE ${param(containsPattern(filter.message))}`);
  if (filter.created_after !== undefined)
    conditions.push(`created_at >= ${param(filter.created_after)}::timestamptz`);
  if (filter.created_before !== undefined)
    conditions.push(`created_at < ${param(filter.created_before)}::timestamptz`);
  if (after) {
    const op = after.direction === "older" ? "<" : ">";
    conditions.push(
      `(created_at, id) ${op} (${param(after.position.createdAt)}::timestamptz, ${param(after.position.id)}::uuid)`,
    );
  }
  return { conditions, params };
}

/** `WHERE a AND b …`, or nothing. */
export function sqlWhere(clause: WhereClause): string {
  return clause.conditions.length > 0 ? `WHERE ${clause.conditions.join(" AND ")}` : "";
}
