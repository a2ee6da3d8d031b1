/**
 * The flags that carry API parameters, and their validation with the API's own zod schemas
 * (shared/dead-letters/api-schemas.ts): a value the API would refuse is refused here, before any
 * call, with the schema's own message, and no bound is written down twice.
 *
 * Each flag names the API field it fills; a schema issue on that field is reported as the flag.
 */
import { type Command, Option, type OptionValues } from "commander";
import { z } from "zod";
import { API_LIMITS, bulkFilterSchema, operationSchema } from "../shared/dead-letters/api-schemas.ts";
import { DEAD_LETTER_STATUSES } from "../shared/dead-letters/status.ts";
import { ERROR_KINDS } from "../shared/errors/error-kind.ts";
import { UsageError } from "./errors.ts";
import { clean } from "./text.ts";

/** How a flag's value becomes the API field's. */
type FlagKind =
  /** Sent as typed (a query string, or a JSON string). */
  | "text"
  /** A JSON number in a body: "2.5" → 2.5, so the schema checks the number. */
  | "number"
  /** A flag without a value: "true" when given (the API's boolean query parameters). */
  | "switch"
  /** A flag without a value: JSON `true` in a body when given (the API's boolean body fields). */
  | "boolean";

interface FlagSpec {
  readonly flags: string;
  readonly description: string;
  readonly kind: FlagKind;
}

const text = (flags: string, description: string): FlagSpec => ({ flags, description, kind: "text" });

/** Every flag that carries an API field, by the field's name. */
export const API_FLAGS = {
  status: text("--status <status>", DEAD_LETTER_STATUSES.join(" | ")),
  consumer: text("--consumer <name>", "only this consumer's dead letters"),
  queue: text("--queue <url>", "only dead letters of this queue (URL as stored)"),
  error_kind: text("--error-kind <kind>", ERROR_KINDS.join(" | ")),
  tenant_id: text("--tenant <id>", "only this tenant_id"),
  job_id: text("--job-id <id>", "only this job_id"),
  correlation_id: text("--correlation-id <id>", "only this correlation_id"),
  created_after: text("--after <RFC3339>", "created at or after, e.g. 2026-01-31T00:00:00Z"),
  created_before: text("--before <RFC3339>", "created strictly before"),
  group: text("--group <hex>", "only this failure group (its 32 hex digits, from `groups` or `stats`)"),
  error_class: text("--error-class <class>", "only errors of this class (last_error.class)"),
  message: text("--message <text>", "only errors whose message contains this, case-insensitively"),
  limit: text("--limit <n>", "rows per page"),
  cursor: text("--cursor <c>", "start after a previous page (its next_cursor; same filters)"),
  delay_seconds: {
    flags: "--delay <seconds>",
    description: `deliver the replayed message(s) this much later, 0–${API_LIMITS.maxDelaySeconds} (not on FIFO queues)`,
    kind: "number",
  },
  rate_per_second: {
    flags: "--rate <per-second>",
    description: `rows handled per second at most (up to ${API_LIMITS.maxRatePerSecond})`,
    kind: "number",
  },
  // Not --token: that is the bearer token of every command.
  token: text("--confirm <plan-token>", "the token a --plan printed: starts exactly the planned set"),
  reason: text("--reason <text>", `why (recorded as discard_reason; ≤ ${API_LIMITS.maxReasonLength} chars)`),
  include_resolved: {
    flags: "--include-resolved",
    description: "also groups with nothing pending",
    kind: "switch",
  },
  kind: text("--kind <kind>", operationSchema.shape.kind.options.join(" | ")),
  force_outlived: {
    flags: "--force-outlived",
    description: "replay `outlived` dead letters too (their jobs may have been applied); needs --reason",
    kind: "boolean",
  },
} as const satisfies Record<string, FlagSpec>;

/** A field some flag carries. */
export type ApiField = keyof typeof API_FLAGS;

/** The fields of the dead-letter filter (list, plan, start), in help order: the API's own. */
export const FILTER_FIELDS = Object.keys(bulkFilterSchema.shape) as Array<
  keyof typeof bulkFilterSchema.shape & ApiField
>;

/** The flag of an API field, as the operator types it: "--error-kind". */
export function flagName(field: ApiField): string {
  return new Option(API_FLAGS[field].flags).long ?? field;
}

/**
 * Adds the flags of `fields` to `command`, under the help heading `heading`. `descriptions`
 * replaces a flag's generic description where the command says more (a limit's range).
 */
