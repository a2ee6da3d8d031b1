/**
 * The job envelope (docs/design.md §2) and the classification of a message body: either a job the
 * consumer can run, or poison with the identity its dead letter should carry. Pure.
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import { POISON_REASON, PoisonMessageError } from "../errors/job.ts";
import { describeError } from "../errors/last-error.ts";
import { parseJson } from "./parse-json.ts";

/** At most 255 characters; matches the database's CHECK. */
export const JOB_ID_MAX_LENGTH = 255;

/**
 * Tenant and correlation ids are bounded too (database CHECKs, migration 0007): both are indexed
 * in core.dead_letters, and a B-tree entry holds at most about 2.7 kB, so an unbounded one could
 * make a message's dead letter impossible to write.
 */
export const IDENTITY_MAX_LENGTH = 255;

/**
 * A string PostgreSQL's text can store as sent: no U+0000 (text cannot hold it) and no lone UTF-16
 * surrogate (it would be stored as U+FFFD, so the stored key would differ from the sent one).
 * Consumers use it in their payload schemas for strings their work writes to the database.
 */
export const storableText = z
  .string()
  .refine((s) => !s.includes("\u0000"), { message: "must not contain U+0000" })
  .refine((s) => s.isWellFormed(), { message: "must be well-formed Unicode (no lone surrogates)" })
  .meta({ pattern: storableTextPattern() });

/**
 * {@link storableText}'s rule as a JSON Schema pattern, for documents generated from schemas that use
 * it (the API's OpenAPI document): any UTF-16 unit but U+0000 and the surrogates, or a high surrogate
 * followed by a low one. It reads the same whether a validator compiles it with the `u` flag (a pair
 * is then one code point, above the excluded range) or without. The checks themselves stay the two
 * refinements above, linear and native on strings of any size; a test holds the two to each other.
 */
function storableTextPattern(): string {
  return "^(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])*$";
}

/**
 * From `min` to `max` characters as PostgreSQL counts them (code points), not UTF-16 units as
 * `z.string().max()` does: an emoji is one character to the database and to JSON Schema's
 * `maxLength`, two units to JavaScript. The bounds are in the schema's JSON Schema too.
 */
export function characters(min: number, max: number): z.ZodString {
  const count = (s: string) => (s.length <= max && s.length >= 2 * min ? s.length : [...s].length);
  return z
    .string()
    .refine((s) => count(s) >= min, { message: `must be at least ${min} character${min === 1 ? "" : "s"}` })
    .refine((s) => count(s) <= max, { message: `must be at most ${max} characters` })
    .meta({ ...(min > 0 ? { minLength: min } : {}), maxLength: max });
}

/** Identity strings must say something: the database refuses blank job and correlation ids. */
const NOT_BLANK = /\S/;

/**
 * The envelope every message body must be. Unknown top-level keys are ignored. A blank
 * `correlation_id` counts as absent (the job id stands in), as a missing one does.
 */
const tenantIdSchema = storableText.pipe(characters(0, IDENTITY_MAX_LENGTH));
const correlationIdSchema = storableText.pipe(characters(0, IDENTITY_MAX_LENGTH));

export const envelopeSchema = z.object({
  job_id: storableText.pipe(
    characters(0, JOB_ID_MAX_LENGTH).pipe(z.string().regex(NOT_BLANK, "must not be blank")),
  ),
  tenant_id: tenantIdSchema,
  correlation_id: correlationIdSchema.optional(),
  payload: z.unknown().refine((value) => value !== undefined, { message: "payload is required" }),
});

/** A job as the consumer's work receives it. */
export interface Job<P> {
  /** The producer's identity of the job; the fence key together with the consumer name. */
  readonly jobId: string;
  readonly tenantId: string;
  /** The envelope's `correlation_id`, or the `job_id` when it has none. */
  readonly correlationId: string;
  /** The payload, parsed by the consumer's own schema. */
  readonly payload: P;
}

/** What a dead letter records about a message's identity, as far as it could be read. */
export interface MessageIdentity {
  readonly jobId: string;
  readonly tenantId: string | null;
  readonly correlationId: string;
}

/** Outcome of parsing a body: a job, or poison with the best identity that could be read. */
export type ParsedMessage<P> =
  | {
      readonly ok: true;
      readonly job: Job<P>;
      readonly identity: MessageIdentity;
      /** The envelope's payload as parsed from the body, before the consumer's schema. */
      readonly envelopePayload: unknown;
    }
  | {
      readonly ok: false;
      readonly error: PoisonMessageError;
      readonly identity: MessageIdentity;
      /** Set when the envelope was valid and only the payload was refused. */
      readonly envelopePayload?: unknown;
    };

