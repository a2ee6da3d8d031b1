/**
 * The dead-letter API's request and response shapes (SPEC §6), as zod schemas. The handlers
 * validate with them and the OpenAPI document is generated from them, so the two cannot drift.
 */
import { z } from "zod";
import { JOB_ID_MAX_LENGTH, storableText } from "../envelope/envelope.ts";
import { ERROR_KINDS } from "./error-kind.ts";
import { DEAD_LETTER_STATUSES } from "./status.ts";
import { BODY_FORMS } from "./stored-body.ts";
import { timestampSchema } from "./timestamp.ts";

/** Named bounds of the API. */
export const API_LIMITS = Object.freeze({
  /** Rows per list page by default. */
  defaultPageSize: 50,
  /** Rows per list page at most. */
  maxPageSize: 500,
  /** Dead letters one bulk replay call handles at most; a cursor continues. */
  maxBulkReplay: 500,
  /** Sample rows a dry run returns. */
  dryRunSample: 10,
  /** A discard reason, in characters (the database's bound). */
  maxReasonLength: 2000,
});

/** A string filter: text PostgreSQL can compare as sent, bounded. */
const filterText = (max: number) => storableText.pipe(z.string().min(1).max(max));

const timestamp = timestampSchema;

/** A dead letter's id. */
export const deadLetterIdSchema = z
  .uuid()
  // PostgreSQL prints uuids in lower case; the id a caller sends is compared with what it returns.
  .transform((id) => id.toLowerCase())
  .describe("The dead letter's id (a UUID).");

/** Filters shared by the list and bulk replay. Every one narrows; none is required. */
const filterFields = {
  consumer: filterText(128).optional().describe("Only this consumer's dead letters."),
  queue: filterText(2048).optional().describe("Only dead letters of this queue (URL, as stored)."),
  error_kind: z.enum(ERROR_KINDS).optional(),
  tenant_id: filterText(255).optional(),
  job_id: filterText(JOB_ID_MAX_LENGTH).optional(),
  correlation_id: filterText(255).optional(),
  created_after: timestamp.optional().describe("Created at or after this instant (RFC 3339)."),
  created_before: timestamp.optional().describe("Created strictly before this instant (RFC 3339)."),
};

/** Query of `GET /v1/core/dead-letters`. */
export const listQuerySchema = z
  .object({
    status: z.enum(DEAD_LETTER_STATUSES).optional(),
    ...filterFields,
    limit: z.coerce
      .number()
      .int()
      .min(1)
      .max(API_LIMITS.maxPageSize)
      .default(API_LIMITS.defaultPageSize)
      .describe(`Rows per page, 1–${API_LIMITS.maxPageSize}.`),
    cursor: z
      .string()
      .max(512)
      .optional()
      .describe("next_cursor of the previous page, with the same filters."),
  })
  .strict();

/** A list query after validation. */
export type ListQuery = z.output<typeof listQuerySchema>;
/** The filter part of a list query. */
export type DeadLetterFilter = Omit<ListQuery, "limit" | "cursor">;

/** Filter of a bulk replay: only pending dead letters are replayed, so status is not a filter. */
export const bulkReplayFilterSchema = z.object(filterFields).strict();

/** Body of `POST /v1/core/dead-letters/replay`. */
export const bulkReplayBodySchema = z
  .object({
    filter: bulkReplayFilterSchema.default({}),
    all: z
      .boolean()
      .default(false)
      .describe("Required to replay with a filter that matches every pending dead letter."),
    dry_run: z.boolean().default(false).describe("Count and sample the matches; change nothing."),
    limit: z.number().int().min(1).max(API_LIMITS.maxBulkReplay).default(API_LIMITS.maxBulkReplay),
    cursor: z
      .string()
      .max(512)
      .optional()
      .describe("next_cursor of the previous call, with the same filter."),
  })
  .strict();

/** A bulk replay request after validation. */
export type BulkReplayRequest = z.output<typeof bulkReplayBodySchema>;

/** Body of `POST /v1/core/dead-letters/{id}/discard`. */
export const discardBodySchema = z
  .object({
    reason: z
      .string()
      .trim()
      .min(1, "a reason is required")
      .max(API_LIMITS.maxReasonLength)
      // Only invisible characters (zero-width spaces and the like) are no reason either.
      .regex(/[\p{L}\p{N}\p{P}\p{S}]/u, "a reason must say something")
      .pipe(storableText)
      .describe("Why the dead letter will never be replayed (recorded as discard_reason)."),
  })
  .strict();

