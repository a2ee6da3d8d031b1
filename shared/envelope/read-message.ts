/**
 * Reading the message, the first step of a record's path: its body becomes a job with its
 * fingerprint, or poison. Pure and never throwing: the consumer's spine, its batch transaction and
 * the backstop drain all read a message this way.
 */
import type { SQSRecord } from "aws-lambda";
import type { z } from "zod";
import { POISON_REASON, PoisonMessageError } from "../errors/job.ts";
import { describeError } from "../errors/last-error.ts";
import { type Job, type MessageIdentity, parseMessage } from "./envelope.ts";
import { jobFingerprint } from "./fingerprint.ts";

/** A body that is a job: what the work gets, who it is, and what the fence records of it. */
export interface JobMessage<P> {
  readonly job: Job<P>;
  readonly identity: MessageIdentity;
  /** The job's fingerprint (docs/design.md §2.2). */
  readonly fingerprint: Buffer;
}

/** A body that is not a job: why, who the message says it is, and its job's fingerprint if any. */
export interface PoisonMessage {
  readonly poison: PoisonMessageError;
  readonly identity: MessageIdentity;
  readonly fingerprint: Buffer | null;
}

/** What reading a record's body makes of it. */
export type ReadMessage<P> = JobMessage<P> | PoisonMessage;

/**
 * A record's body as a job with its fingerprint, or poison. A schema or fingerprint function that
 * throws makes the message poison: it would throw again on every retry.
 */
export function readMessage<S extends z.ZodType>(
  record: SQSRecord,
  payload: S,
  narrow?: (payload: z.output<S>) => unknown,
): ReadMessage<z.output<S>> {
  const parsed = parseMessage(record.body ?? "", payload, record.messageId);
  const { identity } = parsed;
  if (!parsed.ok) {
    // The job the message would have been, when its envelope could be read: what replay and the
    // daily escalation compare with a fence.
    const fingerprint =
      parsed.envelopePayload === undefined || identity.tenantId === null
        ? null
        : tryFingerprint(identity.tenantId, parsed.envelopePayload);
    return { poison: parsed.error, identity, fingerprint };
  }
  try {
    const narrowed = narrow ? narrow(parsed.job.payload) : parsed.envelopePayload;
    return { job: parsed.job, identity, fingerprint: jobFingerprint(parsed.job.tenantId, narrowed) };
  } catch (error) {
    // A payload the consumer's fingerprint cannot read is one its fence cannot guard.
    return {
      poison: new PoisonMessageError(
        POISON_REASON.invalidPayload,
        `no fingerprint: ${describeError(error).message}`,
      ),
      identity,
      fingerprint: null,
    };
  }
}

/** The fingerprint, or null for a payload with no canonical form (a number beyond a double's range). */
function tryFingerprint(tenantId: string, payload: unknown): Buffer | null {
  try {
    return jobFingerprint(tenantId, payload);
  } catch {
    return null;
  }
}
