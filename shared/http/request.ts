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

/** Parses the query string (API Gateway joins repeated keys with commas). */
export function parseQuery<S extends z.ZodType>(event: APIGatewayProxyEventV2, schema: S): z.output<S> {
  const result = schema.safeParse(event.queryStringParameters ?? {});
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
  if (event.isBase64Encoded && text) text = Buffer.from(text, "base64").toString("utf8");
  let document: unknown = {};
  if (text.trim() !== "") {
    const contentType = headerOf(event, "content-type") ?? "";
    if (!/^application\/([a-z0-9.+-]*\+)?json\b/i.test(contentType)) {
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

/** A request header, case-insensitively. */
export function headerOf(event: APIGatewayProxyEventV2, name: string): string | undefined {
  const wanted = name.toLowerCase();
  for (const [key, value] of Object.entries(event.headers ?? {}))
    if (key.toLowerCase() === wanted) return value;
  return undefined;
}
