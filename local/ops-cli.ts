/**
 * The ops CLI (`npm run ops -- …`): lists, shows, counts, replays and discards dead letters through
 * the management API (SPEC §6) with a bearer token. `scripts/ops.ts` is its thin entry point; the
 * logic lives here so tests can run it in-process with captured output.
 *
 * Exit codes: 0 done; 1 the API refused or could not be reached, or a bulk replay had failures;
 * 2 usage or configuration error (bad flags, no API URL, no token).
 *
 * Values that come from dead letters (job ids, payloads, error messages) were written by whoever
 * produced the message: human output escapes control and bidi characters so a crafted value cannot
 * rewrite the operator's terminal. `--json` prints the API's bodies verbatim.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { type ParseArgsOptionsConfig, parseArgs } from "node:util";
import type { z } from "zod";
import {
  API_LIMITS,
  type bulkReplayResponseSchema,
  type deadLetterSchema,
  type deadLetterSummarySchema,
  type discardResponseSchema,
  type listResponseSchema,
  type replayResponseSchema,
  type statsResponseSchema,
} from "../shared/dead-letters/api-schemas.ts";
import { ERROR_KINDS } from "../shared/dead-letters/error-kind.ts";
import { DEAD_LETTER_STATUSES } from "../shared/dead-letters/status.ts";

/** Where the CLI writes and what it reads from its environment. */
export interface OpsIo {
  /** One line of standard output (no trailing newline). */
  out(line: string): void;
  /** One line of standard error (no trailing newline). */
  err(line: string): void;
  readonly env: Record<string, string | undefined>;
  /** @default globalThis.fetch */
  readonly fetch?: typeof fetch;
  /** The local stack's description. @default `<repo>/.local/stack.json` */
  readonly stackFile?: string;
}

/** Exit codes. */
export const EXIT = Object.freeze({ ok: 0, failed: 1, usage: 2 });

const PROGRAM = "npm run ops --";
const DEFAULT_STACK_FILE = join(import.meta.dirname, "..", ".local", "stack.json");
/** How long one API call may take; a bulk call sends up to 500 messages. */
const REQUEST_TIMEOUT_MS = 120_000;
const BASE_PATH = "/v1/core/dead-letters";

type DeadLetterSummary = z.output<typeof deadLetterSummarySchema>;
type DeadLetter = z.output<typeof deadLetterSchema>;
type ListResponse = z.output<typeof listResponseSchema>;
type StatsResponse = z.output<typeof statsResponseSchema>;
type ReplayResponse = z.output<typeof replayResponseSchema>;
type DiscardResponse = z.output<typeof discardResponseSchema>;
type BulkReplayResponse = z.output<typeof bulkReplayResponseSchema>;

// ---------------------------------------------------------------------------------------------
// Errors

/** Bad flags or arguments: exit 2 with the command's help. */
class UsageError extends Error {
  override name = "UsageError";
  readonly help: string | undefined;
  constructor(message: string, help?: string) {
    super(message);
    this.help = help;
  }
}

/** A failure already described for the operator: exit 1, lines to stderr. */
class CliFailure extends Error {
  override name = "CliFailure";
  readonly lines: readonly string[];
  constructor(lines: readonly string[]) {
    super(lines[0] ?? "failed");
    this.lines = lines;
  }
}

// ---------------------------------------------------------------------------------------------
// Options

