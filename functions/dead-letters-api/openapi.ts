/**
 * The dead-letter API's OpenAPI 3.1 document, built from {@link ROUTES} and the very zod schemas the
 * handlers validate with, so the document cannot say something the code does not do. Pure and
 * deterministic: the same code always gives the same document, keys in the same order.
 *
 * `npm run openapi` writes it to docs/openapi.json; a unit test fails when the committed file and
 * this function disagree.
 */
import { z } from "zod";
import {
  bulkFilterSchema,
  deadLetterIdSchema,
  deadLetterSchema,
  deadLetterSummarySchema,
  groupSchema,
  idempotencyKeySchema,
  operationSchema,
  operationStartSchema,
  QUERY_INTEGERS,
} from "../../shared/dead-letters/api-schemas.ts";
import { IDEMPOTENCY } from "../../shared/dead-letters/idempotency.ts";
import { DEAD_LETTER_STATUSES } from "../../shared/dead-letters/status.ts";
import { PROBLEM, type ProblemKind } from "../../shared/errors/http.ts";
import { PERMISSION, type Permission } from "../../shared/http/auth.ts";
import { PROBLEM_CONTENT_TYPE, problemType } from "../../shared/http/problem.ts";
import { MAX_REQUEST_BODY_BYTES, MAX_REQUEST_LINE_AND_HEADERS_BYTES } from "../../shared/http/request.ts";
import { ROUTE_TAGS, ROUTES, type RouteSpec, routePermissions } from "./routes.ts";

/** The document's `info.version`: the version of the API contract. Raise it when the contract changes. */
export const OPENAPI_DOCUMENT_VERSION = "1.0.0";

/** The document's `info.title`. */
export const OPENAPI_TITLE = "jobfence dead-letter API";

/** Where `npm run openapi` writes the document, relative to the repository root. */
export const OPENAPI_DOCUMENT_PATH = "docs/openapi.json";

/** The name of the security scheme: an OAuth 2.0 bearer token (RFC 6750), a JWT. */
const BEARER = "bearer";

/**
 * What each permission allows, as the scopes of the security scheme. The token carries them in its
 * `scope` claim or `permissions` array; each operation's `security` names the ones it accepts.
 */
const PERMISSION_SCOPES: Readonly<Record<Permission, string>> = {
  [PERMISSION.read]:
    "Read: list and read dead letters, their counts and failure groups, and bulk operations. Changes nothing.",
  [PERMISSION.replay]:
    "Replay dead letters, one at a time or in bulk (plan and start), and cancel bulk replays.",
  [PERMISSION.discard]:
    "Discard dead letters with a reason, one at a time or in bulk (plan and start), and cancel bulk discards.",
};

/**
 * Where the API is. Its base URL is per deployment, so the first server is a template: `host` stands
 * for the deployment's. Its default is under `.invalid`, a domain reserved never to resolve (RFC
 * 2606), so a client nobody pointed at a deployment fails at once instead of sending a token to a
 * host that happens to exist.
 */
const SERVERS = [
  {
    url: "https://{host}",
    description:
      "A deployment. Every path of this document is under its base URL: the stack output `ApiUrl` " +
      "(API Gateway's invoke URL, `https://<api-id>.execute-api.<region>.amazonaws.com`), or the custom " +
      "domain in front of it.",
    variables: {
      host: {
        default: "jobfence-api.invalid",
        description:
          "The deployment's API host: the host of the stack output `ApiUrl` (`aws cloudformation " +
          "describe-stacks --stack-name Jobfence --query \"Stacks[0].Outputs[?OutputKey=='ApiUrl'].OutputValue\"`), " +
          "or your custom domain. The default is a placeholder that never resolves.",
      },
    },
  },
  {
    url: "http://127.0.0.1:{port}",
    description:
      "The local stack (`npm start`): its `apiUrl` in `.local/stack.json`, with tokens for each permission " +
      "beside it.",
    variables: {
      port: {
        default: "8787",
        description: "`JOBFENCE_API_PORT`; `npm start` prints the port it listens on.",
      },
    },
  },
];

