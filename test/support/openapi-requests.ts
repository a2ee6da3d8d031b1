/**
 * Requests generated from the API's OpenAPI document alone, as a client generated from it would
 * send them, and the document's own verdict on each: valid, or which part is not.
 *
 * Each operation's parameters and body are drawn from their JSON Schemas: mostly values the schema
 * allows, mixed with the near misses a careless or hostile client sends (a character past a bound,
 * U+0000, an unpaired surrogate, an astral character where a length is counted, year 0000, an offset
 * of +16:00, an integer written as 0x10 or 1e1, a rate of 1e-40, an unknown field). The verdict is
 * ajv's (JSON Schema 2020-12, patterns with the `u` flag, formats as annotations) on the document,
 * never the server's code, so a test comparing the two finds where they disagree.
 */
import { Ajv2020 } from "ajv/dist/2020.js";
import fc from "fast-check";

type Json = Record<string, unknown>;

/** One parameter or body schema of an operation, as the document has it. */
interface Parameter {
  readonly name: string;
  readonly in: "path" | "query" | "header";
  readonly required: boolean;
  readonly schema: Json;
}

/** An operation of the document. */
export interface DocumentOperation {
  readonly method: string;
  /** The path template, `{id}` and all. */
  readonly path: string;
  readonly operationId: string;
  readonly parameters: readonly Parameter[];
  /** The request body's schema; undefined when it takes none. */
  readonly body: Json | undefined;
  readonly bodyRequired: boolean;
  /** The statuses it documents. */
  readonly statuses: ReadonlySet<number>;
  /** The documented schema of each status's body. */
  readonly responses: ReadonlyMap<number, Json>;
}

/** A request drawn for an operation, with the document's verdict. */
export interface GeneratedRequest {
  readonly [fc.toStringMethod]: () => string;
  readonly operation: DocumentOperation;
  readonly method: string;
  /** The path and raw query string, percent-encoded. */
  readonly target: string;
  readonly headers: Record<string, string>;
  /** JSON text; undefined: no body sent. */
  readonly body: string | undefined;
  /** Empty when the document allows the request; otherwise the parts it refuses. */
  readonly invalid: readonly string[];
}

/** Parameters no schema can draw a value of that the server would take: values it issued and signed. */
export const OPAQUE_PARAMETERS: ReadonlySet<string> = new Set(["cursor"]);
/** Body fields of the same kind. */
export const OPAQUE_BODY_FIELDS: ReadonlySet<string> = new Set(["token"]);

/** The document's reader: ajv over the whole document, so `$ref`s resolve. */
export class DocumentContract {
  private readonly ajv: Ajv2020;
  private readonly compiled = new Map<string, (value: unknown) => boolean>();
  readonly operations: readonly DocumentOperation[];

  private readonly document: Json;

  constructor(document: Json) {
    this.document = document;
    this.ajv = new Ajv2020({
      strict: false,
      validateFormats: false,
      validateSchema: false,
      allErrors: false,
    });
    this.ajv.addSchema(document, "doc");
    this.operations = readOperations(document, (ref) => this.resolve(ref));
  }

  /** Whether `value` is valid against `schema` (which may hold `$ref`s into the document). */
  valid(schema: Json, value: unknown): boolean {
    const key = JSON.stringify(schema);
    let check = this.compiled.get(key);
    if (check === undefined) {
      const validate = this.ajv.compile({ $id: `s${this.compiled.size}`, ...rebase(schema) });
      check = (v) => validate(v) as boolean;
      this.compiled.set(key, check);
    }
    return check(value);
  }