const CONNECTION_OPTIONS = {
  api: { type: "string" },
  token: { type: "string" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} satisfies ParseArgsOptionsConfig;

/** CLI flag → API filter field. Shared by list and bulk replay. */
const FILTER_FLAGS = {
  consumer: "consumer",
  queue: "queue",
  "error-kind": "error_kind",
  tenant: "tenant_id",
  "job-id": "job_id",
  "correlation-id": "correlation_id",
  after: "created_after",
  before: "created_before",
} as const;
type FilterFlag = keyof typeof FILTER_FLAGS;

const FILTER_OPTIONS: ParseArgsOptionsConfig = Object.fromEntries(
  Object.keys(FILTER_FLAGS).map((flag) => [flag, { type: "string" }]),
);

const FILTER_HELP = [
  ["--consumer <name>", "only this consumer's dead letters"],
  ["--queue <url>", "only dead letters of this queue (URL as stored)"],
  ["--error-kind <kind>", ERROR_KINDS.join(" | ")],
  ["--tenant <id>", "only this tenant_id"],
  ["--job-id <id>", "only this job_id"],
  ["--correlation-id <id>", "only this correlation_id"],
  ["--after <RFC3339>", "created at or after, e.g. 2026-01-31T00:00:00Z"],
  ["--before <RFC3339>", "created strictly before"],
] as const;

const CONNECTION_HELP = [
  ["--api <url>", "API base URL (else $JOBFENCE_API_URL, else apiUrl of .local/stack.json)"],
  ["--token <jwt>", "bearer token (else $JOBFENCE_TOKEN, else the local stack's admin token)"],
  ["--json", "print the API's JSON response(s) instead of tables"],
  ["-h, --help", "this help"],
] as const;

// ---------------------------------------------------------------------------------------------
// Text helpers

/** C0/C1 controls, DEL, line/paragraph separators and bidi controls. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const UNSAFE_CHARS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** A value made safe for a terminal line: control and bidi characters escaped. */
export function clean(value: unknown): string {
  const text = value === null || value === undefined ? "-" : String(value);
  return text.replace(UNSAFE_CHARS, (c) => {
    if (c === "\n") return "\\n";
    if (c === "\t") return "\\t";
    if (c === "\r") return "\\r";
    return `\\u${(c.codePointAt(0) ?? 0).toString(16).padStart(4, "0")}`;
  });
}

/** Length in code points (what a terminal shows, near enough). */
function width(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

/** At most `max` code points; a cut value ends with "…". */
export function truncate(text: string, max: number): string {
  if (width(text) <= max) return text;
  return `${Array.from(text)
    .slice(0, Math.max(0, max - 1))
    .join("")}…`;
}

interface Column {
  readonly header: string;
  readonly max?: number;
  readonly align?: "left" | "right";
}

/** Aligned columns, two spaces apart; no trailing spaces. */
export function table(columns: readonly Column[], rows: readonly (readonly unknown[])[]): string[] {
  const cells = rows.map((row) =>
    columns.map((column, i) => {
      const text = clean(row[i]);
      return column.max === undefined ? text : truncate(text, column.max);
    }),
  );
  const widths = columns.map((column, i) =>
    Math.max(width(column.header), ...cells.map((row) => width(row[i] ?? ""))),
  );
  const line = (values: readonly string[]) =>
    values
      .map((value, i) => {
        const pad = " ".repeat(Math.max(0, (widths[i] ?? 0) - width(value)));
        return columns[i]?.align === "right" ? pad + value : value + pad;
      })
      .join("  ")
      .trimEnd();
  return [line(columns.map((c) => c.header)), ...cells.map(line)];
}

/** "2026-11-29T08:22:01.123456Z" → "2026-11-29T08:22:01Z" (still valid for --after). */
function shortTime(value: string | null | undefined): string {
  if (!value) return "-";
  const match = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.\d+)?Z$/.exec(value);
  return match ? `${match[1]}Z` : value;
}

/** A rough age: "3d 4h", "2h 5m", "7m", "12s". */
function age(from: string, now: number): string {
  const ms = now - Date.parse(from);
  if (!Number.isFinite(ms)) return "?";
  const s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86_400);
  const h = Math.floor((s % 86_400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${m}m`;
  if (m > 0) return `${m}m`;
  return `${s}s`;
}

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** A JSON body on one line (the API's are already; a pretty-printed one is folded). */
function oneLine(text: string): string {
  // A raw newline can only stand between tokens (JSON strings escape theirs), so this is exact.
  return text.trim().replace(/\r?\n\s*/g, "");
}

/** Pretty JSON; numbers parsed by {@link parseExact} come out as they were sent. */
function prettyJson(value: unknown): string {
  return JSON.stringify(value, null, 2) ?? "null";
}

type Reviver = (key: string, value: unknown, context?: { source?: string }) => unknown;
const rawJson = (JSON as unknown as { rawJSON?: (text: string) => unknown }).rawJSON;
const exactNumbers: Reviver = (_key, value, context) =>
  typeof value === "number" && context?.source !== undefined && context.source !== String(value) && rawJson
    ? rawJson(context.source)
    : value;

/**
 * JSON.parse that keeps numbers exactly as sent (a payload may carry integers beyond 2^53, which
 * the API preserves), where the runtime has JSON.rawJSON and the reviver's source text.
 */
function parseExact(text: string): unknown {
  return JSON.parse(text, exactNumbers as (key: string, value: unknown) => unknown);
}

// ---------------------------------------------------------------------------------------------
// Connection and HTTP

interface Connection {
  readonly baseUrl: string;
  readonly token: string;
  readonly fetch: typeof fetch;
}

interface StackFile {
  readonly apiUrl?: unknown;
  readonly tokens?: { readonly admin?: unknown };
}

async function readStack(path: string): Promise<StackFile | undefined> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as { code?: unknown }).code === "ENOENT") return undefined;
    throw new UsageError(`cannot read ${path}: ${(error as Error).message}`);
  }
  try {
    const parsed: unknown = JSON.parse(text);
    return typeof parsed === "object" && parsed !== null ? (parsed as StackFile) : {};
  } catch (error) {
    throw new UsageError(`${path} is not valid JSON: ${(error as Error).message}`);
  }
}

function nonEmpty(value: string | undefined): string | undefined {
  return value !== undefined && value.trim() !== "" ? value.trim() : undefined;
}

/** The API URL and token, from flags, then the environment, then the local stack. */
async function connect(values: Values, io: OpsIo): Promise<Connection> {
  const stackFile = io.stackFile ?? DEFAULT_STACK_FILE;
  let stack: StackFile | undefined;
  let stackRead = false;
  const loadStack = async () => {
    if (!stackRead) {
      stack = await readStack(stackFile);
      stackRead = true;
    }
    return stack;
  };

  let api = nonEmpty(str(values, "api")) ?? nonEmpty(io.env.JOBFENCE_API_URL);
  if (api === undefined) {
    const local = await loadStack();
    if (typeof local?.apiUrl === "string" && local.apiUrl !== "") {
      api = local.apiUrl;
    } else {
      throw new UsageError(
        [
          "no API URL: pass --api <url> or set JOBFENCE_API_URL",
          local === undefined
            ? `(no local stack: ${stackFile} does not exist; \`npm start\` writes it)`
            : `(${stackFile} has no apiUrl: that local stack does not serve the API)`,
        ].join("\n"),
      );
    }
  }
  let base: URL;
  try {
    base = new URL(api);
  } catch {
    throw new UsageError(`the API URL is not a URL: ${clean(api)}`);
  }
  if (base.protocol !== "http:" && base.protocol !== "https:") {
    throw new UsageError(`the API URL must be http(s): ${clean(api)}`);
  }
  const baseUrl = base.href.replace(/\/+$/, "");

  let token = nonEmpty(str(values, "token")) ?? nonEmpty(io.env.JOBFENCE_TOKEN);
  if (token === undefined) {
    const local = await loadStack();
    const stackApi = typeof local?.apiUrl === "string" ? local.apiUrl.replace(/\/+$/, "") : undefined;
    const admin = local?.tokens?.admin;
    // The local stack's token is only offered to the local stack's API.
    if (typeof admin === "string" && admin !== "" && stackApi === baseUrl) {
      token = admin;
      io.err(`using the local stack's admin token from ${stackFile}`);
    } else {
      throw new UsageError("no token: pass --token <jwt> or set JOBFENCE_TOKEN");
    }
  }
  if (base.protocol === "http:" && !isLoopback(base.hostname)) {
    io.err(`warning: sending the bearer token over plain http to ${base.host}`);
  }
  return { baseUrl, token, fetch: io.fetch ?? globalThis.fetch };
}

