/**
 * Failures a test makes the work throw, for one job: how a consumer author tests what the harness
 * does with an error (a PermanentJobError dead-letters at once, anything else is retried) without
 * changing the consumer. The failure is thrown on the fence's transaction before the consumer's own
 * work runs, so the harness sees it exactly as if the work had thrown it.
 */
import type { z } from "zod";
import type { ConsumerDefinition } from "../shared/consumer.ts";
import type { FollowUpSchemas } from "../shared/outbox/follow-up.ts";

interface Planned {
  readonly error: unknown;
  remaining: number;
}

/** The failures planned for a consumer's jobs, by job id. */
export class WorkFaults {
  readonly #planned = new Map<string, Planned>();

  /**
   * Makes the work of job `jobId` throw `error` on its next `times` runs (every run by default).
   * A run counts whether or not its transaction commits: in batch-commit mode a run the batch
   * rolled back and redid is one too.
   */
  plan(jobId: string, error: unknown, times = Number.POSITIVE_INFINITY): void {
    this.#planned.set(jobId, { error, remaining: times });
  }

  /** `definition` with its work preceded by the planned failures; everything else is unchanged. */
  wrap<S extends z.ZodType, F extends FollowUpSchemas, R = undefined>(
    definition: ConsumerDefinition<S, F, R>,
  ): ConsumerDefinition<S, F, R> {
    return {
      ...definition,
      work: async (job, tx) => {
        const planned = this.#planned.get(job.jobId);
        if (planned && planned.remaining > 0) {
          planned.remaining--;
          throw planned.error;
        }
        await definition.work(job, tx);
      },
    };
  }
}