const lastError = z.object({ class: z.string(), message: z.string(), stack: z.string().optional() });

/** A dead letter in a list: everything but the payload and message attributes. */
export const deadLetterSummarySchema = z.object({
  id: z.uuid(),
  job_id: z.string(),
  consumer: z.string(),
  queue: z.string(),
  tenant_id: z.string().nullable(),
  attempts: z.number().int(),
  error_kind: z.enum(ERROR_KINDS),
  last_error: lastError,
  status: z.enum(DEAD_LETTER_STATUSES),
  discard_reason: z.string().nullable(),
  correlation_id: z.string(),
  created_at: z.string().describe("RFC 3339 with microseconds."),
  resolved_at: z.string().nullable(),
  resolved_by: z.string().nullable(),
  body_form: z
    .enum(BODY_FORMS)
    .describe("How the body is stored: text, or utf16 for a body holding U+0000 or a lone surrogate."),
  job_fingerprint: z
    .string()
    .nullable()
    .describe("Hex fingerprint of the job the message carried (tenant_id and payload), when readable."),
  fence_fingerprint: z
    .string()
    .nullable()
    .describe("Conflicts: hex fingerprint of the applied job whose job_id the message shares."),
});

/** A whole dead letter. */
export const deadLetterSchema = deadLetterSummarySchema.extend({
  body: z.string().describe("The message body exactly as received; what a replay sends."),
  payload: z
    .record(z.string(), z.unknown())
    .nullable()
    .describe(
      "The envelope as JSON when the body is a JSON object PostgreSQL's jsonb accepts; null otherwise.",
    ),
  message_attributes: z.record(z.string(), z.unknown()),
  attempt_history: z
    .array(
      z.object({
        attempt: z.number().int().describe("The run's number: 1, then one more after each recorded failure."),
        at: z.string().describe("When it ended, RFC 3339."),
        receive_count: z.number().int().describe("The delivery's ApproximateReceiveCount."),
        kind: z
          .enum(["failure", "interruption"])
          .describe("failure: the work threw; interruption: the invocation ended while it ran."),
        error: z.object({ name: z.string(), message: z.string() }),
      }),
    )
    .describe("The failed runs and interruptions before the dead letter, oldest first (at most 20)."),
});

/** Response of the list endpoint. */
export const listResponseSchema = z.object({
  items: z.array(deadLetterSummarySchema),
  next_cursor: z.string().nullable().describe("Pass as cursor for the next page; null on the last page."),
});

/** Response of the stats endpoint. */
export const statsResponseSchema = z.object({
  counts: z.array(
    z.object({
      consumer: z.string(),
      status: z.enum(DEAD_LETTER_STATUSES),
      error_kind: z.enum(ERROR_KINDS),
      count: z.number().int(),
    }),
  ),
  oldest_pending: z
    .array(z.object({ consumer: z.string(), id: z.uuid(), created_at: z.string() }))
    .describe("The oldest pending dead letter of each consumer that has one, oldest first."),
});

/** Response of a single replay. */
export const replayResponseSchema = z.object({
  id: z.uuid(),
  status: z.enum(["replayed", "superseded"]),
  message_id: z
    .string()
    .nullable()
    .describe("The SQS MessageId of the replayed message; null when superseded."),
});

/** Response of a discard. */
export const discardResponseSchema = z.object({
  id: z.uuid(),
  status: z.literal("discarded"),
  reason: z.string(),
});

/** Per-dead-letter outcome of a bulk replay. */
export const bulkOutcomeSchema = z.object({
  id: z.uuid(),
  outcome: z.enum(["replayed", "superseded", "conflict", "failed"]),
  error: z.string().optional(),
});

/** Response of a bulk replay (or its dry run). */
export const bulkReplayResponseSchema = z.object({
  dry_run: z.boolean(),
  matched: z
    .number()
    .int()
    .describe("Pending dead letters the filter matches (dry run: all of them; otherwise this call's)."),
  would_send: z
    .number()
    .int()
    .optional()
    .describe("Dry run: how many a real run would send (matched minus superseded and conflicts)."),
  conflicts: z
    .number()
    .int()
    .optional()
    .describe("Dry run: how many carry another job than the one applied under their job_id (not sent)."),
  sample: z.array(deadLetterSummarySchema).optional(),
  outcomes: z.array(bulkOutcomeSchema).optional(),
  next_cursor: z.string().nullable(),
});
