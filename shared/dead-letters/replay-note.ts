/**
 * What a replay says about a body no consumer can read. A replay sends the stored body unchanged,
 * byte for byte (replay-message.ts); the harness reads the envelope before any consumer's work runs
 * (envelope.ts), so a body that is not JSON, or not a valid job envelope, is refused as poison again
 * on its next delivery, without retries, and recorded as a new dead letter. Nothing is refused
 * here: the API sends it when asked, and says what will happen. Pure.
 */
import { z } from "zod";
import { parseMessage } from "../envelope/envelope.ts";
import { POISON_REASON } from "../errors/job.ts";

/** Why no consumer can read a body as a job. */
export type UnreadableReason = typeof POISON_REASON.unparseableBody | typeof POISON_REASON.invalidEnvelope;

/** Why no consumer can read `body` as a job, or null when its envelope is valid. */
export function unreadableReason(body: string): UnreadableReason | null {
  // Any payload passes: only the envelope is the harness's to refuse, the payload the consumer's.
  const parsed = parseMessage(body, z.unknown(), "replay");
  if (parsed.ok) return null;
  const { reason } = parsed.error;
  return reason === POISON_REASON.unparseableBody || reason === POISON_REASON.invalidEnvelope ? reason : null;
}

const WHAT: Record<UnreadableReason, string> = {
  [POISON_REASON.unparseableBody]: "The body is not JSON",
  [POISON_REASON.invalidEnvelope]: "The body is not a valid job envelope (job_id, tenant_id and payload)",
};

/** The `note` of a single replay that sent a body of this kind. */
export function replayNote(reason: UnreadableReason): string {
  return (
    `${WHAT[reason]}, and a replay sends it unchanged: the consumer will refuse it as poison again, ` +
    "without retries, and record it as a new dead letter. No change to the consumer's code alters " +
    "that (the envelope is checked before its work runs); only a corrected message from the producer " +
    "can succeed."
  );
}

/** The `note` of a replay plan whose set holds `unreadable` such bodies among `wouldSend`. */
export function replayPlanNote(unreadable: number, wouldSend: number): string {
  const one = unreadable === 1;
  const subject =
    unreadable < wouldSend
      ? `${unreadable} of the ${wouldSend} dead letters this replay would send ${one ? "has" : "have"}`
      : one
        ? "The dead letter this replay would send has"
        : `All ${wouldSend} dead letters this replay would send have`;
  return (
    `${subject} no readable job (job_fingerprint is null: the body was not JSON, not a valid job ` +
    "envelope, or a payload that could not be fingerprinted). A replay sends bodies unchanged, so the " +
    `consumer will refuse ${one ? "it" : "them"} as poison again, without retries, and record ` +
    `${one ? "it as a new dead letter" : "them as new dead letters"}.`
  );
}
