/**
 * Sending jobs to a consumer's queue: the impure edge of the producer side. The messages and the
 * batches are made by pure modules (job-message.ts, and SQS's packing rules in
 * shared/sqs/batches.ts); here they meet SQS.
 *
 * What can go wrong comes back as data, job by job, never as a throw (except the up-front refusal
 * of a call that could not be sent correctly at all, SendRefusedError):
 * - a message too large for SQS is failed without a call;
 * - an entry SQS fails as the sender's fault (SenderFault true) is failed at once: sending it
 *   again unchanged would fail again;
 * - an entry SQS fails on its own side, and a whole call that fails for a reason that may pass
 *   (throttling, a 5xx, a timeout, the network), are retried a bounded number of times with
 *   jittered backoff; what is still not sent then is failed with senderFault false.
 *
 * Retrying can send a job twice: a call that timed out may have been taken. That is what the
 * fence is for (and on a FIFO queue the deduplication id, derived from the job id and fingerprint, drops the
 * repeat within five minutes): the consumer applies the job once.
 */
import {
  SendMessageBatchCommand,
  type SendMessageBatchCommandOutput,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import { SendRefusedError } from "../errors/sending.ts";
import { messageSize, packBatches, SQS_SEND_LIMITS } from "../sqs/batches.ts";
import { isFifoQueue } from "../sqs/queue-url.ts";
import { errorCode, isTransientSendError } from "../sqs/send-errors.ts";
import { type JobMessage, type JobToSend, jobMessages } from "./job-message.ts";
import { backoffMs, DEFAULT_SEND_RETRY, errorMessage, type SendRetryPolicy } from "./send-policy.ts";

export type { JobToSend };

/** A job SQS took. */
export interface SentJob {
  readonly jobId: string;
  /** SQS's MessageId (on a FIFO queue, a repeat within the deduplication window gets the original's). */
  readonly messageId: string;
}

/** A job that was not sent, and why. */
export interface FailedJob {
  readonly jobId: string;
  /** SQS's error code, or {@link SEND_FAILURE_CODE} for one sendJobs decided itself. */
  readonly code: string;
  readonly message: string;
  /**
   * True: the job itself is at fault (too large, invalid characters…); sending it again unchanged
   * fails again. False: SQS could not take it for now; send it again later, same job id.
   */
  readonly senderFault: boolean;
}

/** What became of every job, each list in input order. */
export interface SendJobsResult {
  readonly sent: SentJob[];
  readonly failed: FailedJob[];
}

/** The codes of failures sendJobs reports itself. */
export const SEND_FAILURE_CODE = Object.freeze({
  /** The message is over the single-message limit: never sent. */
  tooLarge: "MessageTooLarge",
  /** SQS's answer said nothing about the entry. */
  noAnswer: "NoAnswerForEntry",
});

export interface SendJobsOptions {
  /** @default DEFAULT_SEND_RETRY */
  readonly retry?: Partial<SendRetryPolicy>;
  /**
   * The largest message to send, in bytes as SQS counts them. Lower it to the queue's
   * MaximumMessageSize when that is below SQS's 1 MiB, to fail large jobs without a call.
   * @default 1,048,576
   */
  readonly maxMessageBytes?: number;
  /** @default setTimeout */
  readonly sleep?: (ms: number) => Promise<void>;
  /** Uniform [0, 1) source for the backoff's jitter. @default Math.random */
  readonly random?: () => number;
}

type Outcome = { readonly sent: SentJob } | { readonly failed: FailedJob };

/**
 * Sends `jobs` to `queueUrl` (FIFO when it ends in `.fifo`) with SendMessageBatch: batches of at
 * most 10 entries and 1 MiB, one batch after another so that a FIFO group's jobs are enqueued in
 * input order (as long as none has to be retried). Throws {@link SendRefusedError}, sending
 * nothing, when a job lacks a usable envelope or job_id, or two share a job_id.
 */
export async function sendJobs(
  sqs: SQSClient,
  queueUrl: string,
  jobs: readonly JobToSend[],
  options: SendJobsOptions = {},
): Promise<SendJobsResult> {
  const policy: SendRetryPolicy = { ...DEFAULT_SEND_RETRY, ...options.retry };
  const maxMessageBytes = options.maxMessageBytes ?? SQS_SEND_LIMITS.messageBytes;
  const problems: string[] = [];
  if (!Number.isInteger(policy.maxAttempts) || policy.maxAttempts < 1)
    problems.push(`retry.maxAttempts must be a whole number ≥ 1, not ${policy.maxAttempts}`);
  if (
    !Number.isInteger(maxMessageBytes) ||
    maxMessageBytes < 1 ||
    maxMessageBytes > SQS_SEND_LIMITS.messageBytes
  )
    problems.push(`maxMessageBytes must be a whole number in 1–${SQS_SEND_LIMITS.messageBytes}`);
  if (problems.length > 0) throw new SendRefusedError(problems);

  const messages = jobMessages(jobs, isFifoQueue(queueUrl));
  const jobIdOf = (index: number) => (jobs[index] as JobToSend).envelope.job_id;
  const sizes = messages.map(messageSize);
  const packs = packBatches(
    messages.map((_, index) => index),
    (index) => sizes[index] as number,
    { ...SQS_SEND_LIMITS, messageBytes: maxMessageBytes },
  );
  const outcomes = new Map<number, Outcome>();
  const retry = {
    policy,
    sleep: options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))),
    random: options.random ?? Math.random,
  };

  for (const pack of packs) {
    if (pack.kind === "oversize") {
      // It can never be sent: failed without a call.
      const index = pack.item;
      outcomes.set(index, {
        failed: {
          jobId: jobIdOf(index),
          code: SEND_FAILURE_CODE.tooLarge,
          message: `the message is ${sizes[index]} bytes as SQS counts them; at most ${maxMessageBytes} can be sent`,
          senderFault: true,
        },
      });
      continue;
    }
    const entries = pack.items.map((index) => ({
      index,
      jobId: jobIdOf(index),
      message: messages[index] as JobMessage,
    }));
    for (const [index, outcome] of await sendBatch(sqs, queueUrl, entries, retry))
      outcomes.set(index, outcome);
  }

  const result: SendJobsResult = { sent: [], failed: [] };
  for (let index = 0; index < jobs.length; index++) {
    const outcome = outcomes.get(index);
    if (!outcome) continue; // unreachable: every index is packed in a batch or as oversize
    if ("sent" in outcome) result.sent.push(outcome.sent);
    else result.failed.push(outcome.failed);
  }
  return result;
}

