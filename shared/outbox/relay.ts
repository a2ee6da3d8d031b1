/**
 * Sending outbox rows: the relay right after a COMMIT, and the one step both relays share (send a
 * set of rows, each to its target's queue, and report which went). The scheduled relay is
 * sweep.ts.
 *
 * The relay after COMMIT sends what the transaction wrote, from memory (no read), then deletes the
 * rows it sent in one statement. It never fails the job: the effect has committed, and whatever it
 * could not send or delete stays in the outbox for the scheduled relay, which may then send it a
 * second time; the follow-up's deterministic job id makes the target's fence absorb that.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import type { SQSClient } from "@aws-sdk/client-sqs";
import type pg from "pg";
import { deleteSentFollowUps, type OutboxKey } from "../db/queries/outbox-rows.ts";
import { parseJson } from "../envelope/parse-json.ts";
import { describeError } from "../errors/last-error.ts";
import { SendRefusedError } from "../errors/sending.ts";
import { faultHook } from "../fault-points.ts";
import { METRIC } from "../metrics/names.ts";
import type { JobEnvelope } from "../producer/job-envelope.ts";
import { jobMessages } from "../producer/job-message.ts";
import { type FailedJob, type JobToSend, type SendJobsOptions, sendJobs } from "../producer/send-jobs.ts";
import { traceAttributes } from "./follow-up.ts";

function jobIdsOf(keys: readonly OutboxKey[]): string[] {
  return keys.map((k) => k.jobId);
}

/** What a relay sends of a row. */
export interface RelayedFollowUp {
  readonly target: string;
  readonly jobId: string;
  readonly body: string;
  readonly tenantId: string;
  readonly groupId: string | null;
  readonly traceparent: string | null;
}

/** The queue URL of each target, by consumer name: the deployment's (JOBFENCE_OUTBOX_QUEUES). */
export type TargetQueues = Readonly<Record<string, string>>;

/** What became of each row a relay tried. */
export interface RelayReport {
  readonly sent: OutboxKey[];
  readonly failed: { readonly key: OutboxKey; readonly failure: FailedJob }[];
}

/**
 * Sends each follow-up to its target's queue (in batches SQS takes, per target) and reports which
 * went. Never throws: a target without a queue, and a call that fails, fail its rows.
 */
export async function sendFollowUps(
  sqs: SQSClient,
  queues: TargetQueues,
  followUps: readonly RelayedFollowUp[],
  options: SendJobsOptions = {},
): Promise<RelayReport> {
  const report: RelayReport = { sent: [], failed: [] };
  const byTarget = new Map<string, RelayedFollowUp[]>();
  for (const f of followUps) byTarget.set(f.target, [...(byTarget.get(f.target) ?? []), f]);
  for (const [target, rows] of byTarget) {
    const keyOf = (jobId: string): OutboxKey => ({ target, jobId });
    const queueUrl = Object.hasOwn(queues, target) ? queues[target] : undefined;
    if (queueUrl === undefined) {
      for (const f of rows) {
        report.failed.push({
          key: keyOf(f.jobId),
          failure: {
            jobId: f.jobId,
            code: "NoQueueForTarget",
            message: `no queue URL is configured for target ${JSON.stringify(target)} (JOBFENCE_OUTBOX_QUEUES)`,
            senderFault: false,
          },
        });
      }
      continue;
    }
    const jobs = rows.map(jobToSend);
    try {
      const result = await sendJobs(sqs, queueUrl, jobs, options);
      for (const sent of result.sent) report.sent.push(keyOf(sent.jobId));
      for (const failure of result.failed) report.failed.push({ key: keyOf(failure.jobId), failure });
    } catch (error) {
      // sendJobs refuses a call it could not send correctly: these rows were checked when the work
      // sent them (or by checkRows, read back from the table). Failed, not lost, should it happen.
      const described = describeError(error);
      for (const f of rows) {
        report.failed.push({
          key: keyOf(f.jobId),
          failure: { jobId: f.jobId, code: described.class, message: described.message, senderFault: true },
        });
      }
    }
  }
  return report;
}