  /** The schema a `$ref` into the document names. */
  resolve(ref: string): Json {
    const path = ref.replace(/^#\//, "").split("/");
    let at: unknown = this.document;
    for (const part of path) at = (at as Json)[part];
    return at as Json;
  }

  /** A fast-check arbitrary of requests to `operation`, valid and not. */
  requests(operation: DocumentOperation): fc.Arbitrary<GeneratedRequest> {
    // Half drawn clean (each part from what its schema allows, so most are valid whole), half with
    // near misses anywhere.
    return fc.oneof(this.drawn(operation, true), this.drawn(operation, false));
  }

  /**
   * Requests to `operation` in threes, for a test that can afford few runs and must still see both
   * verdicts every time: one the document allows, one it refuses (when the operation takes any
   * input), and one from {@link requests}. A plain draw of 40 can hold 3 valid ones or fewer (a
   * bulk replay's clean bodies are valid whole about 2 times in 5).
   */
  cases(operation: DocumentOperation): fc.Arbitrary<readonly GeneratedRequest[]> {
    const valid = this.drawn(operation, true).filter((r) => r.invalid.length === 0);
    const refused = this.drawn(operation, false).filter((r) => r.invalid.length > 0);
    const takesInput = operation.parameters.length > 0 || operation.body !== undefined;
    return takesInput
      ? fc.tuple(valid, refused, this.requests(operation))
      : fc.tuple(valid, this.requests(operation));
  }

  private drawn(operation: DocumentOperation, clean: boolean): fc.Arbitrary<GeneratedRequest> {
    const parts = operation.parameters
      .filter((p) => !OPAQUE_PARAMETERS.has(p.name))
      .map((p) => parameterValue(this, p, clean).map((value) => ({ parameter: p, value })));
    const bodyValue = drawValue(this, this.deref(operation.body ?? {}), 0, clean, OPAQUE_BODY_FIELDS);
    const body =
      operation.body === undefined
        ? fc.constant(undefined)
        : clean && operation.bodyRequired
          ? bodyValue
          : fc.option(bodyValue, { freq: 8 });
    return fc
      .tuple(fc.tuple(...parts), body)
      .map(([values, bodyValue]) => this.assemble(operation, values, bodyValue));
  }

  private deref(schema: Json): Json {
    return typeof schema.$ref === "string" ? this.deref(this.resolve(schema.$ref)) : schema;
  }

  private assemble(
    operation: DocumentOperation,
    values: readonly { parameter: Parameter; value: Drawn | undefined }[],
    bodyValue: unknown,
  ): GeneratedRequest {
    const invalid: string[] = [];
    let path = operation.path;
    const query: string[] = [];
    const headers: Record<string, string> = {};
    for (const { parameter, value } of values) {
      if (value === undefined) {
        if (parameter.required) invalid.push(`${parameter.name} (required, absent)`);
        continue;
      }
      if (!this.parameterValid(parameter, value.raw)) invalid.push(parameter.name);
      if (parameter.in === "path") path = path.replace(`{${parameter.name}}`, percentEncode(value.raw));
      else if (parameter.in === "query")
        query.push(`${percentEncode(parameter.name)}=${percentEncode(value.raw)}`);
      // Sent as its UTF-8 bytes, which the server reads one byte a character (as Node does).
      else headers[parameter.name] = Buffer.from(value.raw, "utf8").toString("latin1");
    }
    let body: string | undefined;
    if (bodyValue !== undefined && operation.body !== undefined) {
      body = JSON.stringify(bodyValue);
      if (!this.valid(operation.body, bodyValue)) invalid.push("body");
    } else if (operation.body !== undefined && operation.bodyRequired) {
      invalid.push("body (required, absent)");
    }
    return {
      // How fast-check prints a counterexample: the request as sent, not the whole operation.
      [fc.toStringMethod]: () =>
        `${operation.method} ${query.length > 0 ? `${path}?${query.join("&")}` : path}${body === undefined ? "" : ` ${body}`} (document: ${invalid.join(", ") || "valid"})`,
      operation,
      method: operation.method,
      target: query.length > 0 ? `${path}?${query.join("&")}` : path,
      headers: body === undefined ? headers : { ...headers, "content-type": "application/json" },
      body,
      invalid,
    };
  }

  /**
   * The document's verdict on a parameter's text as sent. A path, query or header value is text; a
   * parameter whose schema is a number or integer takes the text of one (`-?digits`, for an
   * integer), which must then be valid.
   */
  private parameterValid(parameter: Parameter, raw: string): boolean {
    const schema = this.deref(parameter.schema);
    if (schema.type === "integer") return /^-?[0-9]+$/.test(raw) && this.valid(parameter.schema, Number(raw));
    if (schema.type === "number") {
      return /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/.test(raw) && this.valid(parameter.schema, Number(raw));
    }
    if (parameter.in === "path" && raw === "") return false;
    return this.valid(parameter.schema, raw);
  }
}

/** `$ref: "#/…"` made to point into the document added as "doc". */
function rebase(schema: Json): Json {
  return JSON.parse(JSON.stringify(schema).replaceAll('"$ref":"#/', '"$ref":"doc#/')) as Json;
}

function readOperations(document: Json, resolve: (ref: string) => Json): DocumentOperation[] {
  const operations: DocumentOperation[] = [];
  const deref = (value: Json): Json => (typeof value.$ref === "string" ? deref(resolve(value.$ref)) : value);
  for (const [path, item] of Object.entries(document.paths as Record<string, Record<string, Json>>)) {
    for (const [method, op] of Object.entries(item)) {
      const parameters = ((op.parameters as Json[] | undefined) ?? []).map(
        (p) => deref(p) as unknown as Parameter,
      );
      const requestBody = op.requestBody as Json | undefined;
      const content = requestBody?.content as Record<string, Json> | undefined;
      const responses = new Map<number, Json>();
      for (const [status, response] of Object.entries(op.responses as Record<string, Json>)) {
        const media = (deref(response).content ?? {}) as Record<string, Json>;
        const first = Object.values(media)[0];
        if (first?.schema) responses.set(Number(status), first.schema as Json);
      }
      operations.push({
        method: method.toUpperCase(),
        path,
        operationId: String(op.operationId),
        parameters,
        body: content?.["application/json"]?.schema as Json | undefined,
        bodyRequired: requestBody?.required === true,
        statuses: new Set(Object.keys(op.responses as Json).map(Number)),
        responses,
      });
    }
  }
  return operations;
}

/** A parameter's value as text, as a client would send it. */
interface Drawn {
  readonly raw: string;
}

function parameterValue(
  contract: DocumentContract,
  parameter: Parameter,
  clean: boolean,
): fc.Arbitrary<Drawn | undefined> {
  const schema = (
    typeof parameter.schema.$ref === "string" ? contract.resolve(parameter.schema.$ref) : parameter.schema
  ) as Json;
  const text: fc.Arbitrary<string> =
    schema.type === "integer" || schema.type === "number"
      ? clean
        ? drawValue(contract, schema, 0, clean).map((n) => String(n))
        : fc.oneof(
            { weight: 3, arbitrary: drawValue(contract, schema, 0, clean).map((n) => String(n)) },
            {
              weight: 2,
              arbitrary: fc.constantFrom("0x10", "0b11", "1e1", "+5", " 5 ", "5.0", "", "-1", "0", "005"),
            },
          )
      : drawValue(contract, schema, 0, clean).map((v) => (typeof v === "string" ? v : JSON.stringify(v)));
  // A path segment that is empty, `.` or `..` is not a value of the parameter but another path
  // (URL normalisation folds it away); the routing tests cover those. A header value cannot hold a
  // control character, nor begin or end with white space (HTTP strips it): no client sends those.
  const sendable =
    parameter.in === "path"
      ? text.filter((raw) => !["", ".", ".."].includes(raw))
      : parameter.in === "header"
        ? text.filter((raw) => ![...raw].some((c) => c < " " || c === "\u007f") && raw === raw.trim())
        : text;
  const drawn = sendable.map((raw) => ({ raw }));
  if (clean) return parameter.required ? drawn : fc.option(drawn, { freq: 3 }).map((d) => d ?? undefined);
  return parameter.required
    ? fc.oneof({ weight: 19, arbitrary: drawn }, { weight: 1, arbitrary: fc.constant(undefined) })
    : fc.option(drawn, { freq: 3 }).map((d) => d ?? undefined);
}

/** Strings near a schema's bounds and rules, valid or just not. */
function stringValue(schema: Json, clean: boolean): fc.Arbitrary<unknown> {
  const min = typeof schema.minLength === "number" ? schema.minLength : 0;
  const max = typeof schema.maxLength === "number" ? schema.maxLength : 64;
  const patterns = [
    schema.pattern,
    ...((schema.allOf as Json[] | undefined) ?? []).map((s) => s.pattern),
  ].filter((p): p is string => typeof p === "string");
  const kinds: fc.WeightedArbitrary<unknown>[] = clean
    ? [
        {
          weight: 4,
          arbitrary: fc.string({
            unit: "grapheme-ascii",
            minLength: Math.max(min, 1),
            maxLength: Math.min(max, 40),
          }),
        },
      ]
    : [
        {
          weight: 6,
          arbitrary: fc.string({
            unit: "grapheme-ascii",
            minLength: Math.max(min, 0),
            maxLength: Math.min(max, 40),
          }),
        },
        {
          weight: 2,
          arbitrary: fc.string({
            unit: "grapheme",
            minLength: Math.max(min, 0),
            maxLength: Math.min(max, 20),
          }),
        },
        {
          weight: 1,
          arbitrary: fc.string({ unit: "binary", minLength: 0, maxLength: Math.min(max + 2, 12) }),
        },
        {
          weight: 2,
          arbitrary: fc.constantFrom(
            "\u0000",
            "a\u0000b",
            "\ud800",
            "x\udc00y",
            "ok \ud83d\ude00",
            "",
            " ",
            "\u200b",
            "x".repeat(max),
            "x".repeat(max + 1),
            "\ud83d\ude00".repeat(max),
            "\ud83d\ude00".repeat(max + 1),
            ` ${"r".repeat(Math.max(max - 1, 1))}.\n`,
          ),
        },
      ];
  for (const pattern of patterns) {
    // Patterns that shape a value (dates, ids, digests) are drawn from; the wide ones (storable
    // text, a visible character, a trimmed length) are met and missed by the strings above.
    if (/\\u0000|\\p\{|\\s\*/.test(pattern)) continue;
    // fast-check draws from a pattern without lookaheads: a leading one is dropped (it then also
    // draws what the lookahead refuses, such as year 0000, which the verdict catches).
    const drawable = pattern.replace(/^\^\(\?![^)]*\)/, "^");
    if (clean) kinds.length = 0;
    kinds.push({ weight: 8, arbitrary: fc.stringMatching(new RegExp(drawable)) });
  }
  if (schema.format === "date-time" && !clean) {
    kinds.push({
      weight: 2,
      arbitrary: fc.constantFrom(
        "0000-01-01T00:00:00Z",
        "0001-01-01T00:00:00Z",
        "2026-03-01T12:00:00+16:00",
        "2026-03-01T12:00:00-15:59",
        "2026-03-01T12:00:00+23:59",
        "2026-02-29T00:00:00Z",
        "2024-02-29T00:00:00Z",
        "2026-03-01t12:00:00z",
        "2026-03-01T12:00:00",
        "2026-03-01T24:00:00Z",
        "2026-03-01T12:00:00.123456Z",
        "2026-03-01T12:00:00.123456789Z",
        "2026-03-01T12:00:00.1234567891Z",
        `2026-03-01T12:00:00.${"0".repeat(130)}Z`,
      ),
    });
  }
  return fc.oneof(...kinds);
}

function numberValue(schema: Json, clean: boolean): fc.Arbitrary<unknown> {
  const integer = schema.type === "integer";
  const min = typeof schema.minimum === "number" ? schema.minimum : -1000;
  const max = typeof schema.maximum === "number" ? schema.maximum : 1000;
  const edges = [min, max, min - 1, max + 1, 0, -1, 1e-40, 1e-46, Number.MIN_VALUE, 2 ** 53, 1.5];
  const inRange = integer
    ? fc.integer({ min: Math.max(min, -1e6), max: Math.min(max, 1e6) })
    : fc.double({ min, max, noNaN: true, noDefaultInfinity: true });
  if (clean) return inRange;
  return fc.oneof({ weight: 6, arbitrary: inRange }, { weight: 2, arbitrary: fc.constantFrom(...edges) });
}

/** A value drawn from `schema`: mostly allowed by it, sometimes one step outside. */
function drawValue(
  contract: DocumentContract,
  raw: Json,
  depth: number,
  clean: boolean,
  opaque: ReadonlySet<string> = new Set(),
): fc.Arbitrary<unknown> {
  const schema = typeof raw.$ref === "string" ? contract.resolve(raw.$ref) : raw;
  if (Array.isArray(schema.enum)) {
    if (clean) return fc.constantFrom(...schema.enum);
    return fc.oneof(
      { weight: 7, arbitrary: fc.constantFrom(...schema.enum) },
      { weight: 3, arbitrary: fc.constantFrom("nope", "", String(schema.enum[0]).toUpperCase()) },
    );
  }
  if ("const" in schema) return fc.constant(schema.const);
  const types = Array.isArray(schema.type) ? (schema.type as string[]) : [schema.type as string | undefined];
  const one = (type: string | undefined): fc.Arbitrary<unknown> => {
    switch (type) {
      case "string":
        return stringValue(schema, clean);
      case "integer":
      case "number":
        return numberValue(schema, clean);
      case "boolean":
        if (clean) return fc.boolean();
        return fc.oneof(
          { weight: 9, arbitrary: fc.boolean() },
          { weight: 1, arbitrary: fc.constant("true") },
        );
      case "null":
        return fc.constant(null);
      case "array":
        return fc.array(drawValue(contract, (schema.items as Json) ?? {}, depth + 1, clean), {
          maxLength: 3,
        });
      case "object": {
        const properties = (schema.properties ?? {}) as Record<string, Json>;
        const entries = Object.entries(properties).filter(([name]) => !opaque.has(name));
        const required = ((schema.required ?? []) as string[]).filter((name) => name in properties);
        const record = fc.record(
          Object.fromEntries(entries.map(([name, s]) => [name, drawValue(contract, s, depth + 1, clean)])),
          { requiredKeys: clean ? required : [] },
        );
        if (clean) return record;
        return fc.oneof(
          { weight: 9, arbitrary: record },
          { weight: 1, arbitrary: record.map((r) => ({ ...r, unexpected_field: 1 })) },
        );
      }
      default:
        return fc.oneof(fc.constant({}), fc.string({ maxLength: 5 }), fc.integer());
    }
  };
  const drawn = types.length === 1 ? one(types[0]) : fc.oneof(...types.map(one));
  // Now and then a value of another type altogether.
  return clean || depth > 2
    ? drawn
    : fc.oneof({ weight: 19, arbitrary: drawn }, { weight: 1, arbitrary: fc.constantFrom(7, "7", [], null) });
}

/**
 * Percent-encodes text for a URL. A well-formed string as UTF-8; an unpaired surrogate has no UTF-8
 * form, so it goes as the three bytes a careless encoder writes for it (invalid UTF-8: the server
 * must refuse it, as the document refuses the surrogate).
 */
export function percentEncode(text: string): string {
  let out = "";
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    const next = text.charCodeAt(i + 1);
    if (unit >= 0xd800 && unit <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
      out += encodeURIComponent(text.slice(i, i + 2));
      i += 1;
    } else if (unit >= 0xd800 && unit <= 0xdfff) {
      out += `%${(0xe0 | (unit >> 12)).toString(16).toUpperCase()}%${(0x80 | ((unit >> 6) & 0x3f)).toString(16).toUpperCase()}%${(0x80 | (unit & 0x3f)).toString(16).toUpperCase()}`;
    } else {
      out += encodeURIComponent(text[i] as string);
    }
  }
  return out;
}