function isLoopback(host: string): boolean {
  return host === "localhost" || host === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** A successful response: its body as text (for --json) and parsed. */
interface ApiResult<T> {
  readonly text: string;
  readonly body: T;
}

async function call<T>(
  conn: Connection,
  method: "GET" | "POST",
  path: string,
  options: { query?: Record<string, string | undefined>; body?: unknown } = {},
): Promise<ApiResult<T>> {
  const url = new URL(`${conn.baseUrl}${path}`);
  for (const [key, value] of Object.entries(options.query ?? {})) {
    if (value !== undefined) url.searchParams.set(key, value);
  }
  const headers: Record<string, string> = {
    authorization: `Bearer ${conn.token}`,
    accept: "application/json, application/problem+json",
  };
  if (options.body !== undefined) headers["content-type"] = "application/json";

  let response: Response;
  let text: string;
  try {
    response = await conn.fetch(url, {
      method,
      headers,
      ...(options.body !== undefined ? { body: JSON.stringify(options.body) } : {}),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    text = await response.text();
  } catch (error) {
    throw networkFailure(error, conn.baseUrl, `${method} ${url.pathname}`);
  }
  if (!response.ok) throw problemFailure(response, text, `${method} ${url.pathname}`);
  try {
    return { text, body: parseExact(text) as T };
  } catch {
    throw new CliFailure([
      `error: ${method} ${url.pathname} answered ${response.status} with a body that is not JSON:`,
      `  ${clean(truncate(text, 200))}`,
    ]);
  }
}

function networkFailure(error: unknown, baseUrl: string, what: string): CliFailure {
  const name = (error as { name?: unknown })?.name;
  if (name === "TimeoutError" || name === "AbortError") {
    return new CliFailure([
      `error: ${what}: the API at ${baseUrl} did not answer within ${REQUEST_TIMEOUT_MS / 1000} s`,
    ]);
  }
  return new CliFailure([`error: cannot reach the API at ${baseUrl}: ${describeNetworkError(error)}`]);
}

/** undici's "fetch failed" hides the reason in `cause` (an AggregateError when both IPv4 and IPv6 failed). */
function describeNetworkError(error: unknown): string {
  let current: unknown = error;
  for (let depth = 0; depth < 5; depth++) {
    const cause = (current as { cause?: unknown })?.cause;
    if (cause === undefined) break;
    current = cause;
  }
  if (current instanceof AggregateError && current.errors.length > 0) current = current.errors[0];
  const code = (current as { code?: unknown })?.code;
  const message = current instanceof Error ? current.message : String(current);
  if (typeof code === "string" && !message.includes(code)) return `${code} ${message}`.trim();
  return message || String(error);
}

/** The problem document of a failed call, for stderr. */
function problemFailure(response: Response, text: string, what: string): CliFailure {
  const contentType = response.headers.get("content-type") ?? "";
  let problem: Record<string, unknown> | undefined;
  if (/json/i.test(contentType)) {
    try {
      const parsed: unknown = JSON.parse(text);
      if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) {
        problem = parsed as Record<string, unknown>;
      }
    } catch {
      // not JSON after all: shown as text below
    }
  }
  if (problem === undefined) {
    const lines = [`error: ${what}: ${response.status} ${clean(response.statusText)}`.trimEnd()];
    if (text.trim() !== "") lines.push(`  ${clean(truncate(text.trim(), 300))}`);
    return new CliFailure(lines);
  }
  const status = typeof problem.status === "number" ? problem.status : response.status;
  const title = problem.title ?? response.statusText;
  const lines = [`error: ${status} ${clean(title)}`];
  if (problem.detail !== undefined) lines.push(`  ${clean(problem.detail)}`);
  if (Array.isArray(problem.errors)) {
    for (const item of problem.errors) {
      if (typeof item === "object" && item !== null) {
        const { location, field, message } = item as Record<string, unknown>;
        const where = [location, field === "(root)" || field === location ? undefined : field].filter(
          (p) => p !== undefined,
        );
        lines.push(`  - ${where.map(clean).join(" ")}: ${clean(message)}`);
      } else {
        lines.push(`  - ${clean(item)}`);
      }
    }
  }
  for (const [key, value] of Object.entries(problem)) {
    if (["type", "title", "status", "detail", "instance", "errors"].includes(key)) continue;
    lines.push(`  ${clean(key)}: ${clean(typeof value === "object" ? JSON.stringify(value) : value)}`);
  }
  if (status === 401) {
    lines.push("  hint: the token is missing, expired or not for this API (--token or JOBFENCE_TOKEN)");
  }
  return new CliFailure(lines);
}

// ---------------------------------------------------------------------------------------------
// Commands

type Values = Record<string, string | boolean | undefined>;

function str(values: Values, name: string): string | undefined {
  const value = values[name];
  return typeof value === "string" ? value : undefined;
}

function flag(values: Values, name: string): boolean {
  return values[name] === true;
}

interface CommandContext {
  readonly io: OpsIo;
  readonly values: Values;
  readonly args: readonly string[];
  readonly json: boolean;
  readonly help: string;
  connect(): Promise<Connection>;
}

interface Command {
  readonly name: string;
  readonly synopsis: readonly string[];
  readonly description: string;
  readonly options: ParseArgsOptionsConfig;
  readonly optionHelp: ReadonlyArray<readonly [string, readonly (readonly [string, string])[]]>;
  readonly run: (ctx: CommandContext) => Promise<number>;
}

function helpOf(command: Command): string {
  const lines = [
    "Usage:",
    ...command.synopsis.map((s) => `  ${PROGRAM} dead-letters ${s}`),
    "",
    command.description,
  ];
  for (const [heading, entries] of [
    ...command.optionHelp,
    ["Connection and output", CONNECTION_HELP],
  ] as const) {
    lines.push("", `${heading}:`);
    const pad = Math.max(...entries.map(([name]) => name.length));
    for (const [name, text] of entries) lines.push(`  ${name.padEnd(pad)}  ${text}`);
  }
  return lines.join("\n");
}

/** A positive integer flag within bounds, or a usage error. */
function intFlag(ctx: CommandContext, name: string, min: number, max: number): number | undefined {
  const raw = str(ctx.values, name);
  if (raw === undefined) return undefined;
  if (!/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max) {
    throw new UsageError(
      `--${name} must be a whole number from ${min} to ${max} (got ${clean(raw)})`,
      ctx.help,
    );
  }
  return Number(raw);
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/i;

/** The API filter the flags name; validates the values the CLI can check itself. */
function filterOf(ctx: CommandContext): Record<string, string> {
  const filter: Record<string, string> = {};
  for (const [cliFlag, field] of Object.entries(FILTER_FLAGS) as [FilterFlag, string][]) {
    const value = str(ctx.values, cliFlag);
    if (value === undefined) continue;
    if (value === "") throw new UsageError(`--${cliFlag} must not be empty`, ctx.help);
    if (
      (cliFlag === "after" || cliFlag === "before") &&
      (!RFC3339.test(value) || Number.isNaN(Date.parse(value)))
    ) {
      throw new UsageError(
        `--${cliFlag} must be an RFC 3339 instant with an offset, e.g. 2026-01-31T00:00:00Z (got ${clean(value)})`,
        ctx.help,
      );
    }
    if (cliFlag === "error-kind" && !(ERROR_KINDS as readonly string[]).includes(value)) {
      throw new UsageError(
        `--error-kind must be one of ${ERROR_KINDS.join(", ")} (got ${clean(value)})`,
        ctx.help,
      );
    }
    filter[field] = value;
  }
  return filter;
}

function exactlyOneId(ctx: CommandContext, what: string): string {
  const [id, ...extra] = ctx.args;
  if (id === undefined) throw new UsageError(`${what} needs the dead letter's id`, ctx.help);
  if (extra.length > 0) throw new UsageError(`unexpected argument: ${clean(extra[0])}`, ctx.help);
  return id;
}

function idPath(id: string): string {
  return `${BASE_PATH}/${encodeURIComponent(id)}`;
}

const SUMMARY_COLUMNS: readonly Column[] = [
  { header: "id" },
  { header: "created_at" },
  { header: "consumer", max: 24 },
  { header: "error_kind" },
  { header: "status" },
  { header: "attempts", align: "right" },
  { header: "job_id", max: 40 },
];

function summaryRows(items: readonly DeadLetterSummary[]): unknown[][] {
  return items.map((d) => [
    d.id,
    shortTime(d.created_at),
    d.consumer,
    d.error_kind,
    d.status,
    d.attempts,
    d.job_id,
  ]);
}

const listCommand: Command = {
  name: "list",
  synopsis: ["list [--status <s>] [filters] [--limit <n>] [--cursor <c>] [--all-pages] [--json]"],
  description: "List dead letters, newest first.",
  options: {
    status: { type: "string" },
    ...FILTER_OPTIONS,
    limit: { type: "string" },
    cursor: { type: "string" },
    "all-pages": { type: "boolean" },
  },
  optionHelp: [
    ["Filters", [["--status <status>", DEAD_LETTER_STATUSES.join(" | ")], ...FILTER_HELP]],
    [
      "Paging",
      [
        ["--limit <n>", `rows per page, 1–${API_LIMITS.maxPageSize} (default ${API_LIMITS.defaultPageSize})`],
        ["--cursor <c>", "start after a previous page (its next_cursor; same filters)"],
        ["--all-pages", "follow next_cursor to the last page (--json: one page per line)"],
      ],
    ],
  ],
  async run(ctx) {
    if (ctx.args.length > 0) throw new UsageError(`unexpected argument: ${clean(ctx.args[0])}`, ctx.help);
    const status = str(ctx.values, "status");
    if (status !== undefined && !(DEAD_LETTER_STATUSES as readonly string[]).includes(status)) {
      throw new UsageError(
        `--status must be one of ${DEAD_LETTER_STATUSES.join(", ")} (got ${clean(status)})`,
        ctx.help,
      );
    }
    const filter = filterOf(ctx);
    const limit = intFlag(ctx, "limit", 1, API_LIMITS.maxPageSize);
    const allPages = flag(ctx.values, "all-pages");
    const conn = await ctx.connect();

    const items: DeadLetterSummary[] = [];
    let cursor = str(ctx.values, "cursor");
    let next: string | null = null;
    for (;;) {
      const page = await call<ListResponse>(conn, "GET", BASE_PATH, {
        query: { status, ...filter, limit: limit?.toString(), cursor },
      });
      if (ctx.json) ctx.io.out(oneLine(page.text));
      else items.push(...page.body.items);
      next = page.body.next_cursor;
      if (!allPages || next === null) break;
      if (next === cursor) throw new CliFailure(["error: the API returned the same cursor twice; stopping"]);
      cursor = next;
    }
    if (ctx.json) return EXIT.ok;

    if (items.length === 0) {
      ctx.io.out("no dead letters match");
      return EXIT.ok;
    }
    for (const line of table(SUMMARY_COLUMNS, summaryRows(items))) ctx.io.out(line);
    ctx.io.out("");
    ctx.io.out(
      next === null
        ? plural(items.length, "dead letter")
        : `${plural(items.length, "dead letter")} shown; more follow: add --cursor ${next} (same filters), or --all-pages`,
    );
    return EXIT.ok;
  },
};

const showCommand: Command = {
  name: "show",
  synopsis: ["show <id> [--json]"],
  description: "Show one dead letter whole: its fields, last error, message attributes and payload.",
  options: {},
  optionHelp: [],
  async run(ctx) {
    const id = exactlyOneId(ctx, "show");
    const conn = await ctx.connect();
    const result = await call<DeadLetter>(conn, "GET", idPath(id));
    if (ctx.json) {
      ctx.io.out(oneLine(result.text));
      return EXIT.ok;
    }
    const d = result.body;
    const fields: [string, unknown][] = [
      ["id", d.id],
      ["status", d.status],
      ["consumer", d.consumer],
      ["queue", d.queue],
      ["job_id", d.job_id],
      ["tenant_id", d.tenant_id],
      ["correlation_id", d.correlation_id],
      ["error_kind", d.error_kind],
      ["attempts", d.attempts],
      ["created_at", d.created_at],
      ["resolved_at", d.resolved_at],
      ["resolved_by", d.resolved_by],
      ["discard_reason", d.discard_reason],
      ["last_error", d.last_error ? `${d.last_error.class}: ${d.last_error.message}` : null],
      ["job_fingerprint", d.job_fingerprint],
      ["fence_fingerprint", d.fence_fingerprint],
    ];
    const pad = Math.max(...fields.map(([k]) => k.length));
    for (const [key, value] of fields) ctx.io.out(`${key.padEnd(pad)}  ${clean(value)}`);
    if (d.last_error?.stack) {
      ctx.io.out("");
      ctx.io.out("stack:");
      for (const line of d.last_error.stack.split("\n")) ctx.io.out(`  ${clean(line)}`);
    }
    if (Array.isArray(d.attempt_history) && d.attempt_history.length > 0) {
      ctx.io.out("");
      ctx.io.out("attempts:");
      for (const entry of d.attempt_history) {
        ctx.io.out(
          `  ${clean(entry.attempt)}  ${clean(entry.at)}  receive ${clean(entry.receive_count)}  ${clean(entry.kind)}  ${clean(entry.error?.name)}: ${clean(entry.error?.message)}`,
        );
      }
    }
    ctx.io.out("");
    ctx.io.out("message_attributes:");
    for (const line of prettyJson(d.message_attributes ?? {}).split("\n")) ctx.io.out(`  ${clean(line)}`);
    ctx.io.out("");
    if (d.payload !== null && d.payload !== undefined) {
      ctx.io.out("payload:");
      for (const line of prettyJson(d.payload).split("\n")) ctx.io.out(`  ${clean(line)}`);
    } else {
      // Not JSON jsonb could hold: the body is all there is, shown escaped by clean().
      ctx.io.out(`body (${clean(d.body_form ?? "text")}, not stored as JSON):`);
      ctx.io.out(`  ${clean(JSON.stringify(d.body ?? ""))}`);
    }
    return EXIT.ok;
  },
};

const statsCommand: Command = {
  name: "stats",
  synopsis: ["stats [--json]"],
  description:
    "Counts by consumer, status and error kind, and the oldest pending dead letter of each consumer.",
  options: {},
  optionHelp: [],
  async run(ctx) {
    if (ctx.args.length > 0) throw new UsageError(`unexpected argument: ${clean(ctx.args[0])}`, ctx.help);
    const conn = await ctx.connect();
    const result = await call<StatsResponse>(conn, "GET", `${BASE_PATH}/stats`);
    if (ctx.json) {
      ctx.io.out(oneLine(result.text));
      return EXIT.ok;
    }
    const { counts, oldest_pending: oldest } = result.body;
    if (counts.length === 0) {
      ctx.io.out("no dead letters");
      return EXIT.ok;
    }
    const columns: Column[] = [
      { header: "consumer", max: 40 },
      { header: "status" },
      { header: "error_kind" },
      { header: "count", align: "right" },
    ];
    const rows = counts.map((c) => [c.consumer, c.status, c.error_kind, c.count]);
    for (const line of table(columns, rows)) ctx.io.out(line);
    const byStatus = new Map<string, number>();
    let total = 0;
    for (const c of counts) {
      total += c.count;
      byStatus.set(c.status, (byStatus.get(c.status) ?? 0) + c.count);
    }
    const parts = DEAD_LETTER_STATUSES.filter((s) => byStatus.has(s)).map((s) => `${byStatus.get(s)} ${s}`);
    ctx.io.out("");
    ctx.io.out(`total ${plural(total, "dead letter")} (${parts.join(", ")})`);
    ctx.io.out("");
    if (oldest.length === 0) {
      ctx.io.out("nothing is pending review");
      return EXIT.ok;
    }
    ctx.io.out("oldest pending per consumer:");
    const now = Date.now();
    const oldestColumns: Column[] = [
      { header: "consumer", max: 40 },
      { header: "id" },
      { header: "created_at" },
      { header: "age", align: "right" },
    ];
    const oldestRows = oldest.map((o) => [o.consumer, o.id, shortTime(o.created_at), age(o.created_at, now)]);
    for (const line of table(oldestColumns, oldestRows)) ctx.io.out(line);
    return EXIT.ok;
  },
};

const replayCommand: Command = {
  name: "replay",
  synopsis: [
    "replay <id> [--json]",
    "replay <filters…> | --all  [--dry-run] [--batch <n>] [--cursor <c>] [--json]",
  ],
  description: [
    "With an id: send that dead letter's stored envelope again to its queue (same job_id), or resolve",
    "it as superseded when its job already succeeded.",
    "",
    "Without an id: replay every pending dead letter the filters match, oldest first, --batch per",
    "API call, following next_cursor until done, with a progress line after each call. Exit 1 if any",
    "failed to send (they stay pending_review). No filter at all replays everything: that needs --all.",
  ].join("\n"),
  options: {
    ...FILTER_OPTIONS,
    all: { type: "boolean" },
    "dry-run": { type: "boolean" },
    batch: { type: "string" },
    cursor: { type: "string" },
    status: { type: "string" },
  },
  optionHelp: [
    ["Filters (bulk; only pending_review dead letters are replayed)", FILTER_HELP],
    [
      "Bulk",
      [
        ["--all", "allow a filter that matches every pending dead letter"],
        ["--dry-run", "count and sample the matches; change nothing"],
        [
          "--batch <n>",
          `dead letters per API call, 1–${API_LIMITS.maxBulkReplay} (default ${API_LIMITS.maxBulkReplay})`,
        ],
        ["--cursor <c>", "resume an interrupted run after that call's next_cursor (same filters)"],
      ],
    ],
  ],
  async run(ctx) {
    if (str(ctx.values, "status") !== undefined) {
      throw new UsageError(
        "replay takes no --status: only pending_review dead letters are replayed",
        ctx.help,
      );
    }
    const [id, ...extra] = ctx.args;
    if (extra.length > 0) throw new UsageError(`unexpected argument: ${clean(extra[0])}`, ctx.help);
    if (id !== undefined) {
      const bulkFlags = [...Object.keys(FILTER_FLAGS), "all", "dry-run", "batch", "cursor"].filter(
        (name) => ctx.values[name] !== undefined,
      );
      if (bulkFlags.length > 0) {
        throw new UsageError(
          `replay <id> replays one dead letter; --${bulkFlags[0]} is for a bulk replay (without an id)`,
          ctx.help,
        );
      }
      return replayOne(ctx, id);
    }
    return replayBulk(ctx);
  },
};

async function replayOne(ctx: CommandContext, id: string): Promise<number> {
  const conn = await ctx.connect();
  const result = await call<ReplayResponse>(conn, "POST", `${idPath(id)}/replay`);
  if (ctx.json) {
    ctx.io.out(oneLine(result.text));
    return EXIT.ok;
  }
  const r = result.body;
  ctx.io.out(
    r.status === "superseded"
      ? `superseded ${clean(r.id)}: its job already succeeded (the fence exists); nothing was sent`
      : `replayed ${clean(r.id)} (SQS message ${clean(r.message_id)})`,
  );
  return EXIT.ok;
}

async function replayBulk(ctx: CommandContext): Promise<number> {
  const filter = filterOf(ctx);
  const all = flag(ctx.values, "all");
  const dryRun = flag(ctx.values, "dry-run");
  const batch = intFlag(ctx, "batch", 1, API_LIMITS.maxBulkReplay);
  if (!all && Object.keys(filter).length === 0) {
    throw new UsageError(
      "a bulk replay needs a filter (--consumer, --queue, --error-kind, --tenant, --job-id, " +
        "--correlation-id, --after, --before), or --all to replay every pending dead letter",
      ctx.help,
    );
  }
  if (dryRun && batch !== undefined) {
    throw new UsageError("--batch does not apply to --dry-run (it counts every match)", ctx.help);
  }
  const conn = await ctx.connect();
  const body = (cursor: string | undefined) => ({
    filter,
    ...(all ? { all: true } : {}),
    ...(dryRun ? { dry_run: true } : {}),
    ...(batch !== undefined ? { limit: batch } : {}),
    ...(cursor !== undefined ? { cursor } : {}),
  });

  if (dryRun) {
    const result = await call<BulkReplayResponse>(conn, "POST", `${BASE_PATH}/replay`, {
      body: body(str(ctx.values, "cursor")),
    });
    if (ctx.json) {
      ctx.io.out(oneLine(result.text));
      return EXIT.ok;
    }
    const r = result.body;
    const wouldSend = r.would_send ?? r.matched;
    const conflicts = r.conflicts ?? 0;
    ctx.io.out(
      `dry run: ${plural(r.matched, "pending dead letter")} ${r.matched === 1 ? "matches" : "match"}; ` +
        `a replay would send ${wouldSend}, resolve ${r.matched - wouldSend - conflicts} as superseded (their jobs already succeeded)` +
        ` and leave ${conflicts} pending as conflicts (their job ids were applied as other jobs)`,
    );
    const sample = r.sample ?? [];
    if (sample.length > 0) {
      ctx.io.out("");
      ctx.io.out(`sample (the oldest ${sample.length} of ${r.matched}):`);
      for (const line of table(SUMMARY_COLUMNS, summaryRows(sample))) ctx.io.out(line);
    }
    ctx.io.out("");
    ctx.io.out("nothing was changed");
    return EXIT.ok;
  }

  const totals = { handled: 0, replayed: 0, superseded: 0, conflict: 0, failed: 0 };
  let cursor = str(ctx.values, "cursor");
  let calls = 0;
  for (;;) {
    let result: ApiResult<BulkReplayResponse>;
    try {
      result = await call<BulkReplayResponse>(conn, "POST", `${BASE_PATH}/replay`, { body: body(cursor) });
    } catch (error) {
      if (error instanceof CliFailure && calls > 0) {
        const resume = cursor !== undefined ? `; resume with --cursor ${cursor}` : "";
        throw new CliFailure([
          ...error.lines,
          `stopped after ${plural(calls, "call")}: ${totals.handled} handled (${totals.replayed} replayed, ` +
            `${totals.superseded} superseded, ${totals.conflict} conflicts, ${totals.failed} failed)${resume}`,
        ]);
      }
      throw error;
    }
    calls++;
    const outcomes = result.body.outcomes ?? [];
    const counts = { replayed: 0, superseded: 0, conflict: 0, failed: 0 };
    for (const o of outcomes) {
      counts[o.outcome]++;
      if (o.outcome === "failed" || o.outcome === "conflict")
        ctx.io.err(`${o.outcome} ${clean(o.id)}: ${clean(o.error ?? "unknown error")}`);
    }
    totals.handled += outcomes.length;
    totals.replayed += counts.replayed;
    totals.superseded += counts.superseded;
    totals.conflict += counts.conflict;
    totals.failed += counts.failed;
    if (ctx.json) {
      ctx.io.out(oneLine(result.text));
    } else {
      ctx.io.out(
        `batch ${calls}: ${outcomes.length} handled (${counts.replayed} replayed, ${counts.superseded} superseded, ` +
          `${counts.conflict} conflicts, ${counts.failed} failed) — ${totals.handled} so far`,
      );
    }
    const next = result.body.next_cursor;
    if (next === null) break;
    if (next === cursor) throw new CliFailure(["error: the API returned the same cursor twice; stopping"]);
    cursor = next;
  }
  if (!ctx.json) {
    ctx.io.out(
      totals.handled === 0
        ? "done: no pending dead letters matched"
        : `done: ${totals.handled} handled in ${plural(calls, "call")} — ${totals.replayed} replayed, ` +
            `${totals.superseded} superseded, ${totals.conflict} conflicts, ${totals.failed} failed`,
    );
  }
  if (totals.failed > 0) {
    ctx.io.err(
      `${plural(totals.failed, "dead letter")} failed to send and stay pending_review; fix the cause and replay again`,
    );
    return EXIT.failed;
  }
  return EXIT.ok;
}

const discardCommand: Command = {
  name: "discard",
  synopsis: ['discard <id> --reason "<why>" [--json]'],
  description:
    "Resolve a pending dead letter as discarded: it will never be replayed. The reason is recorded.",
  options: { reason: { type: "string" } },
  optionHelp: [
    [
      "Options",
      [
        [
          "--reason <text>",
          `required: why (recorded as discard_reason; ≤ ${API_LIMITS.maxReasonLength} chars)`,
        ],
      ],
    ],
  ],
  async run(ctx) {
    const id = exactlyOneId(ctx, "discard");
    const reason = str(ctx.values, "reason");
    if (reason === undefined || reason.trim() === "") {
      throw new UsageError(
        "discard needs --reason: say why this dead letter will never be replayed",
        ctx.help,
      );
    }
    const conn = await ctx.connect();
    const result = await call<DiscardResponse>(conn, "POST", `${idPath(id)}/discard`, { body: { reason } });
    if (ctx.json) {
      ctx.io.out(oneLine(result.text));
      return EXIT.ok;
    }
    ctx.io.out(`discarded ${clean(result.body.id)}: ${clean(result.body.reason)}`);
    return EXIT.ok;
  },
};

const COMMANDS: readonly Command[] = [listCommand, showCommand, statsCommand, replayCommand, discardCommand];
const GROUPS = new Set(["dead-letters", "dl"]);

function groupHelp(): string {
  const lines = [
    `Usage: ${PROGRAM} dead-letters <command> [options]`,
    "",
    "Manage dead letters through the jobfence management API.",
    "",
    "Commands:",
    ...COMMANDS.flatMap((c) => c.synopsis.map((s) => `  ${s}`)),
    "",
    "Environment:",
    "  JOBFENCE_API_URL  API base URL when --api is not given (else apiUrl of .local/stack.json)",
    "  JOBFENCE_TOKEN    bearer token when --token is not given (else the local stack's admin token)",
    "",
    "Exit codes: 0 done; 1 the API refused, could not be reached, or a bulk replay had failures;",
    "2 usage or configuration error.",
    "",
    `Run \`${PROGRAM} dead-letters <command> --help\` for a command's options.`,
  ];
  return lines.join("\n");
}

/** Every option of every command: enough to find the positionals before the command is known. */
const ALL_OPTIONS: ParseArgsOptionsConfig = Object.assign(
  {},
  CONNECTION_OPTIONS,
  ...COMMANDS.map((c) => c.options),
);

function printLines(write: (line: string) => void, text: string): void {
  for (const line of text.split("\n")) write(line);
}

/** Runs the CLI with `argv` (without node and script); resolves to the exit code. */
export async function runOps(argv: readonly string[], io: OpsIo): Promise<number> {
  try {
    return await dispatch(argv, io);
  } catch (error) {
    if (error instanceof UsageError) {
      for (const line of error.message.split("\n")) io.err(line.startsWith("(") ? line : `error: ${line}`);
      if (error.help !== undefined) {
        io.err("");
        printLines(io.err, error.help);
      }
      return EXIT.usage;
    }
    if (error instanceof CliFailure) {
      for (const line of error.lines) io.err(line);
      return EXIT.failed;
    }
    io.err(`error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    return EXIT.failed;
  }
}

async function dispatch(argv: readonly string[], io: OpsIo): Promise<number> {
  // First pass: only to find the group and command among the flags.
  const loose = parseArgs({ args: [...argv], options: ALL_OPTIONS, strict: false, allowPositionals: true });
  const [group, commandName] = loose.positionals;
  const wantsHelp = loose.values.help === true || group === "help";

  if (group === undefined || group === "help") {
    if (wantsHelp) {
      printLines(io.out, groupHelp());
      return EXIT.ok;
    }
    throw new UsageError("no command given", groupHelp());
  }
  if (!GROUPS.has(group)) throw new UsageError(`unknown command: ${clean(group)}`, groupHelp());
  if (commandName === undefined) {
    if (wantsHelp) {
      printLines(io.out, groupHelp());
      return EXIT.ok;
    }
    throw new UsageError("no dead-letters command given", groupHelp());
  }
  const command = COMMANDS.find((c) => c.name === commandName);
  if (command === undefined) {
    throw new UsageError(`unknown dead-letters command: ${clean(commandName)}`, groupHelp());
  }
  const help = helpOf(command);

  let parsed: { values: Values; positionals: string[] };
  try {
    parsed = parseArgs({
      args: [...argv],
      options: { ...CONNECTION_OPTIONS, ...command.options },
      strict: true,
      allowPositionals: true,
    }) as { values: Values; positionals: string[] };
  } catch (error) {
    throw new UsageError((error as Error).message, help);
  }
  if (flag(parsed.values, "help")) {
    printLines(io.out, help);
    return EXIT.ok;
  }
  const values = parsed.values;
  return command.run({
    io,
    values,
    args: parsed.positionals.slice(2),
    json: flag(values, "json"),
    help,
    connect: () => connect(values, io),
  });
}
