/**
 * `award-points`, the reference consumer: payload `{ user_id, points }`; effect: one ledger row
 * and the user's balance incremented, and a follow-up to `notify-user` telling the user, written to
 * the outbox in the same transaction (sent once the award commits, never when it rolls back).
 * Everything else (fence, retries, dead letters, alerts, metrics, the relay) is the harness's.
 */
import { z } from "zod";
import { type ConsumerDefinition, storableText } from "../../shared/index.ts";
import { notifyUserConsumer } from "../notify-user/consumer.ts";
import { awardPoints } from "./award.ts";

/** The payload an award-points message carries. */
export const awardPointsPayload = z.object({
  user_id: storableText.pipe(z.string().min(1).max(128)),
  /** A positive whole number of points that fits the ledger's integer column. */
  points: z.number().int().positive().max(2_147_483_647),
});

/** The consumers award-points sends follow-ups to. */
const sends = { "notify-user": notifyUserConsumer };

/** The consumer's definition; `handler.ts` turns it into the Lambda handler. */
export const awardPointsConsumer = {
  name: "award-points",
  payload: awardPointsPayload,
  sends,
  work: async (job, tx) => {
    await awardPoints(tx, {
      jobId: job.jobId,
      tenantId: job.tenantId,
      userId: job.payload.user_id,
      points: job.payload.points,
    });
    tx.send("notify-user", {
      payload: { user_id: job.payload.user_id, kind: "points-awarded", points: job.payload.points },
    });
  },
} satisfies ConsumerDefinition<typeof awardPointsPayload, typeof sends>;
