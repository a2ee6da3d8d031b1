/**
 * The reference consumer's effect: append one ledger entry and add the points to the user's
 * balance, in one statement (one round trip) on the fence's transaction. The ledger insert returns
 * nothing, so the consumer role needs no SELECT on the ledger: it can only append.
 */
import type { WorkQueries } from "../../shared/index.ts";

const SQL = `
  WITH entry AS (
    INSERT INTO award_points.ledger (job_id, tenant_id, user_id, points)
    VALUES ($1, $2, $3, $4)
  )
  INSERT INTO award_points.balances AS b (tenant_id, user_id, balance)
  VALUES ($2, $3, $4)
  ON CONFLICT (tenant_id, user_id) DO UPDATE SET balance = b.balance + EXCLUDED.balance, updated_at = now()`;

/** One award. */
export interface Award {
  readonly jobId: string;
  readonly tenantId: string;
  readonly userId: string;
  readonly points: number;
}

/** Appends the ledger entry and increments the balance. */
export async function awardPoints(tx: WorkQueries, award: Award): Promise<void> {
  await tx.query(SQL, [award.jobId, award.tenantId, award.userId, award.points]);
}
