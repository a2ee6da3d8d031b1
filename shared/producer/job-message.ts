/**
 * From the jobs a producer hands sendJobs to the SQS messages that carry them, and the checks
 * that refuse the whole call before anything is sent. Pure.
 */
import type { MessageAttributeValue, SendMessageBatchRequestEntry } from "@aws-sdk/client-sqs";
import { envelopeSchema } from "../envelope/envelope.ts";
import { jobFingerprint } from "../envelope/fingerprint.ts";
import { InvalidJobError, SendRefusedError } from "../errors/sending.ts";
import { sqsJson } from "../sqs/message-text.ts";
import { fifoDeduplicationId, messageGroupId } from "./fifo-ids.ts";
import { issuesOf, type JobEnvelope, wireForm } from "./job-envelope.ts";

/** One job to send. */
export interface JobToSend {
  /** The body, as jobEnvelope builds it (or as the producer wrote it: it is checked again). */
  readonly envelope: JobEnvelope;
  /** FIFO queues: the message group. @default the envelope's tenant_id. Ignored on standard queues. */
  readonly groupId?: string;
  /** Message attributes; they count towards the message's size, as SQS counts them. */
  readonly attributes?: Record<string, MessageAttributeValue>;
}

/** A message to send: SendMessageBatch's entry without its batch-local Id. */
export type JobMessage = Omit<SendMessageBatchRequestEntry, "Id">;

/**
 * The messages for `jobs`, in order. Throws {@link SendRefusedError} listing every problem when
 * any job cannot be sent as it is:
 * - an envelope envelopeSchema refuses (above all a missing, blank or over-long job_id): the
 *   consumer would dead-letter it as poison, and without a job id it has no fence;
 * - a job that cannot be written as JSON;
 * - two jobs with one job_id. They are either the same job twice, which is pointless, or two
 *   different jobs under one id, a conflict the consumer dead-letters; which one it is is not the
 *   sender's to guess, so neither is sent;
 * - an empty groupId (SQS refuses it).
 */
export function jobMessages(jobs: readonly JobToSend[], fifo: boolean): JobMessage[] {
  const problems: string[] = [];
  const firstIndexOf = new Map<string, number>();
  const messages = jobs.map((job, index): JobMessage | undefined => {
    const where = `jobs[${index}]`;
    if (
      typeof job !== "object" ||
      job === null ||
      typeof job.envelope !== "object" ||
      job.envelope === null
    ) {
      problems.push(`${where}: has no envelope`);
      return undefined;
    }
    let wire: unknown;
    try {
      wire = wireForm(job.envelope);
    } catch (error) {
      problems.push(
        `${where}: ${error instanceof InvalidJobError ? error.issues.join("; ") : String(error)}`,
      );
      return undefined;
    }
    const checked = envelopeSchema.safeParse(wire);
    if (!checked.success) {
      problems.push(`${where}: ${issuesOf(checked.error).join("; ")}`);
      return undefined;
    }
    const jobId = checked.data.job_id;
    const first = firstIndexOf.get(jobId);
    if (first !== undefined) {
      problems.push(`${where}: job_id ${JSON.stringify(jobId)} is also jobs[${first}]'s`);
      return undefined;
    }
    firstIndexOf.set(jobId, index);
    if (job.groupId !== undefined && (typeof job.groupId !== "string" || job.groupId.length === 0)) {
      problems.push(`${where}: groupId must be a non-empty string`);
      return undefined;
    }
    const message: JobMessage = { MessageBody: sqsJson(job.envelope) as string };
    if (job.attributes && Object.keys(job.attributes).length > 0) message.MessageAttributes = job.attributes;
    if (fifo) {
      message.MessageGroupId = messageGroupId(checked.data.tenant_id, job.groupId);
      // The job's fingerprint as the consumer's fence takes it, from the payload as it will arrive.
      let fingerprint: Buffer;
      try {
        fingerprint = jobFingerprint(checked.data.tenant_id, checked.data.payload);
      } catch (error) {
        problems.push(`${where}: no fingerprint (${error instanceof Error ? error.message : String(error)})`);
        return undefined;
      }
      message.MessageDeduplicationId = fifoDeduplicationId(jobId, fingerprint);
    }
    return message;
  });
  if (problems.length > 0) throw new SendRefusedError(problems);
  return messages as JobMessage[];
}
