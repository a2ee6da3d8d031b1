/**
 * The idempotency key a step hands its provider. Pure.
 *
 * `jf1_<digest>`, where digest is the base64url of the first 30 bytes of the SHA-256 of the UTF-8 of
 * the RFC 8785 canonical JSON of `["jobfence-step/1", consumer, jobId, step]`. So the key:
 * - is the same for every delivery, retry and replay of the job, in every container and region: it
 *   is computed from the job alone, never from a delivery, a clock or a random source;
 * - differs for every other consumer, job and step (each is a separate element of a JSON array, so
 *   no two triples hash the same text, and 240 bits leave no collision to fear);
 * - is 44 characters of `[A-Za-z0-9_-]`: within what payment and email providers accept as an
 *   idempotency key (Stripe takes 255, Adyen 64, Square 45).
 */
import { createHash } from "node:crypto";
import { canonicalJson } from "../envelope/canonical-json.ts";
import { StepDefinitionError } from "../errors/step.ts";

/** A step's name: 1–64 lowercase letters, digits, `_` or `-`, starting with a letter or digit. */
export const STEP_NAME = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/** The length of every key {@link stepKey} makes. */
export const STEP_KEY_LENGTH = 44;

/** The most steps one job may have (the table's CHECK on a step's position says the same). */
export const STEPS_PER_JOB = 1000;

/** Refuses a step name outside {@link STEP_NAME}. */
export function assertStepName(step: unknown): asserts step is string {
  if (typeof step !== "string" || !STEP_NAME.test(step)) {
    throw new StepDefinitionError(
      `step name ${JSON.stringify(step)} must be 1–64 lowercase letters, digits, '_' or '-', starting with a letter or digit`,
    );
  }
}

/** The provider idempotency key of `step` of job `jobId` of `consumer`. */
export function stepKey(consumer: string, jobId: string, step: string): string {
  assertStepName(step);
  // 30 of SHA-256's 32 bytes (240 bits, no collision in any job's lifetime) are 40 characters of
  // base64url without padding.
  const digest = createHash("sha256")
    .update(canonicalJson(["jobfence-step/1", consumer, jobId, step]), "utf8")
    .digest()
    .subarray(0, 30)
    .toString("base64url");
  return `jf1_${digest}`;
}
