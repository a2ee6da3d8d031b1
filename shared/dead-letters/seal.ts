/**
 * Sealed values: JSON a client carries and hands back (list cursors, bulk-operation plan tokens),
 * signed with HMAC-SHA-256 under a key only the deployment holds (Secrets Manager in AWS, made at
 * start in the local stack). A client can read one but not forge or edit it: a hash anyone could
 * recompute would let an edited cursor page another filter, or an edited token confirm a set
 * nobody planned. Pure.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { ConfigurationError } from "../errors/configuration.ts";

/** A signing key of at least 256 bits. */
export interface SealKey {
  readonly bytes: Buffer;
}

/** Bytes a key needs at least. */
export const SEAL_KEY_MIN_BYTES = 32;

/** Bytes of the MAC kept in a sealed value: 128 bits. */
const MAC_BYTES = 16;

/** The key from its secret text (any string of at least 32 bytes, e.g. 64 hex digits). */
export function sealKey(secret: string | Buffer): SealKey {
  const bytes = typeof secret === "string" ? Buffer.from(secret, "utf8") : secret;
  if (bytes.length < SEAL_KEY_MIN_BYTES) {
    throw new ConfigurationError("signing key", [
      `the signing key must be at least ${SEAL_KEY_MIN_BYTES} bytes`,
    ]);
  }
  return { bytes };
}

/** `purpose` separates the uses of one key: a cursor can never pass for a token. */
function mac(key: SealKey, purpose: string, body: string): Buffer {
  return createHmac("sha256", key.bytes).update(`${purpose}\n${body}`).digest().subarray(0, MAC_BYTES);
}

/** A secret for `purpose` derived from the key (hex), for keying what the database computes. */
export function derivedSecret(key: SealKey, purpose: string): string {
  return createHmac("sha256", key.bytes).update(`derive\n${purpose}`).digest("hex");
}

/** `value` as `base64url(json).base64url(mac)`. */
export function seal(key: SealKey, purpose: string, value: unknown): string {
  const body = Buffer.from(JSON.stringify(value), "utf8").toString("base64url");
  return `${body}.${mac(key, purpose, body).toString("base64url")}`;
}

/**
 * The value in `text`, read WITHOUT checking its MAC: only to explain a refusal (a well-formed
 * value that fails {@link unseal} was sealed under another key), never to act on.
 */
export function readUnverified(text: string): unknown {
  const match = /^([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$/.exec(text);
  if (!match) return undefined;
  try {
    return JSON.parse(Buffer.from(match[1] ?? "", "base64url").toString("utf8"));
  } catch {
    return undefined;
  }
}

/** The value sealed in `text` for `purpose`, or undefined when it is malformed, edited or not ours. */
export function unseal(key: SealKey, purpose: string, text: string): unknown {
  const match = /^([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$/.exec(text);
  if (!match) return undefined;
  const [, body = "", tag = ""] = match;
  // Compared as text: base64url's last character carries spare bits, and a decoded comparison
  // would let an edit of those through.
  const given = Buffer.from(tag, "utf8");
  const expected = Buffer.from(mac(key, purpose, body).toString("base64url"), "utf8");
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
  try {
    return JSON.parse(Buffer.from(body, "base64url").toString("utf8"));
  } catch {
    return undefined;
  }
}