/** One job of a batch: its input index (the entry's Id), its job id and its message. */
interface BatchEntry {
  readonly index: number;
  readonly jobId: string;
  readonly message: JobMessage;
}

interface Retry {
  readonly policy: SendRetryPolicy;
  readonly sleep: (ms: number) => Promise<void>;
  readonly random: () => number;
}

/** Sends one planned batch, retrying what may pass; every entry ends with an outcome. */
async function sendBatch(
  sqs: SQSClient,
  queueUrl: string,
  entries: readonly BatchEntry[],
  { policy, sleep, random }: Retry,
): Promise<Map<number, Outcome>> {
  const outcomes = new Map<number, Outcome>();
  const failed = (entry: BatchEntry, why: { code: string; message: string }, senderFault: boolean) =>
    outcomes.set(entry.index, { failed: { jobId: entry.jobId, ...why, senderFault } });
  /** Why each entry still pending was not taken on the last attempt. */
  const lastFailure = new Map<number, { code: string; message: string }>();
  let pending = [...entries];

  for (let attempt = 1; attempt <= policy.maxAttempts && pending.length > 0; attempt++) {
    if (attempt > 1) await sleep(backoffMs(attempt - 1, policy, random));
    const byId = new Map(pending.map((entry) => [String(entry.index), entry]));
    let answer: SendMessageBatchCommandOutput;
    try {
      answer = await sqs.send(
        new SendMessageBatchCommand({
          QueueUrl: queueUrl,
          // The entry's Id is the job's input index: unique in the call, and in SQS's alphabet.
          Entries: pending.map((entry) => ({ Id: String(entry.index), ...entry.message })),
        }),
      );
    } catch (error) {
      const why = { code: errorCode(error), message: errorMessage(error) };
      if (isTransientSendError(error)) {
        for (const entry of pending) lastFailure.set(entry.index, why);
        continue;
      }
      // It would fail the same way again: the request, not the moment, is wrong.
      for (const entry of pending) failed(entry, why, true);
      return outcomes;
    }
    for (const result of answer.Successful ?? []) {
      const entry = byId.get(result.Id ?? "");
      if (!entry || outcomes.has(entry.index)) continue;
      outcomes.set(entry.index, { sent: { jobId: entry.jobId, messageId: result.MessageId ?? "" } });
    }
    for (const result of answer.Failed ?? []) {
      const entry = byId.get(result.Id ?? "");
      if (!entry || outcomes.has(entry.index)) continue;
      const why = { code: result.Code ?? "Error", message: result.Message ?? "" };
      // The sender's fault fails the same way on every attempt; anything else may pass.
      if (result.SenderFault) failed(entry, why, true);
      else lastFailure.set(entry.index, why);
    }
    pending = pending.filter((entry) => !outcomes.has(entry.index));
    for (const entry of pending) {
      if (!answer.Failed?.some((result) => result.Id === String(entry.index)))
        lastFailure.set(entry.index, {
          code: SEND_FAILURE_CODE.noAnswer,
          message: "SQS's answer named neither success nor failure for this entry",
        });
    }
  }
  for (const entry of pending) {
    failed(entry, lastFailure.get(entry.index) ?? { code: "Error", message: "not sent" }, false);
  }
  return outcomes;
}