/**
 * The token endpoint OpenAPI requires a flow to name. The API issues no tokens and needs no
 * particular grant: it verifies whatever JWT the deployment's issuer signed. So the flow names a
 * placeholder under `.invalid`, and the scheme's description says where the real endpoint is.
 */
const TOKEN_URL_PLACEHOLDER = "https://identity-provider.invalid/oauth2/token";

type JsonSchema = z.core.JSONSchema.JSONSchema;
type JsonObject = Record<string, unknown>;

const SCHEMA_REF = "#/components/schemas/";
const RESPONSE_REF = "#/components/responses/";
const JSON_CONTENT_TYPE = "application/json";

/** The body of every error response (RFC 9457), as problem.ts, request.ts and problem-details.ts build it. */
export const problemSchema = z
  .object({
    type: z
      .enum(Object.keys(PROBLEM).map((kind) => problemType(kind as ProblemKind)))
      .describe("Names the kind of problem; one URN per HTTP status."),
    title: z.string().describe("Fixed for each type."),
    status: z.number().int().min(400).max(599).describe("The HTTP status, repeated."),
    detail: z.string().describe("What went wrong this time, in words."),
    instance: z.string().optional().describe("The request path."),
    errors: z
      .array(z.object({ location: z.string(), field: z.string(), message: z.string() }))
      .optional()
      .describe("400 only: each part of the request that failed validation (at most 20)."),
    required_permission: z
      .enum(Object.values(PERMISSION))
      .optional()
      .describe("403 only: the permission the operation requires."),
    any_of_permissions: z
      .array(z.enum(Object.values(PERMISSION)))
      .optional()
      .describe("403 only, on routes that take one of several: the permissions that would do."),
    current_status: z
      .enum(DEAD_LETTER_STATUSES)
      .optional()
      .describe("409 only: the status the dead letter has now."),
    operation_status: z
      .enum(["running", "completed", "cancelled", "failed"])
      .optional()
      .describe("409 only: the status the bulk operation has now."),
    reason: z
      .string()
      .optional()
      .describe(
        "409, 422 and 428: why (not-pending, job-conflict, operation-finished, operation-running, plan-expired, plan-stale, plan-used, nothing-matched, idempotency-key-in-progress, idempotency-key-reused, confirmation-required).",
      ),
    operation_id: z
      .uuid()
      .optional()
      .describe("409 operation-running: the running bulk operation of the same kind and filter."),
    matched: z
      .number()
      .int()
      .optional()
      .describe("409 plan-stale and 428: pending dead letters the filter matches now."),
    planned: z.number().int().optional().describe("409 plan-stale: how many the plan matched."),
    pending_total: z.number().int().optional().describe("428: pending dead letters in all."),
    confirm_above: z.number().int().optional().describe("428: sets larger than this need the plan's token."),
    correlation_id: z
      .string()
      .optional()
      .describe("5xx only: the id under which the failure's details were logged; quote it when reporting."),
  })
  .loose();

/** Shared schemas with a name of their own under components.schemas, by direction. */
const OUTPUT_NAMES: ReadonlyMap<z.ZodType, string> = new Map<z.ZodType, string>([
  [deadLetterSchema, "DeadLetter"],
  [deadLetterSummarySchema, "DeadLetterSummary"],
  [groupSchema, "FailureGroup"],
  [operationSchema, "BulkOperation"],
  [operationStartSchema, "StartedBulkOperation"],
  [problemSchema, "Problem"],
]);
const INPUT_NAMES: ReadonlyMap<z.ZodType, string> = new Map<z.ZodType, string>([
  [deadLetterIdSchema, "DeadLetterId"],
  [bulkFilterSchema, "DeadLetterFilter"],
]);

/** Response headers some problems carry (auth.ts, problem-details.ts). */
const PROBLEM_HEADERS: Partial<Record<ProblemKind, JsonObject>> = {
  unauthenticated: {
    "WWW-Authenticate": {
      description:
        'Bearer realm="jobfence"; with error="invalid_token" and an error_description naming the failed claim when the token sent is not valid.',
      schema: { type: "string" },
    },
  },
  unavailable: {
    "Retry-After": { description: "Seconds to wait before trying again.", schema: { type: "integer" } },
  },
  conflict: {
    "Retry-After": {
      description:
        "With reason idempotency-key-in-progress only: seconds to wait before sending the request again.",
      schema: { type: "integer" },
    },
  },
};

