/**
 * What a FIFO queue needs beside the body: the message group and the deduplication id. Pure.
 *
 * SQS takes both as 1–128 characters of letters, digits and ASCII punctuation, i.e. printable
 * ASCII without the space. A job id or tenant id that fits is used as it is, readable in the
 * console; one that does not (too long, a space, non-ASCII) is replaced by a hash of it.
 */
import { createHash } from "node:crypto";

/** SQS's alphabet and length for MessageGroupId and MessageDeduplicationId. */
const SQS_TOKEN = /^[\x21-\x7e]{1,128}$/;

/**
 * Begins every hashed token, and no token used as it is: a value that fits but begins with it is
 * hashed too. So a hashed token can never equal another job's id used as it is, and two job ids
 * share a deduplication id only by a SHA-256 collision (SQS would silently drop the second job).
 */
export const HASHED_TOKEN_PREFIX = "sha256:";

/**
 * `value` as an SQS group or deduplication token: itself when it fits, otherwise
 * {@link HASHED_TOKEN_PREFIX} and the base64url SHA-256 of its UTF-16 code units (every string has
 * exactly one, lone surrogates included, so distinct strings never hash the same input).
 */
export function sqsToken(value: string): string {
  if (SQS_TOKEN.test(value) && !value.startsWith(HASHED_TOKEN_PREFIX)) return value;
  return `${HASHED_TOKEN_PREFIX}${createHash("sha256").update(Buffer.from(value, "utf16le")).digest("base64url")}`;
}

/**
 * The deduplication id of a job: derived from its job id alone, so sending the same job twice
 * within SQS's five-minute window enqueues it once (and any later repeat is the fence's to absorb).
 */
export function deduplicationId(jobId: string): string {
  return sqsToken(jobId);
}

/**
 * The message group of a job: the producer's `groupId` when given, else its tenant, so one
 * tenant's jobs stay in order while different tenants' run in parallel.
 */
export function messageGroupId(tenantId: string, groupId?: string): string {
  return sqsToken(groupId ?? tenantId);
}
