/**
 * Failure groups, read from the trigger-maintained core.dead_letter_groups (migration 0011): a few
 * rows however many dead letters there are.
 */
import type { Queryable } from "../queryable.ts";
import { utc } from "./dead-letter-columns.ts";

/** A group as the API returns it. */
export interface DeadLetterGroup {
  consumer: string;
  group: string;
  error_class: string | null;
  pending: number;
  total: number;
  first_seen: string;
  last_seen: string;
  sample: { id: string; message: string };
}

interface GroupRow extends Omit<DeadLetterGroup, "pending" | "total" | "sample"> {
  pending: string;
  total: string;
  sample_id: string;
  sample_message: string;
}

const GROUP_COLUMNS = `consumer, encode(fingerprint, 'hex') AS "group", error_class, pending, total,
  ${utc("first_seen")} AS first_seen, ${utc("last_seen")} AS last_seen, sample_id, sample_message`;

function toGroup(row: GroupRow): DeadLetterGroup {
  const { sample_id, sample_message, pending, total, ...rest } = row;
  return {
    ...rest,
    pending: Number(pending),
    total: Number(total),
    sample: { id: sample_id, message: sample_message },
  };
}

/** Groups, biggest pending first; only those with something pending unless `includeResolved`. */
export async function listDeadLetterGroups(
  db: Queryable,
  options: { consumer?: string; error_class?: string; include_resolved: boolean; limit: number },
): Promise<DeadLetterGroup[]> {
  const conditions: string[] = [];
  const params: unknown[] = [];
  if (!options.include_resolved) conditions.push("pending > 0");
  if (options.consumer !== undefined) {
    params.push(options.consumer);
    conditions.push(`consumer = $${params.length}`);
  }
  if (options.error_class !== undefined) {
    params.push(options.error_class);
    conditions.push(`error_class = $${params.length}`);
  }
  const where = conditions.length > 0 ? `WHERE ${conditions.join(" AND ")}` : "";
  const { rows } = await db.query<GroupRow>(
    `SELECT ${GROUP_COLUMNS} FROM core.dead_letter_groups ${where}
      ORDER BY pending DESC, total DESC, consumer, fingerprint LIMIT ${Number(options.limit)}`,
    params,
  );
  return rows.map(toGroup);
}

/** The `perConsumer` biggest groups with something pending, of every consumer. */
export async function topPendingGroups(db: Queryable, perConsumer: number): Promise<DeadLetterGroup[]> {
  const { rows } = await db.query<GroupRow>(
    `SELECT ${GROUP_COLUMNS} FROM (
       SELECT g.*, row_number() OVER (PARTITION BY consumer ORDER BY pending DESC, total DESC, fingerprint) AS rank
         FROM core.dead_letter_groups g WHERE pending > 0) AS ranked
      WHERE rank <= $1
      ORDER BY consumer, pending DESC, total DESC, fingerprint`,
    [perConsumer],
  );
  return rows.map(toGroup);
}