export function addApiFlags(
  command: Command,
  heading: string,
  fields: readonly ApiField[],
  descriptions: Partial<Record<ApiField, string>> = {},
): Command {
  for (const field of fields) {
    const spec = API_FLAGS[field];
    command.addOption(new Option(spec.flags, descriptions[field] ?? spec.description).helpGroup(heading));
  }
  return command;
}

/** Adds a flag the CLI itself interprets (no API field), under `heading`. */
export function addCliFlag(command: Command, heading: string, flags: string, description: string): Command {
  return command.addOption(new Option(flags, description).helpGroup(heading));
}

/** The API fields of `fields` the operator gave, keyed by field name, converted per their kind. */
export function collect(options: OptionValues, fields: readonly ApiField[]): Record<string, unknown> {
  const values: Record<string, unknown> = {};
  for (const field of fields) {
    const spec: FlagSpec = API_FLAGS[field];
    const value = rawValue(options, field);
    if (value === undefined) continue;
    if (spec.kind === "switch") values[field] = value === true ? "true" : "false";
    else if (spec.kind === "boolean") values[field] = value === true;
    else if (spec.kind === "number") values[field] = toNumber(String(value));
    else values[field] = value;
  }
  return values;
}

/** The names of the flags among `fields` the operator gave ("--consumer", …). */
export function given(options: OptionValues, fields: readonly ApiField[]): string[] {
  return fields.filter((field) => rawValue(options, field) !== undefined).map(flagName);
}

/** The flags among `fields` the operator gave, with their values as typed: ["--consumer", "x", …]. */
export function asTyped(options: OptionValues, fields: readonly ApiField[]): string[] {
  return fields.flatMap((field) => {
    const value = rawValue(options, field);
    if (value === undefined) return [];
    return API_FLAGS[field].kind === "switch" ? [flagName(field)] : [flagName(field), String(value)];
  });
}

function rawValue(options: OptionValues, field: ApiField): unknown {
  return options[new Option(API_FLAGS[field].flags).attributeName()];
}

/** A decimal number as a number; anything else stays text, for the schema to refuse as not a number. */
function toNumber(raw: string): number | string {
  return /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/.test(raw.trim()) ? Number(raw) : raw;
}

/**
 * `input` validated by `schema`, the API's own: its output (defaults filled in), or a
 * {@link UsageError} naming the flag of each refused field with the schema's message. `leads`
 * replaces a field's flag name at the start of its message ("discard needs --reason").
 */
export function validate<S extends z.ZodType>(
  schema: S,
  input: unknown,
  leads: Partial<Record<ApiField, string>> = {},
): z.output<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const lines = result.error.issues.map((issue) => {
    const field = [...issue.path]
      .reverse()
      .find((key): key is ApiField => typeof key === "string" && key in API_FLAGS);
    if (field === undefined) return issue.message;
    const value = issue.path.reduce<unknown>(
      (at, key) =>
        typeof at === "object" && at !== null ? (at as Record<PropertyKey, unknown>)[key] : undefined,
      input,
    );
    const got = value === undefined ? "" : ` (got ${clean(JSON.stringify(value))})`;
    return `${leads[field] ?? flagName(field)}: ${issue.message}${got}`;
  });
  throw new UsageError(lines.join("\n"));
}

/** Seconds between two polls of --watch: the CLI's own setting, not an API parameter. */
const intervalSchema = z.number().min(0.2).max(60);
const DEFAULT_INTERVAL_SECONDS = 1;

/** Adds --watch and --interval to a command that can follow an operation. */
export function addWatchFlags(command: Command, heading: string, what: string): Command {
  addCliFlag(
    command,
    heading,
    "--watch",
    `${what}; a progress bar on a terminal, a line per change otherwise`,
  );
  return addCliFlag(
    command,
    heading,
    "--interval <seconds>",
    `seconds between polls while watching (default ${DEFAULT_INTERVAL_SECONDS})`,
  );
}

/** Whether to watch, and how often to poll; refuses a bad --interval. */
export function watchSettings(options: OptionValues): {
  readonly watch: boolean;
  readonly intervalMs: number;
} {
  const raw: unknown = options.interval;
  let seconds = DEFAULT_INTERVAL_SECONDS;
  if (raw !== undefined) {
    const result = intervalSchema.safeParse(toNumber(String(raw)));
    if (!result.success) {
      throw new UsageError(
        `--interval: ${result.error.issues[0]?.message} (got ${clean(JSON.stringify(raw))})`,
      );
    }
    seconds = result.data;
  }
  return { watch: options.watch === true, intervalMs: Math.round(seconds * 1000) };
}