/**
 * Statuses every POST can answer because of its Idempotency-Key: 409 while the first request under
 * the key runs, 422 when the key was first used for another request.
 */
const IDEMPOTENCY_ERROR_STATUSES = [409, 422] as const;

/** What a problem's response says where its title is not the whole story. */
const PROBLEM_DESCRIPTIONS: Partial<Record<ProblemKind, string>> = {
  contentTooLarge:
    `The request body is over ${MAX_REQUEST_BODY_BYTES} bytes (10 MB), whatever the operation. ` +
    "In AWS, API Gateway refuses it itself, with its own 413 and a JSON body holding a `message`, " +
    "not this problem document; the function never sees the request.",
  headersTooLarge:
    `The request line and the header values together are over ${MAX_REQUEST_LINE_AND_HEADERS_BYTES} bytes, ` +
    "whatever the operation: a query string is bounded by this as well as by its parameters' lengths, " +
    "and the bearer token takes about a kilobyte of it. In AWS, API Gateway refuses such a request " +
    "itself, with its own answer, not this problem document; the function never sees it.",
};

/**
 * Statuses every operation can answer with a problem; 415 is added where the route takes a body.
 * 413 and 431: a body, or a request line and headers, over the size limits are refused before any
 * route sees them, whatever the method.
 */
const COMMON_ERROR_STATUSES = [400, 401, 403, 413, 431, 500, 503] as const;

const pascal = (name: string) => name.charAt(0).toUpperCase() + name.slice(1);
const ref = (prefix: string, name: string) => ({ $ref: `${prefix}${name}` });

/** The problem kind answered with `status`; exactly one must exist. */
function problemKindOf(status: number): ProblemKind {
  const kinds = (Object.keys(PROBLEM) as ProblemKind[]).filter((kind) => PROBLEM[kind].status === status);
  const [kind, ...others] = kinds;
  if (kind === undefined || others.length > 0) {
    throw new Error(`status ${status} must be answered by exactly one problem kind (found ${kinds.length})`);
  }
  return kind;
}

/**
 * The strings a value passes through unchanged, in order, when `schema` is a string schema that only
 * checks (no coercion, no trim or other rewrite) or a chain of pipes of such; otherwise undefined.
 */
function checkedStrings(schema: z.core.$ZodType): z.core.$ZodString[] | undefined {
  if (schema instanceof z.core.$ZodString) {
    if (schema._zod.def.coerce) return undefined;
    if ((schema._zod.def.checks ?? []).some((check) => check._zod.def.check === "overwrite"))
      return undefined;
    return [schema];
  }
  if (schema instanceof z.core.$ZodPipe) {
    const first = checkedStrings(schema._zod.def.in);
    const second = checkedStrings(schema._zod.def.out);
    return first && second ? [...first, ...second] : undefined;
  }
  return undefined;
}

/**
 * The document must refuse what the server refuses. Two shapes need help:
 * - zod describes a pipe's input by its first half only, so `storableText.pipe(characters(1, 128))`
 *   would lose the bounds the second half enforces. When every half is a string schema that only
 *   checks, the value reaching each is the value sent, so each one's keywords hold for the input:
 *   merge them all (a keyword two halves set differently, such as two patterns, goes under allOf).
 * - a {@link queryInteger} reads decimal digits and turns them into a number; a client sends the
 *   integer, so the document shows `type: integer` with its bounds and default.
 */
