/**
 * What the provider did for each job of a trial, read from its ledger and its request log: a
 * ledger entry is an effect, for the job its request names; a request is a call, for the job of the
 * effect it made or, when it made none (a replay, a refusal), of its Idempotency-Key. A request
 * with neither (a keyless call refused or failed) cannot be told apart: it is counted as
 * unattributed. Pure.
 */
import { jobIdOfRequest } from "./charge.ts";
import type { LedgerEntry, RequestEntry } from "./provider.ts";

/** A job's effects (ledger entries) and calls (requests seen). */
export interface JobTally {
  effects: number;
  calls: number;
}

export interface Tally {
  /** Every job of the trial, with zeros for one the provider never saw. */
  readonly byJob: ReadonlyMap<string, JobTally>;
  /** Requests for none of the trial's jobs, or for a job that cannot be told. */
  readonly unattributed: number;
}

/**
 * Tallies `ledger` and `requests` over `jobIds`; `jobOfKey` names the job an Idempotency-Key was
 * made for (jobfence's stepKey is derived from the job id), undefined when it cannot.
 */
export function tallyByJob(
  jobIds: readonly string[],
  ledger: readonly LedgerEntry[],
  requests: readonly RequestEntry[],
  jobOfKey: (key: string) => string | undefined,
): Tally {
  const byJob = new Map<string, JobTally>(jobIds.map((jobId) => [jobId, { effects: 0, calls: 0 }]));
  const jobOfEffect = new Map<string, string | undefined>();
  for (const entry of ledger) {
    const jobId = jobIdOfRequest(entry.request);
    jobOfEffect.set(entry.id, jobId);
    const tally = jobId === undefined ? undefined : byJob.get(jobId);
    if (tally) tally.effects += 1;
  }
  let unattributed = 0;
  for (const request of requests) {
    const jobId =
      request.effect !== null
        ? jobOfEffect.get(request.effect)
        : request.key !== null
          ? jobOfKey(request.key)
          : undefined;
    const tally = jobId === undefined ? undefined : byJob.get(jobId);
    if (tally) tally.calls += 1;
    else unattributed += 1;
  }
  return { byJob, unattributed };
}

/** Job id → its effects, as bench/lib/crash-trials.ts classifies them. */
export function effectsOf(tally: Tally): Map<string, number> {
  return new Map([...tally.byJob].map(([jobId, t]) => [jobId, t.effects]));
}
