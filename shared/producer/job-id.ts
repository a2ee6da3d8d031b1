/**
 * Deterministic job ids from business keys. Pure.
 *
 * Why deterministic: a producer that retries (its own request timed out, it crashed after sending,
 * a batch came back partly failed) must send the *same* job again, not a new one. With the id
 * derived from what the job is about (an order number, a user and a day) the retry carries the
 * same job_id, and the consumer's fence absorbs it: the effect happens once. A random id per send
 * would make every retry a new job, and the effect would happen twice.
 *
 * The id is `<namespace>:<digest>`, where digest is the unpadded base64url of the SHA-256 of the
 * UTF-8 of the RFC 8785 canonical JSON of the array `[namespace, ...keys]`. For example
 * `deriveJobId("orders", "a", 1)` hashes the text `["orders","a",1]`. So:
 * - it is unambiguous: each key is a separate JSON array element, strings quoted and escaped, so
 *   ("a", "bc") and ("ab", "c") hash different texts, and the string "1" differs from the number 1;
 * - any language with SHA-256 and a canonical JSON writer can compute the same id;
 * - numbers are written as RFC 8785 writes them (1.0 is 1, -0 is 0), so keys that are equal as
 *   numbers give the same id;
 * - its length is at most 64 + 1 + 43 = 108 characters, all printable ASCII: within the envelope's
 *   255 and SQS's alphabet; on a FIFO queue its deduplication id shows it as it is, with the job's
 *   fingerprint, up to 105 characters (a namespace of at most 61), and hashes a longer one.
 */
import { createHash } from "node:crypto";
import { canonicalJson } from "../envelope/canonical-json.ts";
import { JobIdDerivationError } from "../errors/sending.ts";

/**
 * A namespace: what kind of job the keys identify (often the consumer's name). It begins the id,
 * so it is limited to characters that read unambiguously before the `:`.
 */
export const JOB_ID_NAMESPACE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** The longest id {@link deriveJobId} makes: the longest namespace, `:`, and 43 characters of digest. */
export const DERIVED_JOB_ID_MAX_LENGTH = 64 + 1 + 43;

/** A business key: a string, or a finite number. */
export type JobIdKey = string | number;

/** The job id for `keys` in `namespace`; throws {@link JobIdDerivationError} for a bad namespace or key. */
export function deriveJobId(namespace: string, ...keys: readonly JobIdKey[]): string {
  if (typeof namespace !== "string" || !JOB_ID_NAMESPACE.test(namespace)) {
    throw new JobIdDerivationError(
      `namespace ${JSON.stringify(namespace)} must be 1–64 letters, digits, '.', '_' or '-', starting with a letter or digit`,
    );
  }
  // No key at all would give every job of the namespace the same id: almost surely a mistake.
  if (keys.length === 0) throw new JobIdDerivationError("deriveJobId needs at least one key");
  keys.forEach((key, i) => {
    if (typeof key === "string") return;
    if (typeof key === "number" && Number.isFinite(key)) return;
    throw new JobIdDerivationError(
      `key ${i} must be a string or a finite number, not ${typeof key === "number" ? String(key) : typeof key}`,
    );
  });
  const digest = createHash("sha256")
    .update(canonicalJson([namespace, ...keys]), "utf8")
    .digest("base64url");
  return `${namespace}:${digest}`;
}
