/**
 * `notify-user`, the reference deployment's second consumer, fed by award-points through its
 * outbox: payload `{ user_id, kind, points }`; effect: an email to the user, sent through the email
 * provider (EMAIL_PROVIDER_URL) in a step, and one row in notify_user.notifications, the user's
 * inbox, on the fence's transaction, with the provider's message id. A follow-up award-points sent
 * twice (a relay that crashed between its send and its delete) has one job id, so the fence applies
 * it once; the step's key, the same for every delivery of the job, makes the provider send it once.
 */
import { z } from "zod";
import { type ConsumerDefinition, storableText } from "../../shared/index.ts";
import { EmailSent, emailProviderUrl, isPermanentEmailFailure, sendEmail, userAddress } from "./email.ts";

/** The payload a notify-user message carries. */
export const notifyUserPayload = z.object({
  user_id: storableText.pipe(z.string().min(1).max(128)),
  /** What happened: the notification's template. */
  kind: z.enum(["points-awarded"]),
  /** The points the notification tells of. */
  points: z.number().int().positive().max(2_147_483_647),
});

/** What the steps give the work: the email as the provider sent it. */
export interface NotifyUserSteps {
  readonly email: z.output<typeof EmailSent>;
}

// One statement, one round trip; the consumer's role may only insert into its table.
const NOTIFY = `
  INSERT INTO notify_user.notifications
    (job_id, tenant_id, user_id, kind, points, correlation_id, provider_message_id)
  VALUES ($1, $2, $3, $4, $5, $6, $7)`;

/** The consumer's definition; the generated `handler.ts` turns it into the Lambda handler. */
export const notifyUserConsumer = {
  name: "notify-user",
  payload: notifyUserPayload,
  // The email, before the fence transaction. The provider is read when a job needs it (this module
  // is also imported where no email is sent: the registry, the drains, the synth); a provider that
  // refuses the email itself (a 4xx but 409 and 429) dead-letters the job at once.
  steps: async (job) => {
    const { user_id, points } = job.payload;
    const url = emailProviderUrl();
    const message = {
      to: userAddress(user_id),
      subject: `You earned ${points} points`,
      text: `Hello ${user_id}, you have just been awarded ${points} points.`,
    };
    return {
      email: await job.step("email", EmailSent, (key, { signal }) => sendEmail(url, message, key, signal), {
        permanent: isPermanentEmailFailure,
      }),
    };
  },
  work: async (job, tx) => {
    const { user_id, kind, points } = job.payload;
    await tx.query(NOTIFY, [
      job.jobId,
      job.tenantId,
      user_id,
      kind,
      points,
      job.correlationId,
      job.steps.email.id,
    ]);
  },
} satisfies ConsumerDefinition<typeof notifyUserPayload, Record<never, never>, NotifyUserSteps>;
