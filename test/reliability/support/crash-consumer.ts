/**
 * What the crash-matrix child and the parent that restarts after it share: the consumer (the
 * reference award-points, plus a business rule that refuses some users so the dead-letter points
 * can be reached), the child's configuration, and the line the child prints before it dies.
 */
import { awardPointsConsumer } from "../../../functions/award-points/consumer.ts";
import type { CommitMode, ConsumerDefinition } from "../../../shared/consumer.ts";
import { PermanentJobError } from "../../../shared/errors/job.ts";
import type { FaultPoint } from "../../../shared/fault-points.ts";
import type { RetryPolicy } from "../../../shared/retry/policy.ts";

/** Awards to users with this prefix fail with PermanentJobError: a hard dead letter, never applied. */
export const REFUSED_USER_PREFIX = "refused-";

/** Awards to users with this prefix kill their process in the work: a container dying mid-batch. */
export const KILLER_USER_PREFIX = "killer-";
/** Awards to users with this prefix outlast their invocation: the work sleeps in the database. */
export const STALL_USER_PREFIX = "stall-";

/** award-points, with the refusal, killer and stall rules in front of the real work. */
export const crashConsumer = {
  ...awardPointsConsumer,
  work: async (job, tx) => {
    if (job.payload.user_id.startsWith(REFUSED_USER_PREFIX)) {
      throw new PermanentJobError(`user ${job.payload.user_id} is closed`);
    }
    if (job.payload.user_id.startsWith(KILLER_USER_PREFIX)) process.kill(process.pid, "SIGKILL");
    if (job.payload.user_id.startsWith(STALL_USER_PREFIX)) await tx.query("SELECT pg_sleep(30)");
    await awardPointsConsumer.work(job, tx);
  },
} satisfies ConsumerDefinition<typeof awardPointsConsumer.payload, typeof awardPointsConsumer.sends>;

/**
 * Retries in seconds rather than minutes: a transient failure during the restart (a lock the dead
 * child's session still held) must come back within the drain's deadline.
 */
export const CRASH_RETRY_POLICY: RetryPolicy = Object.freeze({
  maxAttempts: 5,
  baseSeconds: 1,
  capSeconds: 2,
});

/** What the child does before it is killed. */
export type CrashRole =
  /** Polls the queue with the consumer until the fault point. */
  | {
      readonly kind: "consume";
      readonly commitMode: CommitMode;
      readonly queueUrl: string;
      readonly queueArn: string;
      /** Where the consumer's follow-ups to notify-user go (its outboxQueues). */
      readonly followUpQueueUrl: string;
      /** The function timeout each invocation gets. @default 30 s */
      readonly timeoutSeconds?: number;
    }
  /** Replays one dead letter by id. */
  | { readonly kind: "replay-single"; readonly deadLetterId: string }
  /** Runs the bulk-operations worker (the test has started a bulk replay). */
  | { readonly kind: "replay-bulk" }
  /** Runs the TTL cleanup in batches of `batchSize`. */
  | { readonly kind: "cleanup"; readonly batchSize: number }
  /** Runs award-points' scheduled outbox relay in rounds of `batchSize`, sending to `followUpQueueUrl`. */
  | { readonly kind: "sweep"; readonly batchSize: number; readonly followUpQueueUrl: string }
  /**
   * Polls the queue with notify-user, whose email is a step through the fake provider at
   * EMAIL_PROVIDER_URL (the parent's, which outlives the child), until the fault point.
   */
  | { readonly kind: "notify"; readonly queueUrl: string; readonly queueArn: string };

/** The child's configuration, passed as JSON in {@link CRASH_CHILD_ENV}. */
export interface CrashChildConfig {
  readonly role: CrashRole;
  readonly point: FaultPoint;
  /** Die the nth time the point is reached (1-based). */
  readonly nth: number;
  /** For points where a statement is in flight: how long to let it run before dying. */
  readonly inFlightMs: number;
  readonly databaseUrl: string;
  readonly sqsEndpoint: string;
  readonly eventBridgeEndpoint: string;
  /** application_name of the child's sessions, so the parent can find what they left behind. */
  readonly applicationName: string;
}

export const CRASH_CHILD_ENV = "JOBFENCE_CRASH_CHILD";

/** The line the child prints (and flushes) right before it kills itself. */
export const CRASH_MARK = "crash-matrix: killing at";

/** What the mark line carries. */
export interface CrashReport {
  readonly point: FaultPoint;
  readonly hit: number;
  readonly jobIds: readonly string[];
}

/** Points whose hook runs while a statement is in flight: the child waits before dying there. */
export const IN_FLIGHT_POINTS: ReadonlySet<FaultPoint> = new Set([
  "dead-letter:in-flight",
  "cleanup:in-flight",
]);
