/**
 * The reads and writes of a job's step checkpoints, core.job_steps (migration 0027). Each is a
 * statement of its own, never the fence's transaction.
 */
import type { Queryable } from "../queryable.ts";

/** A step recorded for a job: its JSON text exactly as stored. */
export interface RecordedStep {
  readonly step: string;
  readonly position: number;
  /** The fingerprint of the job that recorded it (16 bytes); null on none. */
  readonly fingerprint: Buffer | null;
  readonly resultText: string;
}

/** What a delivery finds of its job before its steps run. */
export interface JobStepsFound {
  /** The job's fence, when it exists: the job was applied, and its steps do not run again. */
  readonly fenced: boolean;
  /** The steps recorded for the job, by name. */
  readonly steps: ReadonlyMap<string, RecordedStep>;
}

/** The job's fence (whether it exists) and its recorded steps, in one round trip. */
export async function readJobSteps(db: Queryable, consumer: string, jobId: string): Promise<JobStepsFound> {
  const { rows } = await db.query<{
    step: string | null;
    position: number | null;
    fingerprint: Buffer | null;
    result: string | null;
  }>(
    `SELECT NULL::text AS step, NULL::smallint AS position, NULL::bytea AS fingerprint, NULL::text AS result
       FROM core.processed_jobs AS p
      WHERE p.job_id = $1 AND p.consumer_id = (SELECT core.consumer_id($2))
     UNION ALL
     SELECT s.step, s.position, uuid_send(s.fingerprint), s.result::text
       FROM core.job_steps AS s
      WHERE s.job_id = $1 AND s.consumer_id = (SELECT core.consumer_id($2))`,
    [jobId, consumer],
  );
  let fenced = false;
  const steps = new Map<string, RecordedStep>();
  for (const row of rows) {
    if (row.step === null || row.result === null) fenced = true;
    else
      steps.set(row.step, {
        step: row.step,
        position: row.position ?? 0,
        fingerprint: row.fingerprint,
        resultText: row.result,
      });
  }
  return { fenced, steps };
}

/** A step's checkpoint to write. */
export interface StepCheckpoint {
  readonly consumer: string;
  readonly jobId: string;
  readonly step: string;
  readonly position: number;
  readonly fingerprint: Buffer;
  /** The result's JSON text. */
  readonly resultText: string;
  /** How long the row lives at least: the consumer's fence TTL. */
  readonly ttlSeconds: number;
}

/**
 * Writes the checkpoint, unless the step is recorded already (another delivery of the job got
 * there first); returns the one recorded, whichever wrote it.
 */
export async function recordStep(db: Queryable, c: StepCheckpoint): Promise<RecordedStep> {
  const inserted = await db.query<{ result: string }>(
    `INSERT INTO core.job_steps (job_id, consumer_id, step, position, fingerprint, result, expires_at)
     VALUES ($1, (SELECT core.consumer_id($2)), $3, $4, $5::uuid, $6::json, now() + make_interval(secs => $7))
     ON CONFLICT (job_id, consumer_id, step) DO NOTHING
     RETURNING result::text AS result`,
    [c.jobId, c.consumer, c.step, c.position, c.fingerprint.toString("hex"), c.resultText, c.ttlSeconds],
  );
  if (inserted.rows.length > 0) {
    return { step: c.step, position: c.position, fingerprint: c.fingerprint, resultText: c.resultText };
  }
  // The winner committed after this statement's snapshot was taken: a statement of its own sees it.
  const { rows } = await db.query<{ position: number; fingerprint: Buffer | null; result: string }>(
    `SELECT s.position, uuid_send(s.fingerprint) AS fingerprint, s.result::text AS result
       FROM core.job_steps AS s
      WHERE s.job_id = $1 AND s.consumer_id = (SELECT core.consumer_id($2)) AND s.step = $3`,
    [c.jobId, c.consumer, c.step],
  );
  const row = rows[0];
  if (row === undefined)
    throw new Error(`step ${JSON.stringify(c.step)}: its checkpoint was neither written nor found`);
  return { step: c.step, position: row.position, fingerprint: row.fingerprint, resultText: row.result };
}
