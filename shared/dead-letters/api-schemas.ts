/**
 * The dead-letter API's request and response shapes (docs/api.md), as zod schemas. The handlers
 * validate with them and the OpenAPI document is generated from them, so the two cannot drift.
 */
import { z } from "zod";
import type { BulkFilterColumns } from "../db/queries/dead-letter-filter.ts";
import { BODY_FORMS } from "../db/stored-body.ts";
import { characters, JOB_ID_MAX_LENGTH, storableText } from "../envelope/envelope.ts";
import { ERROR_KINDS } from "../errors/error-kind.ts";
import { DEAD_LETTER_STATUSES } from "./status.ts";
import { canonicalInstant, timestampSchema } from "./timestamp.ts";

/** Named bounds of the API. */
export const API_LIMITS = Object.freeze({
  /** Rows per list page by default. */
  defaultPageSize: 50,
  /** Rows per list page at most. */
  maxPageSize: 500,
  /** Sample rows a plan returns. */
  planSample: 10,
  /** Failure groups a stats response shows per consumer (the groups endpoint lists them all). */
  statsGroupsPerConsumer: 20,
  /** Groups per page of the groups endpoint. */
  maxGroups: 500,
  /** Operations per page of the operations list. */
  maxOperations: 100,
  /** SQS DelaySeconds at most (15 minutes). */
  maxDelaySeconds: 900,
  /** Rows per second a bulk operation may be paced at, at most. */
  maxRatePerSecond: 1000,
  /**
   * Rows per second a bulk operation may be paced at, at least: one row every 100 seconds. The
   * table's CHECK (migration 0029) holds the same floor.
   */
  minRatePerSecond: 0.01,
  /** Default pace of a bulk replay, messages per second: gentle on the consumer's database. */
  defaultReplayRate: 50,
  /** Default pace of a bulk discard, rows per second (nothing is sent). */
  defaultDiscardRate: 200,
  /** A discard reason, in characters (the database's bound). */
  maxReasonLength: 2000,
});

/**
 * From 1 to `max` characters (code points) once leading and trailing white space is trimmed, as a
 * regular expression (with the `u` flag: `[\s\S]` is then one code point, and `\s` is exactly what
 * `String.prototype.trim` removes), so the document's pattern is the check itself.
 */
function trimmedCharacters(max: number): RegExp {
  return new RegExp(`^\\s*[^\\s](?:[\\s\\S]{0,${max - 2}}[^\\s])?\\s*$`, "u");
}

/**
 * A value this API issued and signed (a list cursor, a plan token): `base64url.base64url`, at most
 * `max` characters (ASCII, so zod's count and JSON Schema's agree). Only the signature check says
 * whether it is one; this is its shape.
 */
const sealedText = (max: number) =>
  z
    .string()
    .max(max)
    .regex(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/, "is not a value this API issued (base64url.base64url)");

/** A string filter: text PostgreSQL can compare as sent, from 1 to `max` characters (code points). */
const filterText = (max: number) => storableText.pipe(characters(1, max));

/**
 * A whole number in a query string: decimal digits only. `z.coerce.number()` took `0x10`, `0b11`,
 * `1e1`, `+5` and ` 5 ` as numbers; a client reading the document sees an integer, whose query
 * form is its digits.
 */
export function queryInteger(min: number, max: number, fallback: number, description: string) {
  const schema = z
    .string()
    .regex(/^[0-9]+$/, "must be a whole number in decimal digits")
    .transform(Number)
    .pipe(z.number().int().min(min).max(max))
    .default(fallback)
    .describe(description);
  QUERY_INTEGERS.set(schema, { minimum: min, maximum: max, default: fallback });
  return schema;
}

/**
 * The bounds of each {@link queryInteger}, for the document: zod describes the schema's input as
 * the string it reads, and drops the default of a transformed value; the OpenAPI generator shows it
 * as the integer a client sends (`type: integer`, these bounds and default).
 */
export const QUERY_INTEGERS = new WeakMap<
  z.core.$ZodType,
  { readonly minimum: number; readonly maximum: number; readonly default: number }
>();

/**
 * A filter's timestamp: as the document describes it, read as the instant it names (canonical UTC
 * text), so two spellings of one instant are one filter.
 */
const timestamp = timestampSchema.transform(canonicalInstant);

/** What the timestamp pattern says, in words. */
const TIMESTAMP_IN_WORDS =
  "RFC 3339 with an offset or Z (`2026-03-01T12:00:00Z`, `2026-03-01T13:00:00.5+01:00`), from year 0001, with an offset of at most ±15:59 and at most nine fraction digits (PostgreSQL's range).";

