/** Pending dead letters older than a threshold, per consumer: count and the oldest (escalation). */
import type { Queryable } from "../queryable.ts";
import { utc } from "./dead-letter-columns.ts";

export interface StalePending {
  consumer: string;
  count: number;
  oldest_id: string;
  oldest_created_at: string;
}

export async function stalePendingDeadLetters(
  db: Queryable,
  olderThanSeconds: number,
): Promise<StalePending[]> {
  const { rows } = await db.query<{
    consumer: string;
    count: string;
    oldest_id: string;
    oldest_created_at: string;
  }>(
    `SELECT consumer, count(*) AS count,
            (array_agg(id ORDER BY created_at, id))[1] AS oldest_id,
            ${utc("min(created_at)")} AS oldest_created_at
       FROM core.dead_letters
      WHERE status = 'pending_review' AND created_at < now() - make_interval(secs => $1)
      GROUP BY consumer
      ORDER BY min(created_at), consumer`,
    [olderThanSeconds],
  );
  return rows.map((r) => ({ ...r, count: Number(r.count) }));
}
