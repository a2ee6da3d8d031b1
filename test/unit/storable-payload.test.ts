import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MAX_STORED_DEPTH, nestingDepth, storablePayload } from "../../shared/envelope/storable-payload.ts";

/** The stored document, parsed. */
function stored(body: string): Record<string, unknown> {
  const document: unknown = JSON.parse(storablePayload(body));
  expect(isPlainObject(document)).toBe(true);
  return document as Record<string, unknown>;
}

function isPlainObject(value: unknown): boolean {
  return (
    typeof value === "object" &&
    value !== null &&
    !Array.isArray(value) &&
    Object.getPrototypeOf(value) === Object.prototype
  );
}

/** Objects nested `depth` deep: `{"a":{"a":…{}…}}`. */
function nestedObjects(depth: number): string {
  return `${'{"a":'.repeat(depth - 1)}{}${"}".repeat(depth - 1)}`;
}

/** A `\u0000` escape that JSON text would decode to U+0000 (not preceded by an escaping backslash). */
const NUL_ESCAPE = /(?<!\\)(?:\\\\)*\\u0000/;

/** Every string in `value`, keys included. */
function stringsIn(value: unknown): string[] {
  if (typeof value === "string") return [value];
  if (Array.isArray(value)) return value.flatMap(stringsIn);
  if (typeof value === "object" && value !== null) {
    return Object.entries(value).flatMap(([key, inner]) => [key, ...stringsIn(inner)]);
  }
  return [];
}

describe("MAX_STORED_DEPTH", () => {
  it("is 100", () => {
    expect(MAX_STORED_DEPTH).toBe(100);
  });
});

describe("storablePayload: a JSON object jsonb can hold", () => {
  it.each([
    '{"job_id":"award:order-8812","tenant_id":"t_42","payload":{"amount":5}}',
    "{}",
    '{ "spaced" : [ 1 , 2 ] ,\n  "nested": { "deep": true } }\n',
    '{"emoji":"🎉","accents":"naïve","escaped":"line\\nbreak \\"quoted\\" \\u00e9"}',
    '{"pair":"\\ud83d\\ude00"}',
    '{"path":"C:\\\\u0000dir","pattern":"\\\\ud800"}',
  ])("is passed through as its original text: %s", (body) => {
    expect(storablePayload(body)).toBe(body);
  });

  it("keeps every digit of a large integer", () => {
    const body = '{"job_id":"j","payload":{"id":12345678901234567890}}';
    const result = storablePayload(body);
    expect(result).toBe(body);
    expect(result).toContain("12345678901234567890");
  });

  it("keeps an object nested exactly MAX_STORED_DEPTH deep", () => {
    const body = nestedObjects(MAX_STORED_DEPTH);
    expect(nestingDepth(body)).toBe(MAX_STORED_DEPTH);
    expect(storablePayload(body)).toBe(body);
  });
});

describe("storablePayload: anything else is stored as {raw: text}", () => {
  it.each(["42", "-1.5e3", "null", "true", '"a string"', "[]", '[{"job_id":"j"}]'])(
    "JSON that is not an object (%s)",
    (body) => {
      expect(stored(body)).toEqual({ raw: body });
    },
  );

  it.each(["", "hello", "{", "{'job_id':'x'}", '{"a":1,}', "NaN", "{} {}"])(
    "text that is not JSON (%j)",
    (body) => {
      expect(stored(body)).toEqual({ raw: body });
    },
  );

  it("a literal U+0000 is escaped to the six characters \\u0000 and flagged", () => {
    expect(stored("a\u0000b\u0000")).toEqual({ raw: "a\\u0000b\\u0000", nul: "escaped" });
  });

  it("a literal U+0000 inside what would be a JSON string makes it raw too (JSON forbids it unescaped)", () => {
    expect(stored('{"a":"x\u0000"}')).toEqual({ raw: '{"a":"x\\u0000"}', nul: "escaped" });
  });

  it("lone surrogates become U+FFFD and are flagged", () => {
    expect(stored("a\ud800b\udfff")).toEqual({ raw: "a\ufffdb\ufffd", surrogates: "replaced" });
  });

  it("a JSON object holding a literal lone surrogate is raw with it replaced", () => {
    expect(stored('{"a":"x\ud800"}')).toEqual({ raw: '{"a":"x\ufffd"}', surrogates: "replaced" });
  });

  it("U+0000 and a lone surrogate together are both flagged", () => {
    expect(stored("\u0000\udc00")).toEqual({ raw: "\\u0000\ufffd", nul: "escaped", surrogates: "replaced" });
  });

  it.each([
    ["a \\u0000 escape in a value", '{"a":"x\\u0000y"}'],
    ["a \\u0000 escape in a key", '{"\\u0000":1}'],
    ["a \\u0000 escape deep inside", '{"a":[{"b":"\\u0000"}]}'],
    ["a lone high surrogate escape", '{"a":"\\ud800"}'],
    ["a lone low surrogate escape", '{"a":"\\udc00x"}'],
    ["an upper-case lone surrogate escape", '{"a":"\\uDBFF"}'],
  ])("a JSON object with %s is stored raw as its text, unflagged", (_label, body) => {
    expect(stored(body)).toEqual({ raw: body });
  });

  it("an object nested deeper than MAX_STORED_DEPTH", () => {
    const body = nestedObjects(MAX_STORED_DEPTH + 1);
    expect(stored(body)).toEqual({ raw: body });
  });

  it("an object holding arrays nested deeper than MAX_STORED_DEPTH", () => {
    const body = `{"a":${"[".repeat(MAX_STORED_DEPTH)}${"]".repeat(MAX_STORED_DEPTH)}}`;
    expect(nestingDepth(body)).toBe(MAX_STORED_DEPTH + 1);
    expect(stored(body)).toEqual({ raw: body });
  });

  it("a hostile depth of 100 000 does not exhaust the stack", () => {
    const body = `${"[".repeat(100_000)}${"]".repeat(100_000)}`;
    expect(stored(body)).toEqual({ raw: body });
  });
});

