/**
 * A job's fingerprint: what the job *is*, its tenant and its payload, so the fence can tell a
 * redelivery of a job (same job id, same fingerprint) from a different job sent under a job id
 * already used (same job id, different fingerprint). Pure.
 *
 * It is the first {@link FINGERPRINT_BYTES} bytes of SHA-256 over the UTF-8 of the RFC 8785
 * canonical JSON of `{"payload": …, "tenant_id": …}` (see canonical-json.ts). So:
 * - key order, whitespace and number spelling (`1`, `1.0`, `1e0`) do not change it;
 * - `correlation_id` and unknown envelope fields are not part of it: the same job traced under a
 *   new correlation id, or sent by a producer that adds fields, is still the same job;
 * - tenant and payload sit under their own keys, so neither can be mistaken for the other;
 * - numbers compare as IEEE doubles, as RFC 8785 prescribes: two payloads that differ only in
 *   digits beyond double precision (integers past 2^53, long decimals) share a fingerprint. A
 *   consumer whose effect depends on such digits should carry them as strings.
 * - lone surrogates are escaped by the canonical form, so its UTF-8 encoding loses nothing.
 */
import { hash } from "node:crypto";
import { CanonicalJsonError } from "../errors/job.ts";
import { canonicalJson } from "./canonical-json.ts";

/**
 * Length of a fingerprint: the first 128 bits of SHA-256. That is enough because a fingerprint
 * only ever has to tell apart payloads sent under the same job id; it never has to resist a
 * search over all jobs, so the birthday bound over every row does not apply. A producer that
 * controls both payloads gains nothing from a collision (it may send what it likes under its own
 * job id); anyone else would need a second preimage, about 2^128 work. The fence stores one per
 * row, so each byte counts.
 */
export const FINGERPRINT_BYTES = 16;

/** The fingerprint of a job: {@link FINGERPRINT_BYTES} bytes; throws CanonicalJsonError for a non-JSON payload. */
export function jobFingerprint(tenantId: string, payload: unknown): Buffer {
  // canonicalJson would silently drop an undefined property, making "no payload" a fingerprint.
  if (payload === undefined) throw new CanonicalJsonError("$.payload is undefined: not a JSON value");
  const canonical = canonicalJson({ tenant_id: tenantId, payload });
  // One-shot: no Hash object per job. A string is hashed as its UTF-8, as update(text, "utf8") does.
  // The digest is this call's own buffer, so its first bytes are returned without a copy.
  return hash("sha256", canonical, "buffer").subarray(0, FINGERPRINT_BYTES);
}

/** A fingerprint as lowercase hex for logs and alerts; null when there is none. */
export function fingerprintHex(fp: Buffer | null | undefined): string | null {
  return fp === null || fp === undefined ? null : fp.toString("hex");
}
