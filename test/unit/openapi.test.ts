/**
 * The OpenAPI document (docs/openapi.json) against the code: it must be exactly what
 * buildOpenApiDocument() gives, cover every route faithfully, and hold together as OpenAPI 3.1.
 * Also checks that the examples in docs/api.md are valid against the same zod schemas.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  buildOpenApiDocument,
  OPENAPI_DOCUMENT_PATH,
  OPENAPI_DOCUMENT_VERSION,
  OPENAPI_TITLE,
  problemSchema,
  renderOpenApiDocument,
} from "../../functions/dead-letters-api/openapi.ts";
import { ROUTES, type RouteSpec, routePermissions } from "../../functions/dead-letters-api/routes.ts";
import { idempotencyKeySchema } from "../../shared/dead-letters/api-schemas.ts";
import { PROBLEM, type ProblemKind } from "../../shared/errors/http.ts";
import { PERMISSION } from "../../shared/http/auth.ts";
import { problemType } from "../../shared/http/problem.ts";

type Json = Record<string, unknown>;

const root = new URL("../../", import.meta.url);
const read = (path: string) => readFileSync(new URL(path, root), "utf8");
const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value);
const objectAt = (value: unknown, what: string): Json => {
  if (!isObject(value)) throw new Error(`${what} is not an object`);
  return value;
};

const doc = objectAt(buildOpenApiDocument(), "the document");
const METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/** Every operation of the document, with its path and method. */
function operations(): Array<{ path: string; method: string; operation: Json }> {
  const found: Array<{ path: string; method: string; operation: Json }> = [];
  for (const [path, item] of Object.entries(objectAt(doc.paths, "paths"))) {
    for (const [method, operation] of Object.entries(objectAt(item, path))) {
      if (METHODS.includes(method)) found.push({ path, method, operation: objectAt(operation, method) });
    }
  }
  return found;
}

function operationOf(route: RouteSpec): Json {
  const item = objectAt(objectAt(doc.paths, "paths")[route.path], route.path);
  return objectAt(item[route.method.toLowerCase()], `${route.method} ${route.path}`);
}

/** The value a local reference (`#/a/b`) points to within the document. */
function resolvePointer(ref: string): unknown {
  if (!ref.startsWith("#/")) throw new Error(`${ref} is not a reference within the document`);
  let node: unknown = doc;
  for (const raw of ref.slice(2).split("/")) {
    const key = decodeURIComponent(raw).replaceAll("~1", "/").replaceAll("~0", "~");
    if (!isObject(node) || !Object.hasOwn(node, key)) throw new Error(`${ref} does not resolve`);
    node = node[key];
  }
  return node;
}

/** Follows `$ref` (possibly several in a row) to the object it names. */
function deref(value: unknown): Json {
  let node = value;
  for (let hops = 0; isObject(node) && typeof node.$ref === "string"; hops++) {
    if (hops > 10) throw new Error("reference cycle");
    node = resolvePointer(node.$ref);
  }
  return objectAt(node, "referenced value");
}

/** Every `$ref` string in a value. */
function refsIn(value: unknown, found: string[] = []): string[] {
  if (Array.isArray(value)) for (const item of value) refsIn(item, found);
  else if (isObject(value)) {
    for (const [key, inner] of Object.entries(value)) {
      if (key === "$ref" && typeof inner === "string") found.push(inner);
      else refsIn(inner, found);
    }
  }
  return found;
}

describe("docs/openapi.json", () => {
  const stale = "docs/openapi.json does not match the code: run `npm run openapi` and commit the result";

  it("is what the code generates (run `npm run openapi` after changing routes or schemas)", () => {
    let committed: string;
    try {
      committed = read(OPENAPI_DOCUMENT_PATH);
    } catch {
      throw new Error(`${OPENAPI_DOCUMENT_PATH} is missing: run \`npm run openapi\` and commit it`);
    }
    const parsed: unknown = JSON.parse(committed);
    expect(parsed, stale).toEqual(doc);
    // toEqual ignores key order; the committed file must also keep the generator's order.
    expect(JSON.stringify(parsed), stale).toBe(JSON.stringify(doc));
    expect(committed.endsWith("}\n"), `${stale} (it must end with one newline)`).toBe(true);
    // Byte for byte: the API serves these bytes at GET /v1/core/openapi.json.
    expect(committed, stale).toBe(renderOpenApiDocument());
  });

  it("is built the same way every time", () => {
    expect(JSON.stringify(buildOpenApiDocument())).toBe(JSON.stringify(doc));
  });
});

