/**
 * Middleware: envelope and payload parsing (SPEC §2). Turns the record's body into a typed job,
 * or throws PoisonMessageError so the dead-letter middleware records it with zero retries.
 */
import type { MiddlewareObj } from "@middy/core";
import type { z } from "zod";
import { parseMessage } from "../envelope/envelope.ts";
import type { RecordContext, RecordOutcome } from "./record-context.ts";

/** Options of {@link parseEnvelope}. */
export interface ParseEnvelopeOptions<S extends z.ZodType> {
  /** The consumer's payload schema. */
  readonly payload: S;
}

export function parseEnvelope<S extends z.ZodType>(
  options: ParseEnvelopeOptions<S>,
): MiddlewareObj<RecordContext<z.output<S>>, RecordOutcome> {
  const parseEnvelopeBefore = (request: { event: RecordContext<z.output<S>> }): void => {
    const rc = request.event;
    if (rc.job) return; // batch-commit mode parsed it before the batch transaction
    const parsed = parseMessage(rc.record.body ?? "", options.payload, rc.record.messageId);
    rc.identity = parsed.identity;
    if (!parsed.ok) throw parsed.error;
    rc.job = parsed.job;
  };
  return { name: "jobfence-parse-envelope", before: parseEnvelopeBefore };
}