/** The job sendJobs sends for a row. */
function jobToSend(f: RelayedFollowUp): JobToSend {
  return {
    envelope: parseJson(f.body) as JobEnvelope,
    ...(f.groupId === null ? {} : { groupId: f.groupId }),
    ...(f.traceparent === null ? {} : { attributes: traceAttributes(f.traceparent).MessageAttributes }),
  };
}

/**
 * Rows read back from the outbox, each checked on its own before they are sent together: one whose
 * body is not its job id's envelope as the harness writes it (a row the work wrote itself, say) is
 * failed alone, as the sender's fault, instead of making sendJobs refuse its batch-mates with it.
 * The relay after COMMIT needs none of this: it sends what this process staged, checked at `send`.
 */
export function checkRows(followUps: readonly RelayedFollowUp[]): {
  readonly sendable: RelayedFollowUp[];
  readonly refused: RelayReport["failed"];
} {
  const sendable: RelayedFollowUp[] = [];
  const refused: RelayReport["failed"] = [];
  for (const f of followUps) {
    try {
      const job = jobToSend(f);
      // FIFO or not adds only the group (bounded by the table's CHECK) and deduplication ids.
      const [message] = jobMessages([job], false);
      if (message?.MessageBody !== f.body || job.envelope.job_id !== f.jobId) {
        throw new SendRefusedError([
          "the row's body is not the envelope of its job_id as the harness wrote it",
        ]);
      }
      sendable.push(f);
    } catch (error) {
      const described = describeError(error);
      refused.push({
        key: { target: f.target, jobId: f.jobId },
        failure: { jobId: f.jobId, code: described.class, message: described.message, senderFault: true },
      });
    }
  }
  return { sendable, refused };
}

/** What the relay after COMMIT needs. */
export interface AfterCommitRelay {
  readonly pool: pg.Pool;
  readonly sqs: SQSClient;
  readonly consumer: string;
  readonly queues: TargetQueues;
  readonly metrics: Metrics;
  readonly logger: Logger;
}

/** Retries of the relay after COMMIT: few and short, the scheduled relay does the patient ones. */
const AFTER_COMMIT_SEND = { retry: { maxAttempts: 2, baseDelayMs: 50, maxDelayMs: 200 } } as const;

/**
 * Sends what a committed transaction wrote to the outbox and deletes the rows that went. Never
 * throws; what is left waits for the scheduled relay.
 */
export async function relayAfterCommit(
  relay: AfterCommitRelay,
  followUps: readonly RelayedFollowUp[],
  logKeys: Readonly<Record<string, unknown>> = {},
): Promise<RelayReport | undefined> {
  if (followUps.length === 0) return undefined;
  const report = await sendFollowUps(relay.sqs, relay.queues, followUps, AFTER_COMMIT_SEND);
  if (faultHook) await faultHook("outbox:after-send", { jobIds: jobIdsOf(report.sent) });
  let deleteError: unknown;
  try {
    await deleteSentFollowUps(relay.pool, relay.consumer, report.sent);
  } catch (error) {
    // The rows stay: the scheduled relay sends them again, and the target's fence absorbs it.
    deleteError = error;
  }
  if (report.sent.length > 0)
    relay.metrics.addMetric(METRIC.followUpsSent, MetricUnit.Count, report.sent.length);
  const left = report.failed.length + (deleteError === undefined ? 0 : report.sent.length);
  if (left > 0) {
    relay.metrics.addMetric(METRIC.followUpRelayFailed, MetricUnit.Count, left);
    relay.logger.warn("follow-ups left in the outbox for the scheduled relay", {
      ...logKeys,
      sent: report.sent.length,
      failed: report.failed.map((f) => ({ target: f.key.target, job_id: f.key.jobId, code: f.failure.code })),
      ...(deleteError === undefined ? {} : { delete_error: describeError(deleteError) }),
    });
  }
  return report;
}
