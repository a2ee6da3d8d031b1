/**
 * What became of each job, read from the database after a run, and the verdict the reliability
 * issue asks for: effect count ≤ 1 for every job, and every job either applied once (ledger entry
 * and fence, no pending dead letter) or not applied with exactly one pending dead letter.
 */
import type pg from "pg";

/** One job's traces in the database. */
export interface JobFate {
  readonly job_id: string;
  /** award_points.ledger rows: the effect count. */
  readonly ledger: number;
  readonly fences: number;
  /** Dead letters still pending_review. */
  readonly pending: number;
  /** Dead letters in any status. */
  readonly dead_letters: number;
  /** error_kind of each dead letter. */
  readonly kinds: string[];
}

/** The run's outcome over all its jobs. */
export interface Verdict {
  readonly jobs: number;
  /** Applied exactly once, no pending dead letter. */
  readonly applied: number;
  /** Not applied, exactly one pending dead letter. */
  readonly deadLettered: number;
  /** Jobs with more than one effect. */
  readonly doubles: number;
  /** Jobs with neither an effect nor a dead letter. */
  readonly lost: number;
  /** Every job that is neither applied once nor dead-lettered once, with its traces. */
  readonly broken: JobFate[];
  /** Dead letters by error_kind. */
  readonly deadLetterKinds: Record<string, number>;
}

export async function jobFates(
  client: pg.ClientBase,
  consumer: string,
  jobIds: readonly string[],
): Promise<JobFate[]> {
  const { rows } = await client.query<JobFate>(
    `SELECT j.job_id,
            (SELECT count(*)::int FROM award_points.ledger l WHERE l.job_id = j.job_id) AS ledger,
            (SELECT count(*)::int FROM core.processed_jobs f
              WHERE f.job_id = j.job_id AND f.consumer_id = core.consumer_id($2)) AS fences,
            (SELECT count(*)::int FROM core.dead_letters d
              WHERE d.job_id = j.job_id AND d.consumer = $2 AND d.status = 'pending_review') AS pending,
            (SELECT count(*)::int FROM core.dead_letters d
              WHERE d.job_id = j.job_id AND d.consumer = $2) AS dead_letters,
            (SELECT coalesce(json_agg(d.error_kind ORDER BY d.created_at), '[]'::json) FROM core.dead_letters d
              WHERE d.job_id = j.job_id AND d.consumer = $2) AS kinds
       FROM unnest($1::text[]) AS j(job_id)
      ORDER BY j.job_id`,
    [jobIds, consumer],
  );
  return rows;
}

export function judge(fates: readonly JobFate[]): Verdict {
  let applied = 0;
  let deadLettered = 0;
  let doubles = 0;
  let lost = 0;
  const broken: JobFate[] = [];
  const deadLetterKinds: Record<string, number> = {};
  for (const fate of fates) {
    for (const kind of fate.kinds) deadLetterKinds[kind] = (deadLetterKinds[kind] ?? 0) + 1;
    if (fate.ledger > 1) doubles++;
    if (fate.ledger === 0 && fate.dead_letters === 0) lost++;
    if (fate.ledger === 1 && fate.fences === 1 && fate.pending === 0) applied++;
    else if (fate.ledger === 0 && fate.fences === 0 && fate.pending === 1) deadLettered++;
    else broken.push(fate);
  }
  return { jobs: fates.length, applied, deadLettered, doubles, lost, broken, deadLetterKinds };
}
