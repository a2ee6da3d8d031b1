/** Validating the parts of an API Gateway (v2) request with zod; a failure is a 400 problem. */
import type { APIGatewayProxyEventV2 } from "aws-lambda";
import type { z } from "zod";
import { parseJson } from "../envelope/parse-json.ts";
import { HttpProblem } from "../errors/http.ts";

/**
 * The largest request body the API takes: API Gateway's own limit for an HTTP API, which the local
 * server applies too (a 413 above it).
 */
export const MAX_REQUEST_BODY_BYTES = 10 * 1024 * 1024;

/**
 * The most the request line and the header values may hold together, in bytes: API Gateway's limit
 * for an HTTP API (10,240 bytes, which cannot be raised), which the local server applies too (a 431
 * above it). A bearer token takes about a kilobyte of it; a query string is bounded by it, not by
 * its parameters' lengths alone.
 */
export const MAX_REQUEST_LINE_AND_HEADERS_BYTES = 10_240;

/** The bytes a request's line and header values take, as API Gateway counts them toward its limit. */
export function requestLineAndHeadersBytes(
  method: string,
  target: string,
  headerValues: readonly string[],
): number {
  let bytes = Buffer.byteLength(`${method} ${target} HTTP/1.1`, "latin1");
  for (const value of headerValues) bytes += Buffer.byteLength(value, "latin1");
  return bytes;
}

/** The zod issues as problem `errors`: where and what. */
function invalid(where: string, error: z.ZodError): HttpProblem {
  const errors = error.issues.slice(0, 20).map((issue) => ({
    location: where,
    field: issue.path.join(".") || "(root)",
    message: issue.message,
  }));
  return new HttpProblem(
    "invalidRequest",
    `invalid ${where}: ${errors.map((e) => `${e.field}: ${e.message}`).join("; ")}`,
    {
      extensions: { errors },
    },
  );
}

/** A problem about one query parameter, in the shape of a validation failure. */
function invalidParameter(name: string, message: string): HttpProblem {
  return new HttpProblem("invalidRequest", `invalid query: ${name}: ${message}`, {
    extensions: { errors: [{ location: "query", field: name, message }] },
  });
}

/** Decodes one name or value of a query string as a form does: `+` is a space, `%XX` UTF-8 bytes. */
function decodeQueryPart(part: string, name: string): string {
  try {
    return decodeURIComponent(part.replaceAll("+", " "));
  } catch {
    throw invalidParameter(name, "is not valid percent-encoded UTF-8");
  }
}

/**
 * The query's parameters, read from the raw query string. API Gateway's `queryStringParameters`
 * joins a repeated name's values with commas, so `consumer=a&consumer=b` would read as the one
 * value `a,b`: here a parameter given twice is refused, naming it. Without a raw query string (an
 * event built by hand) the parsed parameters are taken as they are.
 */
export function queryParameters(event: APIGatewayProxyEventV2): Record<string, string> {
  // No prototype: a parameter named __proto__ stays a parameter (and is refused as unknown).
  const parameters: Record<string, string> = Object.create(null);
  if (event.rawQueryString === undefined) return Object.assign(parameters, event.queryStringParameters);
  for (const pair of event.rawQueryString.split("&")) {
    if (pair === "") continue;
    const at = pair.indexOf("=");
    const rawName = at < 0 ? pair : pair.slice(0, at);
    const name = decodeQueryPart(rawName, rawName);
    const value = decodeQueryPart(at < 0 ? "" : pair.slice(at + 1), name);
    if (Object.hasOwn(parameters, name)) throw invalidParameter(name, "is given more than once");
    parameters[name] = value;
  }
  return parameters;
}

/** JSON's white space only (space, tab, LF, CR), or nothing: what an absent body is read as. */
const isJsonWhiteSpace = (text: string) => /^[ \t\n\r]*$/.test(text);

/**
 * Refuses a body on an operation that takes none: no bytes, or JSON's white space only. A filter
 * sent in the body of a GET would otherwise be dropped, and the answer be about everything.
 */
export function refuseAnyBody(event: APIGatewayProxyEventV2): void {
  const body = event.body ?? "";
  if (body === "" || (!event.isBase64Encoded && isJsonWhiteSpace(body))) return;
  throw new HttpProblem("invalidRequest", "this operation takes no body");
}

/** Refuses a query string holding any parameter (also one given twice, or not UTF-8), naming it. */
export function refuseAnyQuery(event: APIGatewayProxyEventV2): void {
  const [name] = Object.keys(queryParameters(event));
  if (name !== undefined) throw invalidParameter(name, "this operation takes no query parameters");
}

/** Parses the query string: each parameter once, validated by `schema`. */
export function parseQuery<S extends z.ZodType>(event: APIGatewayProxyEventV2, schema: S): z.output<S> {
  const result = schema.safeParse(queryParameters(event));
  if (!result.success) throw invalid("query", result.error);
  return result.data;
}

/** Parses a path parameter. */
export function parsePathParameter<S extends z.ZodType>(
  event: APIGatewayProxyEventV2,
  name: string,
  schema: S,
): z.output<S> {
  const result = schema.safeParse(event.pathParameters?.[name]);
  if (!result.success) throw invalid(`path parameter ${name}`, result.error);
  return result.data;
}

/** Parses a JSON body; an absent body is `{}`. */
export function parseJsonBody<S extends z.ZodType>(event: APIGatewayProxyEventV2, schema: S): z.output<S> {
  let text = event.body ?? "";
  if (event.isBase64Encoded && text) {
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(Buffer.from(text, "base64"));
    } catch {
      // Read with U+FFFD in place of the bad bytes, a reason would be stored other than sent.
      throw new HttpProblem("invalidRequest", "the body is not valid UTF-8");
    }
  }
  let document: unknown = {};
  // Empty is JSON's white space only: a body of U+FEFF, U+00A0 or U+2028 (which `trim()` would
  // remove) is a body, and must be JSON like any other.
  if (!isJsonWhiteSpace(text)) {
    const contentType = headerOf(event, "content-type") ?? "";
    if (!isJsonContentType(contentType)) {
      throw new HttpProblem(
        "unsupportedMediaType",
        `the body must be JSON, sent as content-type application/json (got ${contentType || "none"})`,
      );
    }
    try {
      document = parseJson(text);
    } catch (error) {
      throw new HttpProblem("invalidRequest", `the body is not valid JSON: ${(error as Error).message}`);
    }
  }
  const result = schema.safeParse(document);
  if (!result.success) throw invalid("body", result.error);
  return result.data;
}

/**
 * `application/json`, the one media type the document names, with at most a UTF-8 charset
 * parameter: `application/merge-patch+json`, `application/json-seq` or a Latin-1 charset are other
 * formats, refused (415) rather than read as if they were this one.
 */
export function isJsonContentType(value: string): boolean {
  const [type = "", ...parameters] = value.split(";").map((part) => part.trim().toLowerCase());
  if (type !== "application/json") return false;
  return parameters.every((p) => p === "" || /^charset=("?)utf-8\1$/.test(p));
}

/** A request header, case-insensitively. */
export function headerOf(event: APIGatewayProxyEventV2, name: string): string | undefined {
  const wanted = name.toLowerCase();
  for (const [key, value] of Object.entries(event.headers ?? {}))
    if (key.toLowerCase() === wanted) return value;
  return undefined;
}