/** A dead letter's id. */
export const deadLetterIdSchema = z
  .uuid()
  // PostgreSQL prints uuids in lower case; the id a caller sends is compared with what it returns.
  .transform((id) => id.toLowerCase())
  .describe("The dead letter's id (a UUID).");

/** A failure group's id: its error fingerprint as 32 lower-case hex digits. */
export const groupIdSchema = z
  .string()
  .regex(/^[0-9a-fA-F]{32}$/, "a group is 32 hex digits")
  .transform((hex) => hex.toLowerCase());

/** Filters shared by the list and bulk operations. Every one narrows; none is required. */
const filterFields = {
  consumer: filterText(128).optional().describe("Only this consumer's dead letters."),
  queue: filterText(2048).optional().describe("Only dead letters of this queue (URL, as stored)."),
  error_kind: z.enum(ERROR_KINDS).optional(),
  tenant_id: filterText(255).optional(),
  job_id: filterText(JOB_ID_MAX_LENGTH).optional(),
  correlation_id: filterText(255).optional(),
  created_after: timestamp.optional().describe(`Created at or after this instant. ${TIMESTAMP_IN_WORDS}`),
  created_before: timestamp
    .optional()
    .describe(`Created strictly before this instant. ${TIMESTAMP_IN_WORDS}`),
  group: groupIdSchema
    .optional()
    .describe("Only this failure group (its fingerprint, from stats or groups)."),
  error_class: filterText(200).optional().describe("Only errors of this class (last_error.class)."),
  message: storableText
    .pipe(characters(3, 200))
    .optional()
    .describe("Only errors whose message contains this text, case-insensitively (3–200 characters)."),
  // Exactly the filters the reads apply: a field added here and not there fails the typecheck.
} satisfies Record<keyof BulkFilterColumns, z.ZodType>;

/** Query of `GET /v1/core/dead-letters`. */
export const listQuerySchema = z
  .object({
    status: z.enum(DEAD_LETTER_STATUSES).optional(),
    ...filterFields,
    limit: queryInteger(
      1,
      API_LIMITS.maxPageSize,
      API_LIMITS.defaultPageSize,
      `Rows per page, 1–${API_LIMITS.maxPageSize}, in decimal digits.`,
    ),
    cursor: sealedText(512)
      .optional()
      .describe(
        "next_cursor of the previous page, with the same filters. Opaque and signed: any other value, or one sent with other filters, is refused (400).",
      ),
  })
  .strict();

/** A list query after validation. */
export type ListQuery = z.output<typeof listQuerySchema>;
/** The filter part of a list query. */
export type DeadLetterFilter = Omit<ListQuery, "limit" | "cursor">;

/** Filter of a bulk operation: only pending dead letters are acted on, so status is not a filter. */
export const bulkFilterSchema = z.object(filterFields).strict();

/** A bulk operation's filter after validation. */
export type BulkFilter = z.output<typeof bulkFilterSchema>;

/** SQS DelaySeconds for a replayed message: 0–900 (not on FIFO queues, which take no per-message delay). */
const delaySeconds = z
  .number()
  .int()
  .min(0)
  .max(API_LIMITS.maxDelaySeconds)
  .describe(
    "Deliver the replayed message this many seconds later (SQS DelaySeconds, 0–900; standard queues only).",
  );

/** Replay dead letters of kind `outlived` too (docs/design.md §7.2); only with a reason. */
const forceOutlived = z
  .boolean()
  .default(false)
  .describe(
    "Replay a dead letter of kind `outlived` anyway: a copy older than its job's fence lifetime whose job has no fence, which may have been applied already and its fence cleaned. Requires `reason`; without it such a row is refused (409, reason `outlived`) or, in a bulk replay, skipped.",
  );

/** What a reason must be, in words (the patterns say it too). */
const REASON_IN_WORDS = `1–${API_LIMITS.maxReasonLength} characters once leading and trailing white space is trimmed (it is stored trimmed), with at least one letter, digit, punctuation mark or symbol; no U+0000 and no unpaired surrogate.`;

/** An operator's reason (a discard's, a forced replay's): required, visible, bounded. */
const reasonText = storableText
  // Blank, or only invisible characters (zero-width spaces and the like), is no reason.
  .pipe(z.string().regex(/[\p{L}\p{N}\p{P}\p{S}]/u, "a reason must say something"))
  .pipe(
    z
      .string()
      .regex(
        trimmedCharacters(API_LIMITS.maxReasonLength),
        `must be at most ${API_LIMITS.maxReasonLength} characters once trimmed`,
      ),
  )
  .transform((reason) => reason.trim());

