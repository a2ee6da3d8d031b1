/**
 * The reads and writes of a job's step checkpoints, core.job_steps (migration 0027): the job
 * claimed for its body and its steps found, a step claimed before its call, its result recorded after. Each is a statement of
 * its own, never the fence's transaction.
 */
import type { Queryable } from "../queryable.ts";

/** A step of a job as the table has it: its result's JSON text exactly as stored, or none yet. */
export interface StepCheckpoint {
  readonly step: string;
  readonly position: number;
  /** The fingerprint of the job that claimed it (16 bytes); null on none. */
  readonly fingerprint: Buffer | null;
  /** The recorded result; null while the step was called and its answer not recorded. */
  readonly resultText: string | null;
  /** Seconds since the step was claimed (called), by the database's clock. */
  readonly ageSeconds: number;
}

/** What a delivery finds of its job before its steps run. */
export interface JobStepsFound {
  /** The job's fence, when it exists: the job was applied, and its steps do not run again. */
  readonly fenced: boolean;
  /** The fingerprint the job's steps were claimed with (its `_job` row): this body's, or another's. */
  readonly claimedBy: Buffer | null;
  /** The job's steps claimed or recorded so far, by name. */
  readonly steps: ReadonlyMap<string, StepCheckpoint>;
}

/** The name of the job's own claim among its steps (migration 0027). */
export const JOB_CLAIM = "_job";

/** What a delivery's steps begin with: the job, its consumer and its body. */
export interface JobToClaim {
  readonly consumer: string;
  readonly jobId: string;
  readonly fingerprint: Buffer;
  /** How long the claim lives at least: the consumer's fence TTL. */
  readonly ttlSeconds: number;
}

type StepRow = {
  step: string;
  position: number;
  fingerprint: Buffer | null;
  result: string | null;
  age: number;
};

function checkpointOf(row: StepRow): StepCheckpoint {
  return {
    step: row.step,
    position: row.position,
    fingerprint: row.fingerprint,
    resultText: row.result,
    ageSeconds: Number(row.age),
  };
}

/** A row's columns as {@link StepRow} reads them. */
const STEP_COLUMNS = `s.step, s.position, uuid_send(s.fingerprint) AS fingerprint, s.result::text AS result,
  extract(epoch FROM now() - s.called_at)::float8 AS age`;

/** The fence and every step row of a job, `_job` included, as one statement reads them. */
const FIND = `
  SELECT true AS fence, NULL::text AS step, NULL::smallint AS position, NULL::bytea AS fingerprint,
         NULL::text AS result, NULL::float8 AS age
    FROM core.processed_jobs AS p
   WHERE p.job_id = $1 AND p.consumer_id = (SELECT core.consumer_id($2))
  UNION ALL
  SELECT false, ${STEP_COLUMNS}
    FROM core.job_steps AS s
   WHERE s.job_id = $1 AND s.consumer_id = (SELECT core.consumer_id($2))`;

/**
 * Claims the job for this body unless it is claimed already, and reads its fence and its steps, in
 * one round trip; a second only when the job's claim was committed by another delivery after this
 * statement began (it cannot see that row: a statement of its own does).
 */
export async function claimJobSteps(db: Queryable, job: JobToClaim): Promise<JobStepsFound> {
  // The claim's row is not visible to this statement's own read: whether it was written is asked of
  // the insert, and answered on every row (at least one, whatever the read finds).
  const { rows } = await db.query<{ claimed: boolean } & Found>(
    `WITH claim AS (
       INSERT INTO core.job_steps (job_id, consumer_id, step, position, fingerprint, expires_at)
       VALUES ($1, (SELECT core.consumer_id($2)), '${JOB_CLAIM}', 0, $3::uuid, now() + make_interval(secs => $4))
       ON CONFLICT (job_id, consumer_id, step) DO NOTHING
       RETURNING 1)
     SELECT c.claimed, found.*
       FROM (SELECT EXISTS (SELECT 1 FROM claim) AS claimed) AS c
       LEFT JOIN (${FIND}) AS found ON true`,
    [job.jobId, job.consumer, job.fingerprint.toString("hex"), job.ttlSeconds],
  );
  const found = foundOf(rows);
  if (rows[0]?.claimed === true) return { ...found, claimedBy: job.fingerprint };
  if (found.claimedBy !== undefined) return { ...found, claimedBy: found.claimedBy };
  // Another delivery's claim, committed after this statement's snapshot was taken.
  const again = foundOf((await db.query<Found>(FIND, [job.jobId, job.consumer])).rows);
  return { ...again, claimedBy: again.claimedBy ?? null };
}