describe("nestingDepth", () => {
  it.each<[string, number]>([
    ["", 0],
    ["42", 0],
    ['"[{"', 0],
    ["{}", 1],
    ["[]", 1],
    ["[[{}]]", 3],
    ["[[],[],[]]", 2],
    ['{"a":[1,2],"b":{"c":[]}}', 3],
    ['{"a":"[[[[{{{{"}', 1],
    ['{"a":"\\"[[[["}', 1],
    ['{"a":"\\\\"}', 1],
    ['["\\\\",[[]]]', 3],
    ['{"\\"}":{"x":"]]]"}}', 2],
    ["[[[", 3],
  ])("of %j is %i", (text, expected) => {
    expect(nestingDepth(text)).toBe(expected);
  });

  it("property: equals the real nesting of any JSON value", () => {
    function depthOf(value: unknown): number {
      if (Array.isArray(value)) return 1 + Math.max(0, ...value.map(depthOf));
      if (typeof value === "object" && value !== null)
        return 1 + Math.max(0, ...Object.values(value).map(depthOf));
      return 0;
    }
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 8 }), (value) => {
        expect(nestingDepth(JSON.stringify(value))).toBe(depthOf(value));
      }),
      { numRuns: 500 },
    );
  });
});

/** Code units of any kind, lone surrogates and U+0000 included. */
const anyUtf16 = fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)) });

const anyBody = fc.oneof(
  fc.string(),
  fc.string({ unit: "binary" }),
  anyUtf16,
  fc.jsonValue().map((value) => JSON.stringify(value)),
  fc.object().map((value) => JSON.stringify(value)),
  fc.dictionary(anyUtf16, anyUtf16).map((value) => JSON.stringify(value)),
  fc.dictionary(anyUtf16, anyUtf16).map((value) => JSON.stringify(value).replace(/"}$/, '\u0000"}')),
  fc.integer({ min: MAX_STORED_DEPTH - 3, max: MAX_STORED_DEPTH + 3 }).map(nestedObjects),
);

describe("storablePayload: properties", () => {
  it("property: the result is JSON text of a plain object, well-formed and free of U+0000", () => {
    fc.assert(
      fc.property(anyBody, (body) => {
        const result = storablePayload(body);
        const document: unknown = JSON.parse(result);
        expect(isPlainObject(document)).toBe(true);
        expect(result.isWellFormed()).toBe(true);
        expect(NUL_ESCAPE.test(result)).toBe(false);
        for (const text of stringsIn(document)) {
          expect(text.includes("\u0000")).toBe(false);
          expect(text.isWellFormed()).toBe(true);
        }
      }),
      { numRuns: 1000 },
    );
  });

  it("property: the result is either the body itself or {raw} that gives the body back", () => {
    fc.assert(
      fc.property(anyBody, (body) => {
        const result = storablePayload(body);
        if (result === body) return;
        const document = JSON.parse(result) as { raw: unknown; nul?: unknown; surrogates?: unknown };
        expect(typeof document.raw).toBe("string");
        const expectedRaw = body.replaceAll("\u0000", "\\u0000").toWellFormed();
        expect(document.raw).toBe(expectedRaw);
        expect(document.nul).toBe(body.includes("\u0000") ? "escaped" : undefined);
        expect(document.surrogates).toBe(
          body.replaceAll("\u0000", "\\u0000").isWellFormed() ? undefined : "replaced",
        );
      }),
      { numRuns: 1000 },
    );
  });
});