function exactInput(ctx: { zodSchema: z.core.$ZodTypes; jsonSchema: JsonSchema }): void {
  const integer = QUERY_INTEGERS.get(ctx.zodSchema);
  if (integer !== undefined) {
    const description = ctx.jsonSchema.description;
    for (const key of Object.keys(ctx.jsonSchema)) delete (ctx.jsonSchema as Record<string, unknown>)[key];
    Object.assign(ctx.jsonSchema, {
      ...(description !== undefined ? { description } : {}),
      type: "integer",
      ...integer,
    });
    return;
  }
  if (!(ctx.zodSchema instanceof z.core.$ZodPipe) || ctx.jsonSchema.type !== "string") return;
  const parts = checkedStrings(ctx.zodSchema);
  if (parts === undefined) return;
  const target: Record<string, unknown> = ctx.jsonSchema;
  for (const part of parts) {
    const keywords = convert(part, "input");
    for (const key of ["minLength", "maxLength", "pattern", "format"]) {
      const wanted = keywords[key];
      if (wanted === undefined) continue;
      const present = target[key];
      const elsewhere = (ctx.jsonSchema.allOf ?? []).some(
        (s) => typeof s === "object" && (s as Record<string, unknown>)[key] === wanted,
      );
      if (present === undefined) target[key] = wanted;
      else if (present !== wanted && !elsewhere)
        ctx.jsonSchema.allOf = [...(ctx.jsonSchema.allOf ?? []), { [key]: wanted }];
    }
  }
}

const conversionOptions = (io: "input" | "output") =>
  ({
    target: "draft-2020-12",
    io,
    unrepresentable: "any",
    ...(io === "input" ? { override: exactInput } : {}),
  }) as const;

/** One schema as JSON Schema, without `$schema`. */
function convert(schema: z.core.$ZodType, io: "input" | "output"): JsonSchema {
  const { $schema: _, ...json } = z.toJSONSchema(schema, conversionOptions(io)) as JsonSchema;
  return json;
}

/** Named schemas as JSON Schema, referring to one another under components.schemas. */
function convertNamed(
  named: ReadonlyMap<z.ZodType, string>,
  io: "input" | "output",
): Map<string, JsonSchema> {
  const registry = z.registry<{ id: string }>();
  for (const [schema, id] of named) registry.add(schema, { id });
  const { schemas } = z.toJSONSchema(registry, {
    ...conversionOptions(io),
    uri: (id) => `${SCHEMA_REF}${id}`,
  });
  const result = new Map<string, JsonSchema>();
  for (const id of named.values()) {
    const { $schema: _s, $id: _i, ...json } = (schemas[id] ?? {}) as JsonSchema;
    result.set(id, json);
  }
  return result;
}

/** Adds `schema` under `name` unless the name is taken by another schema. */
function nameSchema(names: Map<z.ZodType, string>, schema: z.ZodType, name: string): string {
  const existing = names.get(schema);
  if (existing !== undefined) return existing;
  if ([...names.values()].includes(name)) throw new Error(`two schemas would be named ${name}`);
  names.set(schema, name);
  return name;
}

const pathParameters = (path: string) => [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1] ?? "");

/** The problem responses an operation documents, by status. */
function errorStatuses(route: RouteSpec): number[] {
  const statuses = new Set<number>([...COMMON_ERROR_STATUSES, ...route.errors]);
  if (route.body) statuses.add(415);
  if (route.method === "POST") for (const status of IDEMPOTENCY_ERROR_STATUSES) statuses.add(status);
  return [...statuses].sort((a, b) => a - b);
}

function problemResponse(kind: ProblemKind): JsonObject {
  const headers = PROBLEM_HEADERS[kind];
  return {
    description: PROBLEM_DESCRIPTIONS[kind] ?? PROBLEM[kind].title,
    ...(headers ? { headers } : {}),
    content: {
      [PROBLEM_CONTENT_TYPE]: {
        schema: {
          allOf: [
            ref(SCHEMA_REF, "Problem"),
            {
              properties: {
                type: { const: problemType(kind) },
                title: { const: PROBLEM[kind].title },
                status: { const: PROBLEM[kind].status },
              },
            },
          ],
        },
      },
    },
  };
}

/**
 * The HEAD twin of a GET operation: the same parameters, permission and statuses, each response
 * with its headers but without a body.
 */
