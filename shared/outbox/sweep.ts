/**
 * The scheduled relay: sends what the relay after COMMIT left in one consumer's outbox (a crash
 * between the COMMIT and the send, a send that failed, a DELETE that did not happen).
 *
 * Each round is one transaction: lock up to `batchSize` due rows, oldest due first, with
 * FOR UPDATE SKIP LOCKED (two relays never take the same row, nor wait for each other); send them;
 * delete what went, reschedule what may go later (the retry policy's backoff), and move into the
 * dead letters as `undelivered`, with an alert, what failed for a reason sending again cannot fix
 * or ran out of attempts; COMMIT. A crash after the send and before the COMMIT leaves the rows to
 * be sent again: the target's fence absorbs it (the follow-up's job id is the row's).
 *
 * A row is due 30 seconds after its transaction wrote it (the table's default), so the relay after
 * COMMIT, which needs milliseconds, normally takes it first.
 *
 * A row past its deadline (`send_by`, a day after it was written: OUTBOX_MAX_WAIT_SECONDS, which
 * every fence TTL is validated to cover) is never sent: it may have been sent already with its
 * DELETE lost, and the target's fence may since have been cleaned, so a send could apply the
 * follow-up twice. It is moved to the dead letters instead, where the database records it
 * `undelivered` when the target's fence still exists or the row is young enough that it would, and
 * `outlived` otherwise (migration 0021; docs/design.md §7.2).
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import type { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import type { SQSClient } from "@aws-sdk/client-sqs";
import type pg from "pg";
import { deadLetterRecordedDetail, publishDeadLetterRecorded } from "../alerts/ops-bus.ts";
import {
  claimDueFollowUps,
  deleteSentFollowUps,
  moveToUndelivered,
  type OutboxKey,
  type OutboxRow,
  outboxGauge,
  rescheduleFollowUp,
} from "../db/queries/outbox-rows.ts";
import { fingerprintHex } from "../envelope/fingerprint.ts";
import { ERROR_KIND } from "../errors/error-kind.ts";
import { describeError, type LastError } from "../errors/last-error.ts";
import { faultHook } from "../fault-points.ts";
import { OUTBOX_MAX_WAIT_SECONDS } from "../fence/ttl.ts";
import { METRIC } from "../metrics/names.ts";
import { messageGroupId } from "../producer/fifo-ids.ts";
import type { FailedJob } from "../producer/send-jobs.ts";
import { type RetryPolicy, retryDelaySeconds } from "../retry/policy.ts";
import { isFifoQueue } from "../sqs/queue-url.ts";
import { checkRows, sendFollowUps, type TargetQueues } from "./relay.ts";

/** The scheduled relay's retry policy: about 45 minutes of tries before a row is undelivered. */
export const OUTBOX_RETRY_POLICY: RetryPolicy = Object.freeze({
  maxAttempts: 8,
  baseSeconds: 30,
  capSeconds: 900,
});

/** Rows per round, and rounds per run. */
export const SWEEP_DEFAULTS = Object.freeze({ batchSize: 100, maxRounds: 20 });

export interface SweepOptions {
  readonly pool: pg.Pool;
  readonly sqs: SQSClient;
  readonly eventBridge: EventBridgeClient;
  readonly opsBusName: string;
  /** The sending consumer whose outbox this relay drains. */
  readonly consumer: string;
  readonly queues: TargetQueues;
  readonly metrics: Metrics;
  readonly logger: Logger;
  /** @default OUTBOX_RETRY_POLICY */
  readonly retryPolicy?: RetryPolicy;
  /** @default SWEEP_DEFAULTS.batchSize */
  readonly batchSize?: number;
  /** @default SWEEP_DEFAULTS.maxRounds */
  readonly maxRounds?: number;
  /** Uniform [0, 1) source for the backoff jitter. @default Math.random */
  readonly random?: () => number;
}