/** Why an operator forces the replay of outlived dead letters: required with force_outlived. */
const forceReason = reasonText
  .optional()
  .describe(
    `With force_outlived, and only then: why the job is known not to have been applied (recorded as discard_reason of each outlived dead letter replayed, beside resolved_by). ${REASON_IN_WORDS}`,
  );

/**
 * {@link refineForce} as JSON Schema, for the document: with `force_outlived: true` a `reason` is
 * required; without it (false or absent) a `reason` is refused.
 */
const FORCE_NEEDS_REASON = {
  if: { properties: { force_outlived: { const: true } }, required: ["force_outlived"] },
  // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then/else keywords, never awaited
  then: { required: ["reason"] },
  else: { not: { required: ["reason"] } },
};

/** force_outlived and reason come together: a forced replay says why, and a reason forces nothing else. */
function refineForce(
  body: { force_outlived: boolean; reason?: string | undefined },
  ctx: z.RefinementCtx,
): void {
  if (body.force_outlived && body.reason === undefined) {
    ctx.addIssue({ code: "custom", path: ["reason"], message: "force_outlived needs a reason" });
  }
  if (!body.force_outlived && body.reason !== undefined) {
    ctx.addIssue({
      code: "custom",
      path: ["reason"],
      message: "a replay takes a reason only with force_outlived",
    });
  }
}

/** Body of `POST /v1/core/dead-letters/{id}/replay`. */
export const replayBodySchema = z
  .object({ delay_seconds: delaySeconds.default(0), force_outlived: forceOutlived, reason: forceReason })
  .strict()
  .superRefine(refineForce)
  .meta({
    description:
      "Optional: a delay; force_outlived with a reason for an `outlived` dead letter. The stored envelope is sent unchanged.",
    ...FORCE_NEEDS_REASON,
  });

/** Pace of a bulk operation, rows per second. */
const rate = (fallback: number) =>
  z
    .number()
    .min(API_LIMITS.minRatePerSecond)
    .max(API_LIMITS.maxRatePerSecond)
    .default(fallback)
    .describe(
      `Rows handled per second at most (default ${fallback}; from ${API_LIMITS.minRatePerSecond}, one row every ${1 / API_LIMITS.minRatePerSecond} seconds, to ${API_LIMITS.maxRatePerSecond}).`,
    );

const confirmationToken = sealedText(1024)
  .optional()
  .describe(
    "The plan's token: required when the set is large or is every pending dead letter. Opaque and signed: a value the API did not issue, or issued for another filter or kind, is refused (400); an expired, stale or used one is a 409.",
  );

/** Body of `POST /v1/core/dead-letters/replay/plan`. */
export const replayPlanBodySchema = z
  .object({
    filter: bulkFilterSchema.default({}),
    delay_seconds: delaySeconds.default(0),
    force_outlived: z
      .boolean()
      .default(false)
      .describe("Count `outlived` dead letters as sent, as a replay started with force_outlived would."),
  })
  .strict();

/** Body of `POST /v1/core/dead-letters/discard/plan`. */
export const discardPlanBodySchema = z.object({ filter: bulkFilterSchema.default({}) }).strict();

/** Body of `POST /v1/core/dead-letters/replay`: start a bulk replay. */
export const bulkReplayBodySchema = z
  .object({
    filter: bulkFilterSchema.default({}),
    token: confirmationToken,
    rate_per_second: rate(API_LIMITS.defaultReplayRate),
    delay_seconds: delaySeconds.default(0),
    force_outlived: forceOutlived,
    reason: forceReason,
  })
  .strict()
  .superRefine(refineForce)
  .meta(FORCE_NEEDS_REASON);

/**
 * The `Idempotency-Key` request header of every POST: 1–255 visible ASCII characters (no space),
 * chosen by the client, typically a UUID.
 */
export const idempotencyKeySchema = z
  .string()
  .min(1)
  .max(255)
  .regex(/^[\x21-\x7E]+$/, "must be visible ASCII characters (0x21–0x7E), no spaces")
  .describe(
    "Makes the request safe to send again: a repeat with the same key and the same request (method, path, validated body) within 24 hours gets the first successful response again, with `Idempotent-Replayed: true`, and does nothing; the same key with another request is refused (422); a repeat while the first is still running is refused (409, reason `idempotency-key-in-progress`). Keys are per caller (the token's `sub`). 1–255 visible ASCII characters, e.g. a UUID.",
  );

/** A bulk replay request after validation. */
export type BulkReplayRequest = z.output<typeof bulkReplayBodySchema>;

