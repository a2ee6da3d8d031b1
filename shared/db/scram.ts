/**
 * SCRAM-SHA-256 password verifiers in PostgreSQL's stored format (RFC 5802, RFC 7677):
 * `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`, each part base64. Handing
 * PostgreSQL a verifier instead of a password keeps the password out of the server's logs and
 * statistics; the server stores a verifier it is given as it is.
 */
import { createHash, createHmac, pbkdf2Sync, randomBytes } from "node:crypto";

/** PostgreSQL's default (`scram_iterations`, PostgreSQL 16+; fixed before). */
export const SCRAM_DEFAULT_ITERATIONS = 4096;

export interface ScramOptions {
  /** @default 16 random bytes, as PostgreSQL generates */
  readonly salt?: Buffer;
  /** @default {@link SCRAM_DEFAULT_ITERATIONS} */
  readonly iterations?: number;
}

/**
 * The verifier PostgreSQL would store for `password`. PostgreSQL normalises passwords with SASLprep;
 * NFKC normalisation is the part of it that changes printable text, and ASCII (every generated
 * secret) is unchanged by either.
 */
export function scramSha256Verifier(password: string, options: ScramOptions = {}): string {
  const iterations = options.iterations ?? SCRAM_DEFAULT_ITERATIONS;
  if (!Number.isInteger(iterations) || iterations < 1)
    throw new RangeError("iterations must be a positive integer");
  const salt = options.salt ?? randomBytes(16);
  if (salt.length === 0) throw new RangeError("salt must not be empty");
  if (password.length === 0) throw new RangeError("password must not be empty");
  const salted = pbkdf2Sync(password.normalize("NFKC"), salt, iterations, 32, "sha256");
  const clientKey = createHmac("sha256", salted).update("Client Key").digest();
  const storedKey = createHash("sha256").update(clientKey).digest();
  const serverKey = createHmac("sha256", salted).update("Server Key").digest();
  return `SCRAM-SHA-256$${iterations}:${salt.toString("base64")}$${storedKey.toString("base64")}:${serverKey.toString("base64")}`;
}

/** The iterations and salt of a stored verifier, to recompute it for a candidate password. */
export function parseScramVerifier(verifier: string): { iterations: number; salt: Buffer } {
  const match = /^SCRAM-SHA-256\$(\d+):([A-Za-z0-9+/=]+)\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$/.exec(verifier);
  if (!match?.[1] || !match[2]) throw new RangeError("not a SCRAM-SHA-256 verifier");
  return { iterations: Number(match[1]), salt: Buffer.from(match[2], "base64") };
}