/** What one run did. */
export interface SweepReport {
  readonly sent: number;
  readonly retried: number;
  readonly undelivered: {
    readonly key: OutboxKey;
    readonly deadLetterId: string;
    readonly created: boolean;
  }[];
  /** Rows waiting after the run, and the oldest one's age. */
  readonly rows: number;
  readonly oldestAgeSeconds: number;
}

/** Drains the consumer's due outbox rows; throws only when the database cannot be reached at all. */
export async function sweepOutbox(options: SweepOptions): Promise<SweepReport> {
  const policy = options.retryPolicy ?? OUTBOX_RETRY_POLICY;
  const batchSize = options.batchSize ?? SWEEP_DEFAULTS.batchSize;
  const maxRounds = options.maxRounds ?? SWEEP_DEFAULTS.maxRounds;
  const random = options.random ?? Math.random;
  let sent = 0;
  let retried = 0;
  const undelivered: SweepReport["undelivered"] = [];
  const alerts: { row: OutboxRow; deadLetterId: string; lastError: LastError; queue: string }[] = [];

  for (let round = 0; round < maxRounds; round++) {
    const client = await options.pool.connect();
    let claimed: OutboxRow[];
    try {
      await client.query("BEGIN");
      claimed = await claimDueFollowUps(client, options.consumer, batchSize);
      if (claimed.length > 0) {
        const due = claimed.filter((row) => !row.expired);
        const { sendable, refused } = checkRows(
          due.map((row) => ({
            target: row.target,
            jobId: row.job_id,
            body: row.body,
            tenantId: row.tenant_id,
            groupId: row.group_id,
            traceparent: row.traceparent,
          })),
        );
        const sentNow = await sendFollowUps(options.sqs, options.queues, sendable);
        const report = {
          sent: sentNow.sent,
          failed: [...claimed.filter((row) => row.expired).map(pastDeadline), ...refused, ...sentNow.failed],
        };
        if (faultHook) await faultHook("outbox:sweep-after-send", { jobIds: jobIdsOf(report.sent) });
        await deleteSentFollowUps(client, options.consumer, report.sent);
        sent += report.sent.length;
        const rowOf = new Map(claimed.map((row) => [`${row.target}\u0000${row.job_id}`, row]));
        for (const { key, failure } of report.failed) {
          const row = rowOf.get(`${key.target}\u0000${key.jobId}`) as OutboxRow;
          const attempts = row.attempts + 1;
          const lastError = failureError(failure, attempts);
          const queue = Object.hasOwn(options.queues, key.target) ? options.queues[key.target] : undefined;
          const delay = retryDelaySeconds(Math.min(attempts, policy.maxAttempts), policy, random);
          // Each row in a savepoint of its own: one the database refuses to move (its queue no
          // longer registered for the target, say) is rescheduled, and never takes its round down.
          await client.query("SAVEPOINT outbox_row");
          try {
            if (queue !== undefined && (failure.senderFault || attempts >= policy.maxAttempts)) {
              // The group SQS would have taken it in (a replay sends it with that one).
              const group = isFifoQueue(queue)
                ? messageGroupId(row.tenant_id, row.group_id ?? undefined)
                : null;
              const moved = await moveToUndelivered(client, options.consumer, key, queue, group, lastError);
              if (moved) {
                undelivered.push({ key, deadLetterId: moved.id, created: moved.created });
                if (moved.created)
                  alerts.push({ row: { ...row, attempts }, deadLetterId: moved.id, lastError, queue });
              }
            } else {
              // A target without a queue in this deployment cannot be dead-lettered for replay either:
              // the row waits (and the outbox's age alarm says so) until the deployment names it.
              await rescheduleFollowUp(client, options.consumer, key, delay, lastError);
              retried += 1;
            }
            await client.query("RELEASE SAVEPOINT outbox_row");
          } catch (error) {
            await client.query("ROLLBACK TO SAVEPOINT outbox_row");
            const why = describeError(error);
            await rescheduleFollowUp(client, options.consumer, key, delay, {
              class: why.class,
              message: `${lastError.message}; not moved to the dead letters: ${why.message}`.slice(0, 1000),
            });
            retried += 1;
            options.logger.error("an outbox row could not be moved to the dead letters; rescheduled", {
              target: key.target,
              job_id: key.jobId,
              error: why,
            });
          }
        }
      }
      await client.query("COMMIT");
      client.release();
    } catch (error) {
      client.release(error instanceof Error ? error : new Error(String(error)));
      throw error;
    }
    if (claimed.length < batchSize) break;
  }

  for (const alert of alerts) await publishUndelivered(options, alert);
  const gauge = await outboxGauge(options.pool, options.consumer);
  const { metrics } = options;
  metrics.addMetric(METRIC.outboxSent, MetricUnit.Count, sent);
  metrics.addMetric(METRIC.outboxRetried, MetricUnit.Count, retried);
  metrics.addMetric(METRIC.outboxUndelivered, MetricUnit.Count, undelivered.length);
  metrics.addMetric(METRIC.outboxRows, MetricUnit.Count, gauge.rows);
  metrics.addMetric(METRIC.outboxOldestAge, MetricUnit.Seconds, gauge.oldestAgeSeconds);
  if (undelivered.length > 0) {
    options.logger.error("follow-ups could not be sent and were dead-lettered as undelivered", {
      undelivered: undelivered.map((u) => ({
        target: u.key.target,
        job_id: u.key.jobId,
        dead_letter_id: u.deadLetterId,
      })),
    });
  }
  return { sent, retried, undelivered, rows: gauge.rows, oldestAgeSeconds: gauge.oldestAgeSeconds };
}