/**
 * Parses an SQS body into a job. Never throws: a body that is not JSON, an invalid envelope and a
 * payload the schema refuses all come back as poison. `messageId` stands in for the job id of a
 * message whose own cannot be read.
 */
export function parseMessage<S extends z.ZodType>(
  body: string,
  payloadSchema: S,
  messageId: string,
): ParsedMessage<z.output<S>> {
  let document: unknown;
  try {
    document = parseJson(body);
  } catch (error) {
    return poison(
      POISON_REASON.unparseableBody,
      `body is not JSON (${describeError(error).message})`,
      undefined,
      messageId,
    );
  }

  const envelope = envelopeSchema.safeParse(document);
  if (!envelope.success) {
    return poison(POISON_REASON.invalidEnvelope, summarize(envelope.error), document, messageId);
  }
  const { job_id, tenant_id, correlation_id, payload } = envelope.data;
  const identity: MessageIdentity = {
    jobId: job_id,
    tenantId: tenant_id,
    correlationId: correlation_id !== undefined && NOT_BLANK.test(correlation_id) ? correlation_id : job_id,
  };

  let parsed: z.ZodSafeParseResult<z.output<S>>;
  try {
    parsed = payloadSchema.safeParse(payload) as z.ZodSafeParseResult<z.output<S>>;
  } catch (error) {
    // A schema can throw instead of answering (a recursive one on a deeply nested payload overflows
    // the stack); it answers the same for the same payload, so the message is poison, not a retry.
    return {
      ok: false,
      error: new PoisonMessageError(
        POISON_REASON.invalidPayload,
        `the payload schema threw: ${describeError(error).message}`,
      ),
      identity,
      envelopePayload: payload,
    };
  }
  if (typeof parsed !== "object" || parsed === null || parsed.success !== true) {
    return {
      ok: false,
      error: new PoisonMessageError(POISON_REASON.invalidPayload, summarize(parsed?.error)),
      identity,
      envelopePayload: payload,
    };
  }
  return {
    ok: true,
    identity,
    envelopePayload: payload,
    job: { jobId: job_id, tenantId: tenant_id, correlationId: identity.correlationId, payload: parsed.data },
  };
}

function poison(
  reason: (typeof POISON_REASON)[keyof typeof POISON_REASON],
  detail: string,
  document: unknown,
  messageId: string,
): ParsedMessage<never> {
  return {
    ok: false,
    error: new PoisonMessageError(reason, detail),
    identity: readableIdentity(document, messageId),
  };
}

/**
 * Whatever identity an invalid envelope still offers, under the same rules as a valid one; the
 * message id stands in for a job id that is unusable.
 */
function readableIdentity(document: unknown, messageId: string): MessageIdentity {
  const fields =
    typeof document === "object" && document !== null && !Array.isArray(document)
      ? (document as Record<string, unknown>)
      : {};
  const field = (schema: z.ZodType<string>, value: unknown): string | undefined => {
    const parsed = schema.safeParse(value);
    return parsed.success ? parsed.data : undefined;
  };
  const jobId = field(envelopeSchema.shape.job_id, fields.job_id) ?? messageIdStandIn(messageId);
  // An unusable correlation id (over-long, say) counts as absent, an unusable tenant id as none:
  // the dead letter must be writable whatever the message carries.
  const correlationId = field(correlationIdSchema, fields.correlation_id);
  return {
    jobId,
    tenantId: field(tenantIdSchema, fields.tenant_id) ?? null,
    correlationId: correlationId !== undefined && NOT_BLANK.test(correlationId) ? correlationId : jobId,
  };
}

/**
 * What stands in for a job id (and a correlation id) that cannot be read: the SQS message id when
 * it could be one — SQS's are UUIDs — or else, for an id an event built by hand made blank, over
 * long or unstorable, `sqs-message:` and the SHA-256 of its UTF-16 code units, so that a dead letter
 * can always be written and the same message always gets the same stand-in.
 */
export function messageIdStandIn(messageId: string): string {
  if (envelopeSchema.shape.job_id.safeParse(messageId).success) return messageId;
  return `sqs-message:${createHash("sha256")
    .update(Buffer.from(String(messageId), "utf16le"))
    .digest("hex")}`;
}

/** A one-line, bounded summary of zod issues: `path: message; path: message`. Never throws. */
function summarize(error: z.ZodError | undefined): string {
  try {
    return summarizeIssues(error as z.ZodError);
  } catch {
    return "the schema refused it (its issues could not be read)";
  }
}

function summarizeIssues(error: z.ZodError): string {
  const lines = error.issues
    .slice(0, 10)
    .map(
      (issue) =>
        `${issue.path.length ? issue.path.map(String).join(".") : "(root)"}: ${String(issue.message)}`,
    );
  if (error.issues.length > 10) lines.push(`… ${error.issues.length - 10} more`);
  return lines.join("; ");
}
