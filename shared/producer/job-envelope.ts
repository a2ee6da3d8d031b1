/**
 * The envelope a producer sends, typed by the consumer's payload schema, and the builder that
 * refuses a job its consumer would dead-letter as poison before it ever reaches the queue. Pure.
 */
import type { z } from "zod";
import { envelopeSchema } from "../envelope/envelope.ts";
import { parseJson } from "../envelope/parse-json.ts";
import { INVALID_JOB_REASON, InvalidJobError } from "../errors/sending.ts";

/**
 * A message body as the consumer reads it: snake_case, as on the wire. Every field is what
 * envelopeSchema accepts; the payload is the schema's *input*, since the consumer parses it
 * again (a schema that transforms would otherwise be applied twice).
 */
export interface JobEnvelope<S extends z.ZodType = z.ZodType> {
  /** The job's identity: the fence key together with the consumer's name. 1–255 characters, not blank. */
  readonly job_id: string;
  /** At most 255 characters; part of the job's fingerprint. */
  readonly tenant_id: string;
  /** At most 255 characters; the job id stands in when it is absent or blank. */
  readonly correlation_id?: string;
  readonly payload: z.input<S>;
}

/** What {@link jobEnvelope} builds an envelope from, in the producer's own camelCase. */
export interface JobFields<S extends z.ZodType> {
  readonly jobId: string;
  readonly tenantId: string;
  readonly payload: z.input<S>;
  readonly correlationId?: string;
}

/** A payload schema, or anything that carries one as `payload` (a consumer's definition). */
export type PayloadSource<S extends z.ZodType> = S | { readonly payload: S };

function schemaOf<S extends z.ZodType>(source: PayloadSource<S>): S {
  return typeof (source as { safeParse?: unknown }).safeParse === "function"
    ? (source as S)
    : (source as { readonly payload: S }).payload;
}

/**
 * Builds the envelope of one job and checks it as the consumer will: the envelope against
 * envelopeSchema, then the payload against the consumer's schema, both on the JSON the message
 * will actually carry (a Date becomes a string, an undefined property disappears), so a payload
 * that is only valid before serialisation is refused here rather than dead-lettered there.
 * Throws {@link InvalidJobError} naming every problem; returns the envelope with the payload as given.
 */
export function jobEnvelope<S extends z.ZodType>(
  source: PayloadSource<S>,
  fields: JobFields<S>,
): JobEnvelope<S> {
  const envelope: JobEnvelope<S> = {
    job_id: fields.jobId,
    tenant_id: fields.tenantId,
    ...(fields.correlationId !== undefined ? { correlation_id: fields.correlationId } : {}),
    payload: fields.payload,
  };
  checkWire(source, wireForm(envelope));
  return envelope;
}

/**
 * Checks an envelope as it will arrive (`wire`: its JSON parsed back) the way the consumer will:
 * against envelopeSchema, then its payload against the consumer's schema. Throws
 * {@link InvalidJobError} naming every problem; returns the payload as the schema parses it.
 */
export function checkWire<S extends z.ZodType>(source: PayloadSource<S>, wire: unknown): z.output<S> {
  const checked = envelopeSchema.safeParse(wire);
  if (!checked.success) {
    throw new InvalidJobError(INVALID_JOB_REASON.invalidEnvelope, issuesOf(checked.error));
  }

  let parsed: z.ZodSafeParseResult<unknown>;
  try {
    parsed = schemaOf(source).safeParse(checked.data.payload);
  } catch (error) {
    // The consumer's parse would throw the same way, and dead-letter the job as poison.
    throw new InvalidJobError(
      INVALID_JOB_REASON.invalidPayload,
      [`payload: the schema threw (${error instanceof Error ? error.message : String(error)})`],
      { cause: error },
    );
  }
  if (!parsed.success) {
    throw new InvalidJobError(INVALID_JOB_REASON.invalidPayload, issuesOf(parsed.error, "payload"));
  }
  return parsed.data as z.output<S>;
}

/**
 * The envelope as the consumer will see it: through JSON and back. Throws
 * {@link InvalidJobError} when it cannot be written as JSON at all.
 */
export function wireForm(envelope: unknown): unknown {
  let text: string | undefined;
  try {
    text = JSON.stringify(envelope);
  } catch (error) {
    throw new InvalidJobError(
      INVALID_JOB_REASON.notJson,
      [`the job cannot be written as JSON (${error instanceof Error ? error.message : String(error)})`],
      { cause: error },
    );
  }
  if (text === undefined)
    throw new InvalidJobError(INVALID_JOB_REASON.notJson, ["the job is not a JSON value"]);
  return parseJson(text);
}

/** Zod's issues as `path: message`, at most ten and a count of the rest. */
export function issuesOf(error: z.ZodError, root?: string): string[] {
  const lines = error.issues.slice(0, 10).map((issue) => {
    const path = [...(root ? [root] : []), ...issue.path.map(String)].join(".");
    return `${path || "(root)"}: ${issue.message}`;
  });
  if (error.issues.length > 10) lines.push(`… ${error.issues.length - 10} more`);
  return lines;
}