/** A row past its deadline, as a failure the sender cannot fix by sending again: it goes to the dead letters. */
function pastDeadline(row: OutboxRow): { key: OutboxKey; failure: FailedJob } {
  return {
    key: { target: row.target, jobId: row.job_id },
    failure: {
      jobId: row.job_id,
      code: "OutboxDeadlinePassed",
      message:
        `not sent: the follow-up waited in the outbox past its deadline (written ${row.created_at.toISOString()}, ` +
        `${OUTBOX_MAX_WAIT_SECONDS} s to be sent); it may have been sent already and its target's fence cleaned since`,
      senderFault: true,
    },
  };
}

function jobIdsOf(keys: readonly OutboxKey[]): string[] {
  return keys.map((k) => k.jobId);
}

/** The dead letter's `last_error` for a send that failed, bounded as every `last_error` is. */
function failureError(failure: FailedJob, attempts: number): LastError {
  const suffix = ` (send ${attempts}${failure.senderFault ? ", refused as the sender's fault" : ""})`;
  return {
    class: String(failure.code).slice(0, 200),
    message: `${String(failure.message).slice(0, 1000)}${suffix}`,
  };
}

/** The alert for an undelivered follow-up; a failure is counted and logged, the row exists. */
async function publishUndelivered(
  options: SweepOptions,
  alert: { row: OutboxRow; deadLetterId: string; lastError: LastError; queue: string },
): Promise<void> {
  const { row } = alert;
  try {
    await publishDeadLetterRecorded(
      options.eventBridge,
      options.opsBusName,
      deadLetterRecordedDetail({
        id: alert.deadLetterId,
        consumer: row.target,
        queue: alert.queue,
        job_id: row.job_id,
        error_kind: ERROR_KIND.undelivered,
        attempts: row.attempts,
        correlation_id: row.correlation_id,
        lastError: alert.lastError,
        first_recorded: true,
        job_fingerprint: fingerprintHex(row.job_fingerprint),
        fence_fingerprint: null,
      }),
    );
  } catch (error) {
    options.metrics.addMetric(METRIC.alertFailed, MetricUnit.Count, 1);
    options.logger.error("DeadLetterRecorded alert failed; the dead letter is recorded", {
      dead_letter_id: alert.deadLetterId,
      error: describeError(error),
    });
  }
}