describe("the OpenAPI document", () => {
  it("is OpenAPI 3.1 with the API's title and version and an OAuth 2.0 bearer JWT scheme", () => {
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.info).toMatchObject({ title: OPENAPI_TITLE, version: OPENAPI_DOCUMENT_VERSION });
    const components = objectAt(doc.components, "components");
    const scheme = objectAt(objectAt(components.securitySchemes, "securitySchemes").bearer, "bearer");
    // OpenAPI gives scopes to oauth2 schemes only: the permissions are declared as its scopes.
    expect(scheme.type).toBe("oauth2");
    expect(scheme.description).toEqual(expect.stringContaining("`Authorization: Bearer <JWT>`"));
    const flows = objectAt(scheme.flows, "flows");
    expect(Object.keys(flows)).toEqual(["clientCredentials"]);
    const flow = objectAt(flows.clientCredentials, "clientCredentials");
    // The token endpoint is the deployment's identity provider's: a placeholder that cannot resolve.
    expect(new URL(String(flow.tokenUrl)).hostname.endsWith(".invalid")).toBe(true);
    const scopes = objectAt(flow.scopes, "scopes");
    expect(Object.keys(scopes).sort()).toEqual(Object.values(PERMISSION).sort());
    for (const [scope, about] of Object.entries(scopes)) {
      expect(typeof about === "string" && about.length > 0, scope).toBe(true);
    }
  });

  it("names its servers, its licence and its contact, and lists every operation under a described tag", () => {
    const servers = doc.servers as Json[];
    const [deployed, local] = servers;
    // A deployment's host is its own (the stack output ApiUrl); the default never resolves.
    expect(deployed).toMatchObject({
      url: "https://{host}",
      variables: { host: { default: "jobfence-api.invalid" } },
    });
    expect(String(objectAt(objectAt(deployed?.variables, "variables").host, "host").description)).toContain(
      "ApiUrl",
    );
    expect(local).toMatchObject({ url: "http://127.0.0.1:{port}", variables: { port: { default: "8787" } } });
    expect(doc.info).toMatchObject({
      license: { identifier: "Apache-2.0" },
      contact: { name: expect.any(String) },
    });
    const tags = (doc.tags as Json[]).map((tag) => tag.name);
    for (const tag of doc.tags as Json[])
      expect(String(tag.description).length, String(tag.name)).toBeGreaterThan(0);
    for (const route of ROUTES) {
      const operation = operationOf(route);
      expect(operation.tags).toEqual([route.tag]);
      expect(tags).toContain(route.tag);
      expect(String(operation.description)).toContain(route.description);
    }
    // Only tags some operation uses are declared.
    expect(new Set(tags)).toEqual(new Set(ROUTES.map((route) => route.tag)));
  });

  it("has every route with its method, path, operationId and required permission, and nothing else", () => {
    for (const route of ROUTES) {
      const operation = operationOf(route);
      expect(operation.operationId).toBe(route.operationId);
      expect(operation.summary).toBe(route.summary);
      const permissions = routePermissions(route);
      expect(operation["x-required-permission"]).toBe(permissions.join(" | "));
      // Alternatives: any one of the listed permissions admits the call.
      expect(operation.security).toEqual(permissions.map((p) => ({ bearer: [p] })));
    }
    const documented = operations().map((o) => `${o.method.toUpperCase()} ${o.path}`);
    const served = ROUTES.flatMap((r) => [
      `${r.method} ${r.path}`,
      ...(r.method === "GET" ? [`HEAD ${r.path}`] : []),
    ]);
    expect(documented.sort()).toEqual(served.sort());
    expect(operations()).toHaveLength(served.length);
  });

  it("documents HEAD beside every GET: its parameters, permission and statuses, without bodies", () => {
    for (const route of ROUTES.filter((r) => r.method === "GET")) {
      const get = operationOf(route);
      const item = objectAt(objectAt(doc.paths, "paths")[route.path], route.path);
      const head = objectAt(item.head, `HEAD ${route.path}`);
      expect(head.operationId).toBe(
        `head${route.operationId.charAt(0).toUpperCase()}${route.operationId.slice(1)}`,
      );
      expect(head.security).toEqual(get.security);
      expect(head["x-required-permission"]).toBe(get["x-required-permission"]);
      expect(head.parameters).toEqual(get.parameters);
      const responses = objectAt(head.responses, "responses");
      expect(Object.keys(responses)).toEqual(Object.keys(objectAt(get.responses, "responses")));
      for (const [status, response] of Object.entries(responses)) {
        expect(objectAt(response, status).content, `HEAD ${route.path} ${status}`).toBeUndefined();
      }
      expect(objectAt(responses["401"], "401").headers).toHaveProperty("WWW-Authenticate");
    }
  });

  it("documents 400, 401, 403, 413, 500 and 503 on every operation as problem+json, and each route's own errors", () => {
    for (const route of ROUTES) {
      const responses = objectAt(operationOf(route).responses, "responses");
      const statuses = [400, 401, 403, 413, 500, 503, ...route.errors, ...(route.body ? [415] : [])];
      for (const status of statuses) {
        const response = deref(responses[String(status)]);
        const kind = (Object.keys(PROBLEM) as ProblemKind[]).find((k) => PROBLEM[k].status === status);
        expect(kind, `a problem kind answers ${status}`).toBeDefined();
        const media = objectAt(objectAt(response.content, "content")["application/problem+json"], "media");
        expect(refsIn(media.schema)).toContain("#/components/schemas/Problem");
        expect(JSON.stringify(media.schema)).toContain(JSON.stringify(problemType(kind as ProblemKind)));
      }
      const success = deref(responses[String(route.success.status)]);
      expect(objectAt(success.content, "content")["application/json"]).toBeDefined();
    }
  });

  it("documents Idempotency-Key on every POST as the handler validates it, its 409 and 422, and Idempotent-Replayed", () => {
    const samples = [
      "",
      "a",
      "~".repeat(255),
      "x".repeat(256),
      "two words",
      "tab\tkey",
      "clé",
      "k-1_2.3:4/5=6",
    ];
    for (const route of ROUTES) {
      const operation = operationOf(route);
      const header = ((operation.parameters as unknown[]) ?? [])
        .map(deref)
        .find((p) => p.in === "header" && p.name === "Idempotency-Key");
      if (route.method !== "POST") {
        expect(header, `${route.operationId} takes no key`).toBeUndefined();
        continue;
      }
      expect(header, route.operationId).toMatchObject({ required: false, description: expect.any(String) });
      const schema = objectAt(header?.schema, "the header's schema");
      const accepts = (value: string) =>
        value.length >= Number(schema.minLength) &&
        value.length <= Number(schema.maxLength) &&
        new RegExp(String(schema.pattern), "u").test(value);
      for (const value of samples) {
        expect(accepts(value), `${route.operationId}: ${JSON.stringify(value)}`).toBe(
          idempotencyKeySchema.safeParse(value).success,
        );
      }
      const responses = objectAt(operation.responses, "responses");
      expect(deref(responses["409"]).description, route.operationId).toBe(PROBLEM.conflict.title);
      expect(deref(responses["422"]).description, route.operationId).toBe(PROBLEM.idempotencyKeyReused.title);
      const success = deref(responses[String(route.success.status)]);
      expect(objectAt(success.headers, "success headers")).toHaveProperty("Idempotent-Replayed");
    }
  });

  it("says how large a body may be, and what API Gateway answers above it", () => {
    for (const route of ROUTES) {
      const tooLarge = deref(objectAt(operationOf(route).responses, "responses")["413"]);
      expect(tooLarge.description, `${route.method} ${route.path}`).toMatch(/over 10485760 bytes \(10 MB\)/);
      expect(tooLarge.description).toMatch(/API Gateway refuses it itself/);
    }
  });

  it("says 401 answers carry WWW-Authenticate and 503 answers Retry-After", () => {
    const responses = objectAt(objectAt(doc.components, "components").responses, "responses");
    expect(objectAt(responses.Unauthenticated, "401").headers).toHaveProperty("WWW-Authenticate");
    expect(objectAt(responses.Unavailable, "503").headers).toHaveProperty("Retry-After");
  });

  it("gives the list's limit 1–500, default 50, and its filters as optional query parameters", () => {
    const list = operationOf(ROUTES.find((r) => r.operationId === "listDeadLetters") as RouteSpec);
    const parameters = (list.parameters as Json[]).filter((p) => p.in === "query");
    const limit = parameters.find((p) => p.name === "limit");
    expect(limit).toMatchObject({ required: false, schema: { minimum: 1, maximum: 500, default: 50 } });
    expect(parameters.map((p) => p.name)).toEqual(
      expect.arrayContaining(["status", "consumer", "error_kind", "created_after", "cursor"]),
    );
    expect(parameters.every((p) => p.required === false)).toBe(true);
    // The bounds zod checks after storableText's pipe are documented too.
    expect(parameters.find((p) => p.name === "consumer")).toMatchObject({
      schema: { type: "string", minLength: 1, maxLength: 128 },
    });
  });

  it("requires a reason in the discard bodies, and documents the bulk bodies' defaults", () => {
    const discard = operationOf(ROUTES.find((r) => r.operationId === "discardDeadLetter") as RouteSpec);
    const body = objectAt(discard.requestBody, "requestBody");
    expect(body.required).toBe(true);
    const schema = deref(objectAt(objectAt(body.content, "content")["application/json"], "media").schema);
    expect(schema.required).toEqual(["reason"]);
    // 1–2000 characters once trimmed, as the server counts: the bound is a pattern, not maxLength,
    // since a reason is stored trimmed and a maxLength would refuse "  <2000 characters>\n".
    const reasonBounds = {
      type: "string",
      allOf: expect.arrayContaining([{ pattern: "^\\s*[^\\s](?:[\\s\\S]{0,1998}[^\\s])?\\s*$" }]),
    };
    expect(schema).toMatchObject({ properties: { reason: reasonBounds } });

    const bodyOf = (operationId: string) => {
      const operation = operationOf(ROUTES.find((r) => r.operationId === operationId) as RouteSpec);
      const requestBody = objectAt(operation.requestBody, "requestBody");
      return deref(objectAt(objectAt(requestBody.content, "content")["application/json"], "m").schema);
    };
    expect(bodyOf("startBulkReplay")).toMatchObject({
      additionalProperties: false,
      properties: {
        rate_per_second: { default: 50, minimum: 0.01, maximum: 1000 },
        delay_seconds: { default: 0, minimum: 0, maximum: 900 },
      },
    });
    const discardBulk = bodyOf("startBulkDiscard");
    expect(discardBulk).toMatchObject({
      additionalProperties: false,
      properties: {
        rate_per_second: { default: 200, minimum: 0.01, maximum: 1000 },
        reason: reasonBounds,
      },
    });
    expect(discardBulk.required).toContain("reason");
  });

  it("has unique operationIds", () => {
    const ids = operations().map((o) => o.operation.operationId);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.every((id) => typeof id === "string" && /^[A-Za-z][A-Za-z0-9]*$/.test(id))).toBe(true);
  });

  it("resolves every $ref within the document", () => {
    const refs = refsIn(doc);
    expect(refs.length).toBeGreaterThan(0);
    for (const ref of refs) expect(() => resolvePointer(ref), ref).not.toThrow();
  });

  it("declares every path parameter, and only those, as required", () => {
    for (const { path, method, operation } of operations()) {
      const templated = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
      const item = objectAt(objectAt(doc.paths, "paths")[path], path);
      const declared = [
        ...((item.parameters as unknown[]) ?? []),
        ...((operation.parameters as unknown[]) ?? []),
      ]
        .map(deref)
        .filter((p) => p.in === "path");
      expect(declared.map((p) => p.name).sort(), `${method} ${path}`).toEqual([...templated].sort());
      for (const p of declared) expect(p.required, `${method} ${path} {${String(p.name)}}`).toBe(true);
    }
  });

  it("keeps the structure OpenAPI 3.1 requires of parameters, bodies and responses", () => {
    const components = objectAt(doc.components, "components");
    const schemes = objectAt(components.securitySchemes, "securitySchemes");
    for (const { path, method, operation } of operations()) {
      const where = `${method} ${path}`;
      const parameters = ((operation.parameters as unknown[]) ?? []).map(deref);
      const keys = parameters.map((p) => `${String(p.in)}:${String(p.name)}`);
      expect(new Set(keys).size, `${where}: parameters are unique by name and location`).toBe(keys.length);
      for (const p of parameters) {
        expect(["query", "header", "path", "cookie"], where).toContain(p.in);
        expect(typeof p.name, where).toBe("string");
        expect(isObject(p.schema) !== isObject(p.content), `${where}: schema or content`).toBe(true);
      }
      if (operation.requestBody !== undefined) {
        const body = deref(operation.requestBody);
        expect(Object.keys(objectAt(body.content, `${where} body content`)).length).toBeGreaterThan(0);
      }
      const responses = objectAt(operation.responses, `${where} responses`);
      expect(
        Object.keys(responses).some((s) => /^2\d\d$/.test(s)),
        `${where}: a success response`,
      ).toBe(true);
      for (const [status, response] of Object.entries(responses)) {
        expect(status, where).toMatch(/^([1-5]\d\d|[1-5]XX|default)$/);
        expect(typeof deref(response).description, `${where} ${status}: description`).toBe("string");
      }
      for (const requirement of (operation.security as Json[]) ?? []) {
        for (const scheme of Object.keys(requirement)) expect(schemes, where).toHaveProperty(scheme);
      }
    }
    for (const [name, schema] of Object.entries(objectAt(components.schemas, "schemas"))) {
      expect(name).toMatch(/^[a-zA-Z0-9._-]+$/);
      // A generated $schema or a fragment $id would be wrong inside an OpenAPI document.
      expect(schema, name).not.toHaveProperty("$schema");
      expect(schema, name).not.toHaveProperty("$id");
    }
  });
});