/** Why dead letters are discarded: required, visible, bounded. */
const discardReason = reasonText.describe(
  `Why the dead letter will never be replayed (recorded as discard_reason). ${REASON_IN_WORDS}`,
);

/** Body of `POST /v1/core/dead-letters/{id}/discard`. */
export const discardBodySchema = z.object({ reason: discardReason }).strict();

/** Body of `POST /v1/core/dead-letters/discard`: start a bulk discard. */
export const bulkDiscardBodySchema = z
  .object({
    filter: bulkFilterSchema.default({}),
    reason: discardReason,
    token: confirmationToken,
    rate_per_second: rate(API_LIMITS.defaultDiscardRate),
  })
  .strict();

/** A bulk discard request after validation. */
export type BulkDiscardRequest = z.output<typeof bulkDiscardBodySchema>;

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
  discard_reason: z
    .string()
    .nullable()
    .describe(
      "Why it was discarded; for an `outlived` dead letter replayed by force, why the operator forced it.",
    ),
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
  error_class: z.string().nullable().describe("last_error's class."),
  group: z.string().describe("The failure group (error fingerprint, 32 hex digits)."),
  replay_of: z
    .uuid()
    .nullable()
    .describe(
      "The replayed dead letter this one came from: a replay sent that one's body, the run failed again, and recorded this one. Null otherwise.",
    ),
  replay_failed_as: z
    .uuid()
    .nullable()
    .describe(
      "For a replayed dead letter whose replay's run failed again: the dead letter that failure recorded (whose replay_of is this one). Null otherwise.",
    ),
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
  steps: z
    .array(
      z.object({
        name: z.string().describe("The step's name in its consumer's definition."),
        position: z.number().int().describe("Its place in the job's run, from 1."),
        key: z.string().describe("The idempotency key its provider was given: look the call up there by it."),
        called_at: z.string().describe("When it was first called, RFC 3339."),
        recorded_at: z
          .string()
          .nullable()
          .describe(
            "When its result was recorded, RFC 3339; null: called and its answer never recorded (the provider may have acted: look the key up there).",
          ),
        fingerprint: z
          .string()
          .nullable()
          .describe(
            "The fingerprint (hex) of the job that recorded it; another body's under the same job_id on a conflict.",
          ),
        result: z
          .unknown()
          .describe("The step's result, as its schema accepted it; null while none was recorded."),
      }),
    )
    .describe(
      "The job's steps so far, oldest first: calls outside the database and what each recorded. A failure of the work undoes none of them; compensating is the consumer author's decision.",
    ),
});

/** Response of the list endpoint. */
export const listResponseSchema = z.object({
  items: z.array(deadLetterSummarySchema),
  next_cursor: z.string().nullable().describe("Pass as cursor for the next page; null on the last page."),
});

/** A failure group: dead letters of one consumer that failed the same way. */
export const groupSchema = z.object({
  consumer: z.string(),
  group: z.string().describe("The error fingerprint, 32 hex digits: the filter `group`."),
  error_class: z.string().nullable(),
  pending: z.number().int().describe("Dead letters of the group still pending review."),
  total: z.number().int().describe("Dead letters of the group ever recorded."),
  first_seen: z.string(),
  last_seen: z.string(),
  sample: z.object({ id: z.uuid(), message: z.string() }).describe("The group's first dead letter."),
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
  groups: z
    .array(groupSchema)
    .describe(
      `The biggest failure groups with dead letters pending, at most ${API_LIMITS.statsGroupsPerConsumer} per consumer.`,
    ),
});

/** Response of a single replay. */
export const replayResponseSchema = z.object({
  id: z.uuid(),
  status: z.enum(["replayed", "superseded"]),
  message_id: z
    .string()
    .nullable()
    .describe("The SQS MessageId of the replayed message; null when superseded."),
  note: z
    .string()
    .optional()
    .describe(
      "Present only when the body sent is not JSON, or not a valid job envelope: what will become of it, in words (the consumer refuses it as poison again and records a new dead letter).",
    ),
});

/** Response of a discard. */
export const discardResponseSchema = z.object({
  id: z.uuid(),
  status: z.literal("discarded"),
  reason: z.string(),
});

/** Query of `GET /v1/core/dead-letters/groups`. */
export const groupsQuerySchema = z
  .object({
    consumer: filterText(128).optional(),
    error_class: filterText(200).optional(),
    include_resolved: z
      .enum(["true", "false"])
      .default("false")
      .transform((v) => v === "true")
      .describe("Also groups with nothing pending."),
    limit: queryInteger(
      1,
      API_LIMITS.maxGroups,
      API_LIMITS.defaultPageSize,
      `Groups per page, 1–${API_LIMITS.maxGroups}, in decimal digits.`,
    ),
  })
  .strict();

