/**
 * What a FIFO queue needs beside the body: the message group and the deduplication id. Pure.
 *
 * SQS takes both as 1–128 characters of letters, digits and ASCII punctuation, i.e. printable
 * ASCII without the space. A group or job id that fits is shown as it is, readable in the
 * console; one that does not (too long, a space, non-ASCII) is replaced by a hash of it.
 */
import { createHash } from "node:crypto";
import { FINGERPRINT_BYTES } from "../envelope/fingerprint.ts";

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

/** Length of a fingerprint in a deduplication id: 16 bytes as base64url. */
const FINGERPRINT_TOKEN_LENGTH = Math.ceil((FINGERPRINT_BYTES * 4) / 3);
/** The longest job id a deduplication id shows as it is: the rest of SQS's 128 is `:` and the fingerprint. */
const READABLE_JOB_ID_MAX = 128 - 1 - FINGERPRINT_TOKEN_LENGTH;

/**
 * The deduplication id of a job on a FIFO queue: its job id AND its fingerprint (the one the fence
 * stores: tenant and payload in canonical form, fingerprint.ts). So a resend of the same job within
 * SQS's five-minute window is enqueued once (a later one is the fence's to absorb), while a
 * different job sent under a used job id is delivered, and the fence records it as a `conflict`;
 * a deduplication id of the job id alone would let SQS drop it unseen.
 *
 * `<job id>:<fingerprint as base64url>` when the job id is in SQS's alphabet and at most
 * {@link READABLE_JOB_ID_MAX} characters (and does not begin with {@link HASHED_TOKEN_PREFIX}),
 * readable in the console; otherwise {@link HASHED_TOKEN_PREFIX} and the base64url SHA-256 of the
 * job id's UTF-16 code units followed by the fingerprint. The fingerprint has a fixed length at
 * the end of both, so two different (job id, fingerprint) pairs share a deduplication id only by
 * a SHA-256 collision. Throws RangeError for a fingerprint that is not {@link FINGERPRINT_BYTES}
 * bytes.
 */
export function fifoDeduplicationId(jobId: string, fingerprint: Uint8Array): string {
  if (fingerprint.length !== FINGERPRINT_BYTES)
    throw new RangeError(`a job fingerprint is ${FINGERPRINT_BYTES} bytes, not ${fingerprint.length}`);
  const print = Buffer.from(fingerprint.buffer, fingerprint.byteOffset, fingerprint.byteLength);
  if (jobId.length <= READABLE_JOB_ID_MAX && SQS_TOKEN.test(jobId) && !jobId.startsWith(HASHED_TOKEN_PREFIX))
    return `${jobId}:${print.toString("base64url")}`;
  const digest = createHash("sha256").update(Buffer.from(jobId, "utf16le")).update(print).digest("base64url");
  return `${HASHED_TOKEN_PREFIX}${digest}`;
}

/**
 * The deduplication id of one replay attempt of a dead letter to a FIFO queue: the dead letter's id
 * (a UUID) and a nonce of the attempt, never the job's. So a replay is never dropped as a duplicate
 * of the job's own send (or of another dead letter's replay) however soon it follows, and a replay
 * tried again (its first send reached SQS but the answer was lost, so its transaction rolled back)
 * is delivered again: had the retry reused the first attempt's id, SQS would drop it within five
 * minutes while the dead letter became `replayed`, and a first copy that had failed again at once
 * (merged into the still-pending row) would leave the job neither applied nor pending. The fence
 * absorbs the extra copy when the job applies. It cannot equal a job's deduplication id: it has no
 * `:` and does not begin with {@link HASHED_TOKEN_PREFIX}.
 */
export function replayDeduplicationId(deadLetterId: string, attempt: string): string {
  return sqsToken(`replay-${deadLetterId}-${attempt}`);
}

/**
 * The message group of a job: the producer's `groupId` when given, else its tenant, so one
 * tenant's jobs stay in order while different tenants' run in parallel.
 */
export function messageGroupId(tenantId: string, groupId?: string): string {
  return sqsToken(groupId ?? tenantId);
}
