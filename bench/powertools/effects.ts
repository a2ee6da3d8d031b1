/**
 * How many times each job's effect was applied: its rows in award_points.ledger (the ledger has no
 * uniqueness on job_id, so a second application is a second row, not an error). 0 = lost, 1 =
 * exactly once, 2+ = doubled. Read on the benchmark's own (migrator) connection, not the
 * consumers' role, which may only append to the ledger.
 */
import type pg from "pg";
import { classifyEffects, type EffectCount } from "../lib/crash-trials.ts";

export type { EffectCount };

export async function countEffects(db: pg.ClientBase, jobIds: readonly string[]): Promise<EffectCount> {
  const { rows } = await db.query<{ job_id: string; n: number }>(
    `SELECT job_id, count(*)::int AS n FROM award_points.ledger WHERE job_id = ANY ($1::text[]) GROUP BY job_id`,
    [jobIds],
  );
  return classifyEffects(jobIds, new Map(rows.map((r) => [r.job_id, r.n])));
}

/** Throws unless every job of `jobIds` was applied exactly once: a benchmark that double-applies is wrong. */
export async function assertExactlyOnce(db: pg.ClientBase, jobIds: readonly string[], what: string) {
  const count = await countEffects(db, jobIds);
  if (count.once !== count.jobs) {
    throw new Error(
      `${what}: of ${count.jobs} jobs ${count.once} applied once, ${count.doubled} doubled, ${count.lost} lost`,
    );
  }
}
