/**
 * The work the database-fault scenarios run: award-points (the reference consumer's real effect)
 * with knobs that make the fault land where it hurts. Plain data, so a consumer process can be
 * told which variant to run through its environment, and the parent can predict the outcome.
 */
import { createHash } from "node:crypto";
import { awardPoints } from "../../../functions/award-points/award.ts";
import { awardPointsConsumer, type awardPointsPayload } from "../../../functions/award-points/consumer.ts";
import type { ConsumerDefinition } from "../../../shared/consumer.ts";

/** How the work misbehaves. */
export interface FaultWorkOptions {
  /** Held inside the fence transaction before the effect (pg_sleep), so a fault finds it open. */
  readonly holdMs?: number;
  /**
   * Statements that outlast the statement timeout: attempts picked by {@link stalls} sleep
   * `seconds` on the database before the effect, and are cancelled by the server.
   */
  readonly stall?: {
    readonly seconds: number;
    /** Share of (job, attempt) pairs that stall, in percent, decided by a hash: reproducible. */
    readonly percent: number;
    /** Jobs whose every attempt stalls. */
    readonly always: readonly string[];
  };
}

/** Whether attempt `attempt` of `jobId` stalls past the statement timeout. */
export function stalls(options: FaultWorkOptions, jobId: string, attempt: number): boolean {
  const stall = options.stall;
  if (!stall) return false;
  if (stall.always.includes(jobId)) return true;
  const digest = createHash("sha256").update(`${jobId}\u0000${attempt}`).digest();
  return digest.readUInt32BE(0) % 100 < stall.percent;
}

/**
 * The first attempt on which `jobId` does not stall, within `maxAttempts`; undefined when every
 * attempt stalls (the job must end as an exhausted dead letter).
 */
export function firstCleanAttempt(
  options: FaultWorkOptions,
  jobId: string,
  maxAttempts: number,
): number | undefined {
  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
    if (!stalls(options, jobId, attempt)) return attempt;
  }
  return undefined;
}

/**
 * award-points' effect with the given misbehaviour. Its follow-up is left out: these scenarios
 * count effects under database and process faults, and the outbox's own faults are the crash
 * matrix's and test/integration/outbox.test.ts's.
 */
export function faultyAwardPoints(options: FaultWorkOptions): ConsumerDefinition<typeof awardPointsPayload> {
  return {
    name: awardPointsConsumer.name,
    payload: awardPointsConsumer.payload,
    work: async (job, tx) => {
      if (stalls(options, job.jobId, job.attempt)) {
        await tx.query("SELECT pg_sleep($1)", [options.stall?.seconds ?? 1]);
      }
      if (options.holdMs) await tx.query("SELECT pg_sleep($1)", [options.holdMs / 1000]);
      const { jobId, tenantId, payload } = job;
      await awardPoints(tx, { jobId, tenantId, userId: payload.user_id, points: payload.points });
    },
  };
}
