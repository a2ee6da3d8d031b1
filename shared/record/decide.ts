/**
 * The decision: what a failed record becomes (docs/design.md §4). Never throws.
 *
 *   held (another delivery holds the job's fence)  → back to the queue after a backoff, no attempt spent
 *   the ledger could not be claimed                 → back on the queue's own visibility timeout
 *   poison | hard | conflict | interrupted | spent  → dead letter (own transaction), alert, ack
 *   transient                                        → recorded in the ledger; then
 *       the last attempt, the receive limit, or a retry the queue cannot keep → dead letter (exhausted)
 *       otherwise → hidden for the backoff (SQS visibility) and retried
 *
 * A dead letter that cannot be written leaves the message in the queue, so nothing is lost.
 */
import { ChangeMessageVisibilityCommand, type SQSClient } from "@aws-sdk/client-sqs";
import { HISTORY_LIMIT } from "../db/queries/message-attempts.ts";
import { errorKindOf, isFenceHeld, isLedgerUnavailable, isTransient } from "../dead-letters/classify.ts";
import { type DeadLetterSink, writeDeadLetter } from "../dead-letters/write-dead-letter.ts";
import { ERROR_KIND } from "../errors/error-kind.ts";
import { EXHAUSTED_REASON, JobConflictError, RetriesExhaustedError } from "../errors/job.ts";
import { ForeignTransactionError } from "../errors/transaction.ts";
import { isLastAttempt, type RetryPolicy, retryDelaySeconds } from "../retry/policy.ts";
import { traceparentOf } from "../tracing/spans.ts";
import { attemptEntry, type LedgerAccess, recordFailure, releaseClaim } from "./attempts.ts";
import type { RecordOutcome } from "./outcome.ts";
import { currentAttempt, type RecordContext, whoFailed } from "./record-context.ts";

/** What the decision needs: the policy, the queue's limits and the places it writes to. */
export interface DecisionOptions extends LedgerAccess {
  readonly sqs: SQSClient;
  readonly retryPolicy: RetryPolicy;
  /** The source queue's retention: a retry that would outlive it is dead-lettered now. */
  readonly queueRetentionSeconds: number;
  /** The function timeout: the time the delivery after a retry needs to run and record its end. */
  readonly functionTimeoutSeconds: number;
  /** The source queue's redrive count, when known: the receive after it goes to the backstop. */
  readonly maxReceiveCount?: number;
  /** Uniform [0, 1) source for the backoff jitter. */
  readonly random: () => number;
  /** Wall clock in ms, for retention. @default Date.now */
  readonly now?: () => number;
  readonly deadLetters: DeadLetterSink;
}

/** What a failure of the record becomes. Never throws. */
export async function decideFailure(
  o: DecisionOptions,
  rc: RecordContext,
  error: unknown,
): Promise<RecordOutcome> {
  // The invocation has returned (or is about to): the record is back in the queue already.
  if (rc.signal?.aborted) return { status: "interrupted", wasRunning: true };
  if (isFenceHeld(error)) return held(o, rc);
  const attempt = currentAttempt(rc);
  // The claim failed before anything ran: no run to count, and the ledger cannot count it anyway.
  if (isLedgerUnavailable(error)) return unrecordedRetry(attempt, error);
  if (!isTransient(error)) return deadLetter(o, rc, error);
  try {
    rc.ledger = await recordFailure(o, rc, error);
  } catch {
    // The failure cannot be counted (the database is unreachable): the queue's own visibility
    // timeout paces the redeliveries, and its redrive takes the message to the backstop if this
    // goes on (the timings are validated for it: delivery-timings.ts).
    return unrecordedRetry(attempt, error);
  }
  const failures = rc.ledger.failures;
  if (isLastAttempt(failures, o.retryPolicy))
    return deadLetter(o, rc, new RetriesExhaustedError(failures, error));
  if (o.maxReceiveCount !== undefined && rc.receiveCount >= o.maxReceiveCount) {
    const why = ` (receive ${rc.receiveCount} of ${o.maxReceiveCount}; the next goes to the backstop)`;
    return deadLetter(o, rc, new RetriesExhaustedError(failures, error, EXHAUSTED_REASON.receiveLimit, why));
  }
  const delaySeconds = retryDelaySeconds(failures, o.retryPolicy, o.random);
  const late = outlivesRetention(o, rc, delaySeconds);
  if (late)
    return deadLetter(o, rc, new RetriesExhaustedError(failures, error, EXHAUSTED_REASON.retention, late));
  const visibilityChanged = await hide(o, rc, delaySeconds);
  return { status: "retry", attempt: failures, recorded: true, delaySeconds, visibilityChanged, error };
}