describe("docs/api.md examples", () => {
  const markdown = read("docs/api.md");
  const blocks = [...markdown.matchAll(/(?:<!-- ([a-z]+)(?:: (\w+))? -->\s*)?```(\w+)\n([\s\S]*?)```/g)].map(
    (m) => ({ tag: m[1], operationId: m[2], lang: m[3], text: m[4] ?? "" }),
  );
  const templateMatches = (template: string, path: string) =>
    new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`).test(path);
  /** The route a request line reaches: a static path wins over a template (…/stats, …/replay). */
  const routeFor = (method: string | undefined, path: string) =>
    ROUTES.find((r) => r.method === method && r.path === path) ??
    ROUTES.find((r) => r.method === method && templateMatches(r.path, path));
  const requestLine = (text: string) => {
    const [head = "", ...rest] = text.split("\n");
    const [method, target = ""] = head.split(" ");
    const [path = "", query] = target.split("?");
    return { head, rest, method, path, query, route: routeFor(method, path) };
  };

  it("has a request and a response example for every operation", () => {
    const requested = new Set<string>();
    const answered = new Set<string>();
    for (const block of blocks) {
      if (block.tag === "response" && block.operationId) answered.add(block.operationId);
      if (block.lang !== "http") continue;
      const { route } = requestLine(block.text);
      if (route) requested.add(route.operationId);
    }
    for (const route of ROUTES) {
      expect(requested, `docs/api.md: a request example for ${route.operationId}`).toContain(
        route.operationId,
      );
      expect(answered, `docs/api.md: a response example for ${route.operationId}`).toContain(
        route.operationId,
      );
    }
  });

  it("sends only requests the handlers accept", () => {
    for (const block of blocks.filter((b) => b.lang === "http")) {
      const { head, rest, query, route } = requestLine(block.text);
      expect(route, `docs/api.md: no route answers ${head}`).toBeDefined();
      if (!route) continue;
      const params = Object.fromEntries(new URLSearchParams(query ?? ""));
      if (route.query) expect(route.query.safeParse(params).error, head).toBeUndefined();
      else expect(params, `${head}: takes no query`).toEqual({});
      const blank = rest.indexOf("");
      const bodyText =
        blank >= 0
          ? rest
              .slice(blank + 1)
              .join("\n")
              .trim()
          : "";
      if (route.body) expect(route.body.safeParse(JSON.parse(bodyText || "{}")).error, head).toBeUndefined();
      else expect(bodyText, `${head}: takes no body`).toBe("");
    }
  });

  it("shows responses exactly as the success schemas describe them", () => {
    for (const block of blocks.filter((b) => b.tag === "response")) {
      const route = ROUTES.find((r) => r.operationId === block.operationId);
      expect(route, `docs/api.md: unknown operation ${block.operationId}`).toBeDefined();
      const example: unknown = JSON.parse(block.text);
      const parsed = route?.success.schema.safeParse(example);
      expect(parsed?.error, `${block.operationId} example`).toBeUndefined();
      // The schemas strip unknown keys, so equality also catches a field the API never returns.
      expect(parsed?.data, `${block.operationId} example has only documented fields`).toEqual(example);
    }
  });

  it("shows problems as the API writes them", () => {
    const problems = blocks.filter((b) => b.tag === "problem");
    expect(problems.length).toBeGreaterThan(0);
    for (const block of problems) {
      const example = objectAt(JSON.parse(block.text), "problem example");
      expect(problemSchema.safeParse(example).error).toBeUndefined();
      const kind = (Object.keys(PROBLEM) as ProblemKind[]).find((k) => PROBLEM[k].status === example.status);
      expect(kind).toBeDefined();
      expect(example).toMatchObject({
        type: problemType(kind as ProblemKind),
        title: PROBLEM[kind as ProblemKind].title,
      });
    }
  });
});