/** A row of {@link FIND}: the fence, or a step row (all null: a LEFT JOIN that found nothing). */
type Found = { fence: boolean | null } & StepRow;

function foundOf(
  rows: readonly Found[],
): Omit<JobStepsFound, "claimedBy"> & { claimedBy: Buffer | null | undefined } {
  let fenced = false;
  let claimedBy: Buffer | null | undefined;
  const steps = new Map<string, StepCheckpoint>();
  for (const row of rows) {
    if (row.fence === true) fenced = true;
    else if (row.step === null) continue;
    else if (row.step === JOB_CLAIM) claimedBy = row.fingerprint;
    else steps.set(row.step, checkpointOf(row));
  }
  return { fenced, claimedBy, steps };
}

/** The job's fence (whether it exists) and its steps, read only (no claim). */
export async function readJobSteps(db: Queryable, consumer: string, jobId: string): Promise<JobStepsFound> {
  const { rows } = await db.query<Found>(FIND, [jobId, consumer]);
  const found = foundOf(rows);
  return { ...found, claimedBy: found.claimedBy ?? null };
}

/** Which step of which job. */
export interface StepOfJob {
  readonly consumer: string;
  readonly jobId: string;
  readonly step: string;
}

/** A step's claim, written just before its call. */
export interface StepClaim extends StepOfJob {
  readonly position: number;
  readonly fingerprint: Buffer;
  /** How long the row lives at least: the consumer's fence TTL. */
  readonly ttlSeconds: number;
}

/**
 * Claims the step for the job's body, unless it is claimed already: returns undefined when this
 * claim was written (the step is this delivery's to call), or the row that was there (another
 * body's, a recorded result, or an earlier claim of this body's whose answer was never recorded).
 */
export async function claimStep(db: Queryable, c: StepClaim): Promise<StepCheckpoint | undefined> {
  const claimed = await db.query(
    `INSERT INTO core.job_steps (job_id, consumer_id, step, position, fingerprint, expires_at)
     VALUES ($1, (SELECT core.consumer_id($2)), $3, $4, $5::uuid, now() + make_interval(secs => $6))
     ON CONFLICT (job_id, consumer_id, step) DO NOTHING
     RETURNING 1`,
    [c.jobId, c.consumer, c.step, c.position, c.fingerprint.toString("hex"), c.ttlSeconds],
  );
  if (claimed.rows.length > 0) return undefined;
  return readStep(db, c);
}

/**
 * Records the claimed step's result, unless one is recorded already (another delivery's, of the same
 * body, got there first); returns the one recorded, whichever wrote it.
 */
export async function recordStepResult(
  db: Queryable,
  s: StepOfJob,
  resultText: string,
): Promise<StepCheckpoint> {
  const { rows } = await db.query<StepRow>(
    `UPDATE core.job_steps AS s SET result = $4::json
      WHERE s.job_id = $1 AND s.consumer_id = (SELECT core.consumer_id($2)) AND s.step = $3 AND s.result IS NULL
      RETURNING ${STEP_COLUMNS}`,
    [s.jobId, s.consumer, s.step, resultText],
  );
  const row = rows[0] === undefined ? await readStep(db, s) : checkpointOf(rows[0]);
  if (row === undefined) {
    throw new Error(`step ${JSON.stringify(s.step)}: its claim was gone when its result was to be recorded`);
  }
  return row;
}

/** The step's row, in a statement (and so a snapshot) of its own. */
async function readStep(db: Queryable, s: StepOfJob): Promise<StepCheckpoint | undefined> {
  const { rows } = await db.query<StepRow>(
    `SELECT ${STEP_COLUMNS}
       FROM core.job_steps AS s
      WHERE s.job_id = $1 AND s.consumer_id = (SELECT core.consumer_id($2)) AND s.step = $3`,
    [s.jobId, s.consumer, s.step],
  );
  return rows[0] === undefined ? undefined : checkpointOf(rows[0]);
}
