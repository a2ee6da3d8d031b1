/**
 * `notify-user`, the reference deployment's second consumer, fed by award-points through its
 * outbox: payload `{ user_id, kind, points }`; effect: one row in notify_user.notifications, the
 * user's inbox, on the fence's transaction. A follow-up award-points sent twice (a relay that
 * crashed between its send and its delete) has one job id, so the fence applies it once.
 */
import { z } from "zod";
import { type ConsumerDefinition, storableText } from "../../shared/index.ts";

/** The payload a notify-user message carries. */
export const notifyUserPayload = z.object({
  user_id: storableText.pipe(z.string().min(1).max(128)),
  /** What happened: the notification's template. */
  kind: z.enum(["points-awarded"]),
  /** The points the notification tells of. */
  points: z.number().int().positive().max(2_147_483_647),
});

// One statement, one round trip; the consumer's role may only insert into its table.
const NOTIFY = `
  INSERT INTO notify_user.notifications (job_id, tenant_id, user_id, kind, points, correlation_id)
  VALUES ($1, $2, $3, $4, $5, $6)`;

/** The consumer's definition; the generated `handler.ts` turns it into the Lambda handler. */
export const notifyUserConsumer = {
  name: "notify-user",
  payload: notifyUserPayload,
  work: async (job, tx) => {
    const { user_id, kind, points } = job.payload;
    await tx.query(NOTIFY, [job.jobId, job.tenantId, user_id, kind, points, job.correlationId]);
  },
} satisfies ConsumerDefinition<typeof notifyUserPayload>;
