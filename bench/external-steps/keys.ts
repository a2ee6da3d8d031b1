/**
 * The Idempotency-Keys the jobfence variant sends, mapped back to their jobs, so the provider's
 * replays (which make no effect) are counted as the calls of the job they were for.
 */
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { stepKey } from "../../shared/index.ts";
import { STEP_NAME } from "./systems.ts";

export function jobKeys(jobIds: readonly string[]): Map<string, string> {
  return new Map(jobIds.map((jobId) => [stepKey(awardPointsConsumer.name, jobId, STEP_NAME), jobId]));
}