/**
 * Why a retry after `delaySeconds` would come too late, or undefined: the message must still be
 * in its queue when it comes back, with a function timeout left to run and record its outcome.
 */
function outlivesRetention(o: DecisionOptions, rc: RecordContext, delaySeconds: number): string | undefined {
  const sentAt = Number(rc.record.attributes.SentTimestamp);
  if (!Number.isFinite(sentAt) || sentAt <= 0) return undefined;
  const deletedAt = sentAt + o.queueRetentionSeconds * 1000;
  const now = (o.now ?? Date.now)();
  if (now + (delaySeconds + o.functionTimeoutSeconds) * 1000 < deletedAt) return undefined;
  return (
    ` (sent ${new Date(sentAt).toISOString()}, retention ${o.queueRetentionSeconds} s: SQS deletes it at ` +
    `${new Date(deletedAt).toISOString()}, before a retry in ${delaySeconds} s could run)`
  );
}

/** Another delivery of the job holds its fence: back to the queue, nothing counted. */
async function held(o: DecisionOptions, rc: RecordContext): Promise<RecordOutcome> {
  if (rc.claimed) await releaseClaim(o, rc);
  const delaySeconds = retryDelaySeconds(1, o.retryPolicy, o.random);
  return { status: "held", delaySeconds, visibilityChanged: await hide(o, rc, delaySeconds) };
}

/** A failure not counted: back to the queue on its own visibility timeout. */
function unrecordedRetry(attempt: number, error: unknown): RecordOutcome {
  return { status: "retry", attempt, recorded: false, delaySeconds: null, visibilityChanged: false, error };
}

/** Hides the message for `delaySeconds`; false when SQS could not be told (the record is reported anyway). */
async function hide(o: DecisionOptions, rc: RecordContext, delaySeconds: number): Promise<boolean> {
  try {
    await o.sqs.send(
      new ChangeMessageVisibilityCommand({
        QueueUrl: rc.queueUrl,
        ReceiptHandle: rc.record.receiptHandle,
        VisibilityTimeout: delaySeconds,
      }),
      rc.signal ? { abortSignal: rc.signal } : {},
    );
    return true;
  } catch {
    return false;
  }
}

async function deadLetter(o: DecisionOptions, rc: RecordContext, error: unknown): Promise<RecordOutcome> {
  const kind = errorKindOf(error) ?? ERROR_KIND.hard;
  const { identity, fingerprint } = whoFailed(rc);
  // A transient failure is in the ledger already; a hard one is this run's, counted here.
  const ranAndFailed = kind === ERROR_KIND.hard;
  const history = ranAndFailed ? [...rc.ledger.history, attemptEntry(rc, error)] : rc.ledger.history;
  const written = await writeDeadLetter(o.deadLetters, {
    ...(rc.signal ? { signal: rc.signal } : {}),
    record: rc.record,
    queueUrl: rc.queueUrl,
    attempts: Math.max(1, rc.ledger.failures + (ranAndFailed ? 1 : 0)),
    attemptHistory: history.slice(-HISTORY_LIMIT),
    kind,
    error,
    identity,
    jobFingerprint: fingerprint,
    fenceFingerprint: error instanceof JobConflictError ? error.fenceFingerprint : null,
    traceparent: traceparentOf(rc.span),
    // The job's fence speaks for a job that failed; not for poison (its id may not be a job's),
    // a conflict (the fence is the other job's) or work that ended the fence's transaction itself.
    checkFence:
      fingerprint !== null &&
      kind !== ERROR_KIND.poison &&
      kind !== ERROR_KIND.conflict &&
      !(error instanceof ForeignTransactionError),
  });
  switch (written.status) {
    case "applied":
      // An earlier attempt committed and only its answer was lost: a duplicate, not a failure.
      return { status: "duplicate" };
    case "dead-letter-failed":
      return { status: "dead-letter-failed", kind, error, writeError: written.writeError };
    case "dead-lettered":
      return {
        status: "dead-lettered",
        kind: written.kind,
        attempts: written.attempts,
        deadLetterId: written.deadLetterId,
        created: written.created,
        error,
        ...(written.alertError === undefined ? {} : { alertError: written.alertError }),
      };
  }
}
