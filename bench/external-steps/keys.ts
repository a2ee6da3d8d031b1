/**
 * The Idempotency-Keys the jobfence variant sends, mapped back to their jobs, so the provider's
 * replays (which make no effect) are counted as the calls of the job they were for. TEMPORARY:
 * empty until jobfence's stepKey reaches this branch.
 */
export function jobKeys(_jobIds: readonly string[]): Map<string, string> {
  return new Map();
}
