/**
 * Calls to the dead-letter API: bearer token, JSON in and out, and failures turned into lines for
 * the operator — an application/problem+json document printed member by member, an unreachable
 * API with the real cause undici hides, a timeout.
 */
import { parseJson } from "../shared/envelope/parse-json.ts";
import { type Connection, isLoopback } from "./connection.ts";
import { ApiError, CliFailure } from "./errors.ts";
import { clean, truncate } from "./text.ts";

/** The API's base path (docs/api.md). */
export const BASE_PATH = "/v1/core/dead-letters";

/** Where the API serves its OpenAPI document. */
export const OPENAPI_PATH = "/v1/core/openapi.json";

/** Where the bulk operations are. */
export const OPERATIONS_PATH = `${BASE_PATH}/operations`;

/**
 * How long one API call may take. Generous, because a busy database can slow a query for a while;
 * bounded, because a connection that hangs must still end the command.
 */
export const REQUEST_TIMEOUT_MS = 120_000;

/** A successful response: its body as text (for --json, printed as sent) and parsed. */
export interface ApiResult<T> {
  readonly status: number;
  readonly text: string;
  readonly body: T;
}

export interface CallOptions {
  readonly query?: Readonly<Record<string, string | undefined>>;
  readonly body?: unknown;
}

/**
 * A validated query as query-string values: the schema's output, defaults included (the API
 * parses them again, as it parses any caller's).
 */
export function queryOf(values: Readonly<Record<string, unknown>>): Record<string, string | undefined> {
  return Object.fromEntries(
    Object.entries(values).map(([key, value]) => [key, value === undefined ? undefined : String(value)]),
  );
}

/** The path of one dead letter (or one operation, with `base`). */
export function idPath(id: string, base = BASE_PATH): string {
  return `${base}/${encodeURIComponent(id)}`;
}

/** Calls the API; resolves to the parsed body of a 2xx answer, else throws a {@link CliFailure}. */
export async function call<T>(
  conn: Connection,
  method: "GET" | "POST",
  path: string,
  options: CallOptions = {},
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
  const what = `${method} ${url.pathname}`;

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
    throw networkFailure(error, conn.baseUrl, what);
  }
  if (!response.ok) throw problemFailure(response, text, what);
  try {
    return { status: response.status, text, body: parseExact(text) as T };
  } catch {
    throw new CliFailure([
      `error: ${what} answered ${response.status} with a body that is not JSON:`,
      `  ${clean(truncate(text, 200))}`,
    ]);
  }
}

/**
 * JSON.parse that keeps numbers exactly as sent (a payload may carry integers beyond 2^53, which
 * the API preserves) and reads escaped keys correctly on every runtime (parse-json.ts).
 */
function parseExact(text: string): unknown {
  return parseJson(text, { exactNumbers: true });
}

function networkFailure(error: unknown, baseUrl: string, what: string): CliFailure {
  const name = (error as { name?: unknown })?.name;
  if (name === "TimeoutError" || name === "AbortError") {
    return new CliFailure([
      `error: ${what}: the API at ${baseUrl} did not answer within ${REQUEST_TIMEOUT_MS / 1000} s`,
    ]);
  }
  return new CliFailure([
    `error: cannot reach the dead-letter API at ${baseUrl}: ${unreachableHint(baseUrl)}`,
    `  cause: ${describeNetworkError(error)}`,
  ]);
}

/**
 * What to check when the API cannot be reached. A loopback URL is the local stack's (the default
 * when nothing is configured): it is most likely not running. Another one may be mistyped or
 * unreachable from here; `npm start` is named either way, the one command a new user needs.
 */
function unreachableHint(baseUrl: string): string {
  let local = false;
  try {
    local = isLoopback(new URL(baseUrl).hostname);
  } catch {
    // a URL connect() accepted always parses; no hint is lost if not
  }
  return local
    ? "is the local stack running? start it with `npm start`"
    : "check the URL (--api, JOBFENCE_API_URL) and the network; for the local stack, start it with `npm start`";
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

/** Members every problem has; the others (reason, current_status, …) are printed one a line. */
const PROBLEM_MEMBERS = new Set(["type", "title", "status", "detail", "instance", "errors"]);

/** The problem document of a failed call, for stderr. */
function problemFailure(response: Response, text: string, what: string): ApiError {
  const contentType = response.headers.get("content-type") ?? "";
  let problem: Record<string, unknown> | undefined;
  if (/json/i.test(contentType)) {
    try {
      const parsed: unknown = parseJson(text);
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
    return new ApiError(lines, response.status, undefined);
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
    if (PROBLEM_MEMBERS.has(key)) continue;
    lines.push(`  ${clean(key)}: ${clean(typeof value === "object" ? JSON.stringify(value) : value)}`);
  }
  if (status === 401) {
    lines.push("  hint: the token is missing, expired or not for this API (--token or JOBFENCE_TOKEN)");
  }
  return new ApiError(lines, status, problem);
}
