/**
 * Counts by consumer × status × error_kind (from the trigger-maintained counts table) and the
 * oldest pending dead letter of each consumer (one index probe per consumer), and the biggest
 * pending failure groups of each.
 */
import type { Queryable } from "../queryable.ts";
import { utc } from "./dead-letter-columns.ts";
import { type DeadLetterGroup, topPendingGroups } from "./dead-letter-groups.ts";

export interface DeadLetterStats {
  counts: Array<{ consumer: string; status: string; error_kind: string; count: number }>;
  oldest_pending: Array<{ consumer: string; id: string; created_at: string }>;
  groups: DeadLetterGroup[];
}

export async function deadLetterStats(db: Queryable, groupsPerConsumer: number): Promise<DeadLetterStats> {
  const counts = await db.query<{ consumer: string; status: string; error_kind: string; count: string }>(
    `SELECT consumer, status, error_kind, count FROM core.dead_letter_counts
      WHERE count > 0 ORDER BY consumer, status, error_kind`,
  );
  const oldest = await db.query<{ consumer: string; id: string; created_at: string }>(
    `SELECT c.consumer, o.id, ${utc("o.created_at")} AS created_at
       FROM (SELECT DISTINCT consumer FROM core.dead_letter_counts
              WHERE status = 'pending_review' AND count > 0) AS c
       CROSS JOIN LATERAL (
         SELECT id, created_at FROM core.dead_letters d
          WHERE d.consumer = c.consumer AND d.status = 'pending_review'
          ORDER BY d.created_at, d.id LIMIT 1) AS o
      ORDER BY o.created_at, o.id`,
  );
  return {
    counts: counts.rows.map((r) => ({ ...r, count: Number(r.count) })),
    oldest_pending: oldest.rows,
    groups: await topPendingGroups(db, groupsPerConsumer),
  };
}
