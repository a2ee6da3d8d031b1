/**
 * Award-points jobs in bulk and waiting for a run to settle (sending and counting them: the
 * shared ../../support/sqs.ts).
 */

/** One award-points job of a run. */
export interface LoadJob {
  readonly jobId: string;
  readonly tenantId: string;
  readonly userId: string;
  readonly points: number;
}

/** `count` jobs `<prefix>-<i>` of tenant `t-<prefix>`, spread over seven users. */
export function loadJobs(prefix: string, count: number): LoadJob[] {
  return Array.from({ length: count }, (_, i) => ({
    jobId: `${prefix}-${i}`,
    tenantId: `t-${prefix}`,
    userId: `u-${i % 7}`,
    points: (i % 9) + 1,
  }));
}

/** The envelope of a job. */
export function envelopeOf(job: LoadJob): string {
  return JSON.stringify({
    job_id: job.jobId,
    tenant_id: job.tenantId,
    correlation_id: `corr-${job.jobId}`,
    payload: { user_id: job.userId, points: job.points },
  });
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Polls `probe` until `done` accepts its value; a probe that throws (the database is down) counts
 * as not done. Throws with the last value after `timeoutMs`.
 */
export async function waitUntil<T>(
  what: string,
  probe: () => Promise<T>,
  done: (value: T) => boolean,
  timeoutMs: number,
  intervalMs = 250,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      last = value;
      if (done(value)) return value;
    } catch (error) {
      last = error instanceof Error ? error.message : error;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(last)}`);
    await sleep(intervalMs);
  }
}