/** Response of the groups endpoint: biggest pending first. */
export const groupsResponseSchema = z.object({ items: z.array(groupSchema) });

/** What a bulk operation would act on, and the token that confirms it. */
export const planResponseSchema = z.object({
  kind: z.enum(["replay", "discard"]),
  matched: z.number().int().describe("Pending dead letters the filter matches now."),
  pending_total: z.number().int().describe("Pending dead letters in all."),
  would_send: z
    .number()
    .int()
    .optional()
    .describe(
      "Replay: how many would be sent (matched minus superseded, conflicts and, unless forced, outlived).",
    ),
  superseded: z
    .number()
    .int()
    .optional()
    .describe("Replay: how many are of jobs already applied (resolved, not sent)."),
  conflicts: z
    .number()
    .int()
    .optional()
    .describe("Replay: how many carry another job than the one applied under their job_id (left pending)."),
  outlived: z
    .number()
    .int()
    .optional()
    .describe(
      "Replay: how many are of kind `outlived` with no fence (skipped and left pending unless the replay is started with force_outlived and a reason).",
    ),
  unreadable: z
    .number()
    .int()
    .optional()
    .describe(
      "Replay: of would_send, how many carry no readable job (job_fingerprint null: a body that is not JSON or not a valid job envelope). Sent unchanged, they will be refused as poison again and recorded as new dead letters.",
    ),
  note: z
    .string()
    .optional()
    .describe("Replay: present when unreadable is not 0; what will become of those, in words."),
  sample: z.array(deadLetterSummarySchema),
  confirmation_required: z
    .boolean()
    .describe("Whether starting it needs the token (a large set, or every pending row)."),
  token: z
    .string()
    .nullable()
    .describe(
      "Binds this filter and this matched set; pass it to start the operation. Null when nothing matches.",
    ),
  token_expires_at: z.string().nullable(),
});

/** A bulk operation. */
export const operationSchema = z.object({
  id: z.uuid(),
  kind: z.enum(["replay", "discard"]),
  status: z.enum(["running", "completed", "cancelled", "failed"]),
  filter: z.record(z.string(), z.unknown()),
  reason: z
    .string()
    .nullable()
    .describe(
      "A discard's reason; a replay's with force_outlived (why its outlived dead letters may be sent).",
    ),
  force_outlived: z.boolean().describe("A replay that sends `outlived` dead letters too, with its reason."),
  delay_seconds: z.number().int(),
  rate_per_second: z.number(),
  planned: z.number().int().describe("Rows in the planned set."),
  processed: z.number().int().describe("Rows handled so far (each once)."),
  replayed: z.number().int(),
  superseded: z.number().int(),
  discarded: z.number().int(),
  conflicts: z.number().int(),
  failed: z.number().int().describe("Sends SQS refused; those rows stay pending (see skipped)."),
  last_error: z.string().nullable().describe("Why the last chunk could not run, while it is retried."),
  submitted_by: z.string(),
  submitted_at: z.string(),
  cancelled_by: z.string().nullable(),
  finished_at: z.string().nullable(),
  updated_at: z.string(),
  next_run_at: z.string(),
});

/** A started operation: the operation, and what its plan left out. */
export const operationStartSchema = operationSchema.extend({
  newer_not_included: z
    .number()
    .int()
    .describe(
      "Pending dead letters the filter matched at the start that were recorded after the plan's last row: not part of the set the plan's token confirmed, so not included and left pending (plan again to include them). Counted at the start; 0 for a start without a token, whose set is everything the filter matched then.",
    ),
});

/** One operation with what it left pending. */
export const operationDetailSchema = operationSchema.extend({
  skipped: z.array(
    z.object({
      dead_letter_id: z.uuid(),
      reason: z.enum(["conflict", "send-failed", "foreign-queue", "unproven-follow-up", "outlived"]),
      detail: z.string(),
      at: z.string(),
    }),
  ),
});

/** Query of `GET /v1/core/dead-letters/operations`. */
export const operationsQuerySchema = z
  .object({
    status: z.enum(["running", "completed", "cancelled", "failed"]).optional(),
    kind: z.enum(["replay", "discard"]).optional(),
    limit: queryInteger(
      1,
      API_LIMITS.maxOperations,
      20,
      `Operations per page, 1–${API_LIMITS.maxOperations}, in decimal digits.`,
    ),
  })
  .strict();

/** Response of the operations list: newest first. */
export const operationsResponseSchema = z.object({ items: z.array(operationSchema) });