function headOperation(get: JsonObject): JsonObject {
  const responses: Record<string, JsonObject> = {};
  for (const status of Object.keys(get.responses as JsonObject)) {
    const code = Number(status);
    if (code < 400) {
      responses[status] = { description: "OK: the headers GET would answer with, without its body" };
      continue;
    }
    const kind = problemKindOf(code);
    const headers = PROBLEM_HEADERS[kind];
    responses[status] = {
      description: `${PROBLEM_DESCRIPTIONS[kind] ?? PROBLEM[kind].title} (no body)`,
      ...(headers ? { headers } : {}),
    };
  }
  return {
    ...get,
    operationId: `head${pascal(String(get.operationId))}`,
    summary: `Headers only: ${String(get.summary)}`,
    responses,
  };
}

export function buildOpenApiDocument(): object {
  // Name every schema an operation uses: shared ones by OUTPUT_NAMES / INPUT_NAMES, the others after
  // their operation. Query schemas are named only to be converted, then spread into parameters.
  const outputNames = new Map(OUTPUT_NAMES);
  const inputNames = new Map(INPUT_NAMES);
  const queryNames = new Set<string>();
  for (const route of ROUTES) {
    const base = pascal(route.operationId);
    nameSchema(outputNames, route.success.schema, `${base}Response`);
    if (route.body) nameSchema(inputNames, route.body, `${base}Request`);
    if (route.query) queryNames.add(nameSchema(inputNames, route.query, `${base}Query`));
  }
  const output = convertNamed(outputNames, "output");
  const input = convertNamed(inputNames, "input");

  const components = new Map<string, JsonSchema>(output);
  for (const [name, json] of input) {
    if (queryNames.has(name)) continue;
    const other = components.get(name);
    if (other !== undefined && JSON.stringify(other) !== JSON.stringify(json)) {
      throw new Error(`schema ${name} differs between requests and responses; give each its own name`);
    }
    components.set(name, json);
  }
  const schemaOf = (names: ReadonlyMap<z.ZodType, string>, schema: z.ZodType) =>
    ref(SCHEMA_REF, names.get(schema) ?? "");

  const usedProblems = new Set<ProblemKind>();
  const paths: Record<string, Record<string, JsonObject>> = {};
  for (const route of ROUTES) {
    const templated = pathParameters(route.path);
    const expected = route.hasId ? ["id"] : [];
    if (JSON.stringify(templated) !== JSON.stringify(expected)) {
      throw new Error(`${route.operationId}: path ${route.path} does not match hasId`);
    }

    const parameters: JsonObject[] = [];
    if (route.hasId) {
      const about = components.get("DeadLetterId")?.description;
      parameters.push({
        name: "id",
        in: "path",
        required: true,
        ...(about !== undefined ? { description: about } : {}),
        schema: schemaOf(inputNames, deadLetterIdSchema),
      });
    }
    if (route.method === "POST") {
      const { description: about, ...schema } = convert(idempotencyKeySchema, "input");
      parameters.push({
        name: IDEMPOTENCY.header,
        in: "header",
        required: false,
        ...(about !== undefined ? { description: about } : {}),
        schema,
      });
    }
    let description = route.description;
    if (route.query) {
      const query = input.get(inputNames.get(route.query) ?? "") ?? {};
      const required = new Set(query.required ?? []);
      for (const [name, property] of Object.entries(query.properties ?? {})) {
        const { description: about, ...schema } = typeof property === "object" ? property : {};
        parameters.push({
          name,
          in: "query",
          required: required.has(name),
          ...(about !== undefined ? { description: about } : {}),
          schema,
        });
      }
      if (query.additionalProperties === false)
        description = `${description} Query parameters not listed here are refused (400).`;
    } else {
      description = `${description} It takes no query parameters: any is refused (400).`;
    }

    const responses: Record<string, JsonObject> = {
      [String(route.success.status)]: {
        description: "OK",
        ...(route.method === "POST"
          ? {
              headers: {
                [IDEMPOTENCY.replayedHeader]: {
                  description:
                    "`true` when this is the response first given to the same request under the same Idempotency-Key, given again; absent otherwise.",
                  schema: { type: "string", const: "true" },
                },
              },
            }
          : {}),
        content: { [JSON_CONTENT_TYPE]: { schema: schemaOf(outputNames, route.success.schema) } },
      },
    };
    for (const status of errorStatuses(route)) {
      const kind = problemKindOf(status);
      usedProblems.add(kind);
      responses[String(status)] = ref(RESPONSE_REF, pascal(kind));
    }

    const operation: JsonObject = {
      operationId: route.operationId,
      summary: route.summary,
      description,
      tags: [route.tag],
      // OpenAPI: alternative security requirements, any one of which suffices.
      security: routePermissions(route).map((p) => ({ [BEARER]: [p] })),
      "x-required-permission": routePermissions(route).join(" | "),
      ...(parameters.length > 0 ? { parameters } : {}),
      ...(route.body
        ? {
            requestBody: {
              // An absent body is read as {} (request.ts): required exactly when {} is refused.
              required: !route.body.safeParse({}).success,
              content: { [JSON_CONTENT_TYPE]: { schema: schemaOf(inputNames, route.body) } },
            },
          }
        : {}),
      responses,
    };
    const item = paths[route.path] ?? {};
    const method = route.method.toLowerCase();
    if (item[method] !== undefined) throw new Error(`two routes for ${route.method} ${route.path}`);
    item[method] = operation;
    // The server answers HEAD wherever it answers GET (resolve.ts): documented beside it.
    if (route.method === "GET") item.head = headOperation(operation);
    paths[route.path] = item;
  }

  const problemKinds = [...usedProblems].sort((a, b) => PROBLEM[a].status - PROBLEM[b].status);
  const usedTags = new Set(ROUTES.map((route) => route.tag));
  return {
    openapi: "3.1.0",
    info: {
      title: OPENAPI_TITLE,
      version: OPENAPI_DOCUMENT_VERSION,
      description:
        "List, inspect, replay and discard the dead letters of jobfence's SQS consumers. " +
        "Generated from functions/dead-letters-api/routes.ts by `npm run openapi`; do not edit by hand. " +
        "The operator's guide is docs/api.md.",
      contact: { name: "The jobfence project" },
      license: { name: "Apache License 2.0", identifier: "Apache-2.0" },
    },
    servers: SERVERS,
    tags: Object.entries(ROUTE_TAGS)
      .filter(([name]) => usedTags.has(name as keyof typeof ROUTE_TAGS))
      .map(([name, description]) => ({ name, description })),
    paths,
    components: {
      schemas: Object.fromEntries([...components].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
      responses: Object.fromEntries(problemKinds.map((kind) => [pascal(kind), problemResponse(kind)])),
      securitySchemes: {
        [BEARER]: {
          type: "oauth2",
          description:
            "An OAuth 2.0 bearer token (`Authorization: Bearer <JWT>`): a JWT from the deployment's " +
            "issuer carrying `sub`, `iat` and `exp`, issued at most the maximum token age ago (12 hours " +
            "by default), whose `scope` claim (space-separated) or `permissions` array grants the " +
            "operation's permission (x-required-permission); its `sub` is recorded as the actor. " +
            "The permissions are this scheme's scopes. The API verifies tokens (signature, `iss`, " +
            "`aud`) and issues none: get one from the identity provider the deployment trusts, by " +
            "whatever grant it offers. The flow's `tokenUrl` is a placeholder for that provider's " +
            "token endpoint (for an OpenID Connect provider, the `token_endpoint` of " +
            "`<issuer>/.well-known/openid-configuration`).",
          flows: {
            clientCredentials: {
              tokenUrl: TOKEN_URL_PLACEHOLDER,
              scopes: Object.fromEntries(Object.values(PERMISSION).map((p) => [p, PERMISSION_SCOPES[p]])),
            },
          },
        },
      },
    },
  };
}

/** The document as docs/openapi.json holds it, before formatting: 2-space JSON and a final newline. */
export function renderOpenApiDocument(): string {
  return `${JSON.stringify(buildOpenApiDocument(), null, 2)}\n`;
}
