/**
 * How a dead letter keeps its body (shared/db/stored-body.ts): exactly, in the form a
 * column names, with a fingerprint computed as the database's trigger computes it. Replaces the
 * tests of the old `{"raw": …}` payload wrapper (shared/envelope/storable-payload.ts), whose cases
 * are carried over below: where the wrapper stored `{raw: body}`, jsonbCandidate now offers nothing
 * and the body comes back exactly, U+0000 and lone surrogates included.
 */
import { createHash } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  BODY_FORM,
  BODY_FORMS,
  type BodyForm,
  bodyOf,
  jsonbCandidate,
  MAX_JSONB_DEPTH,
  nestingDepth,
  type StoredBody,
  type StoredBodyColumns,
  storableJson,
  storedBody,
  textCanHold,
} from "../../shared/db/stored-body.ts";

// ---------------------------------------------------------------------------------------------
// Oracles, written unit by unit rather than with the String/Buffer helpers the module uses.

function sha256(bytes: Uint8Array): Buffer {
  return createHash("sha256").update(bytes).digest();
}

/** The fingerprint of stored bytes: SHA-256 of the form's tag byte ("t" or "u") and the bytes. */
function fingerprintOf(form: "text" | "utf16", bytes: Uint8Array): Buffer {
  return sha256(Buffer.concat([Buffer.from(form === "text" ? "t" : "u", "latin1"), bytes]));
}

/** Whether `text` has no U+0000 and no surrogate without its other half, checked unit by unit. */
function holdable(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit === 0) return false;
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = text.charCodeAt(i + 1); // NaN past the end
      if (!(next >= 0xdc00 && next <= 0xdfff)) return false;
      i++;
    } else if (unit >= 0xdc00 && unit <= 0xdfff) {
      return false;
    }
  }
  return true;
}

/** The UTF-16LE bytes of `text`, two per code unit. */
function utf16leOf(text: string): Buffer {
  const bytes = Buffer.alloc(text.length * 2);
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    bytes[2 * i] = unit & 0xff;
    bytes[2 * i + 1] = unit >> 8;
  }
  return bytes;
}

/** `text` with U+0000 and every unpaired surrogate replaced by U+FFFD, unit by unit. */
function replaceUnstorable(text: string): string {
  let out = "";
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    const next = text.charCodeAt(i + 1);
    if (unit >= 0xd800 && unit <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
      out += text.slice(i, i + 2);
      i++;
    } else if (unit === 0 || (unit >= 0xd800 && unit <= 0xdfff)) {
      out += "\ufffd";
    } else {
      out += text.charAt(i);
    }
  }
  return out;
}

/** The bytes the trigger hashes: `convert_to(body, 'UTF8')`, else `body_utf16`. */
function storedBytes(stored: StoredBody): Buffer {
  return stored.form === BODY_FORM.text ? Buffer.from(stored.text, "utf8") : stored.utf16;
}

/**
 * The columns a row would hold. The utf16 bytes are copied (through hex, as a bytea parameter and
 * result would be), so a Buffer shared with another body or read past its slice cannot pass.
 */
function columnsOf(stored: StoredBody): StoredBodyColumns {
  if (stored.form === BODY_FORM.text) return { body_form: stored.form, body: stored.text, body_utf16: null };
  const copy = Buffer.from(stored.utf16.toString("hex"), "hex");
  expect(copy.equals(stored.utf16)).toBe(true);
  return { body_form: stored.form, body: null, body_utf16: copy };
}

/** The body a row gives back after storing `body`. */
function roundTrip(body: string, form?: BodyForm): string {
  return bodyOf(columnsOf(storedBody(body, form)));
}

/** Every string in a JSON value, keys included (gathered in one array: bodies nest 1000 deep). */
function stringsIn(value: unknown, into: string[] = []): string[] {
  if (typeof value === "string") into.push(value);
  else if (Array.isArray(value)) for (const item of value) stringsIn(item, into);
  else if (typeof value === "object" && value !== null) {
    for (const [key, item] of Object.entries(value)) {
      into.push(key);
      stringsIn(item, into);
    }
  }
  return into;
}

/** `value` with every string (keys included) mapped through `f`. */
function mapStrings(value: unknown, f: (text: string) => string): unknown {
  if (typeof value === "string") return f(value);
  if (Array.isArray(value)) return value.map((item) => mapStrings(item, f));
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [f(key), mapStrings(item, f)]));
  }
  return value;
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

/** A surrogate escape; in JSON.stringify's output only a lone surrogate is escaped. */
const SURROGATE_ESCAPE = /(?<!\\)(?:\\\\)*\\u[dD][89a-fA-F][0-9a-fA-F]{2}/;

// ---------------------------------------------------------------------------------------------
// Arbitraries

/** Any code units, lone surrogates and U+0000 included. */
const codeUnits = fc
  .array(fc.integer({ min: 0, max: 0xffff }), { maxLength: 24 })
  .map((units) => String.fromCharCode(...units));

/** Dense in what matters here: U+0000, both surrogate halves, quotes, backslashes, brackets. */
const trickyUnits = fc
  .array(
    fc.oneof(
      fc.integer({ min: 0xd800, max: 0xdfff }),
      fc.constantFrom(0, 0x22, 0x5c, 0x41, 0x75, 0x7b, 0x7d, 0xfffd),
    ),
    { maxLength: 16 },
  )
  .map((units) => String.fromCharCode(...units));

/** Any JavaScript string. */
const anyString = fc.oneof(
  fc.string({ unit: "binary" }),
  fc.string({ unit: "grapheme" }),
  codeUnits,
  trickyUnits,
  fc.jsonValue().map((value) => JSON.stringify(value)),
  fc.dictionary(codeUnits, codeUnits, { maxKeys: 4 }).map((value) => JSON.stringify(value)),
);

/** Bodies as the old storablePayload property tests drew them. */
const anyBody = fc.oneof(
  fc.string(),
  fc.string({ unit: "binary" }),
  codeUnits,
  trickyUnits,
  fc.jsonValue().map((value) => JSON.stringify(value)),
  fc.object().map((value) => JSON.stringify(value)),
  fc.dictionary(codeUnits, codeUnits).map((value) => JSON.stringify(value)),
  fc.dictionary(codeUnits, codeUnits).map((value) => JSON.stringify(value).replace(/"}$/, '\u0000"}')),
  fc.integer({ min: MAX_JSONB_DEPTH - 3, max: MAX_JSONB_DEPTH + 3 }).map(nestedObjects),
);

/** JSON trees whose strings (keys included) are any code units. */
const { tree: unitTree } = fc.letrec<{ tree: unknown; leaf: unknown }>((tie) => ({
  tree: fc.oneof(
    { maxDepth: 4 },
    tie("leaf"),
    fc.array(tie("tree"), { maxLength: 3 }),
    fc.dictionary(codeUnits, tie("tree"), { maxKeys: 3 }),
  ),
  leaf: fc.oneof(
    codeUnits,
    trickyUnits,
    fc.integer(),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.boolean(),
    fc.constant(null),
  ),
}));

/** JSON objects whose strings (keys included) are any code units. */
const unitObject = fc.dictionary(codeUnits, unitTree, { maxKeys: 4 });

// ---------------------------------------------------------------------------------------------

describe("BODY_FORMS", () => {
  it("lists each body form once: text and utf16", () => {
    expect(BODY_FORMS).toEqual(["text", "utf16"]);
    expect(BODY_FORMS).toEqual(Object.values(BODY_FORM));
    expect(new Set(BODY_FORMS).size).toBe(BODY_FORMS.length);
    expect(BODY_FORM).toEqual({ text: "text", utf16: "utf16" });
  });

  it("every form round-trips a body text can hold", () => {
    for (const form of BODY_FORMS) {
      expect(roundTrip('{"job_id":"j"} 🎉', form)).toBe('{"job_id":"j"} 🎉');
    }
  });
});

describe("textCanHold", () => {
  it.each<[string, string, boolean]>([
    ["the empty string", "", true],
    ["ASCII", '{"job_id":"j"}', true],
    ["accents and emoji", "naïve 🎉", true],
    ["a surrogate pair", "\ud83d\ude00", true],
    ["U+FFFD", "\ufffd", true],
    ["the six characters \\u0000", "\\u0000", true],
    ["other control characters", "\u0001\u001f\u007f", true],
    ["U+0000", "\u0000", false],
    ["U+0000 inside", "a\u0000b", false],
    ["a lone high surrogate", "\ud800", false],
    ["a lone high surrogate before ASCII", "\udbffx", false],
    ["a lone low surrogate", "\udc00", false],
    ["a pair reversed", "\ude00\ud83d", false],
    ["two high surrogates", "\ud83d\ud83d", false],
  ])("%s: %j → %s", (_label, text, expected) => {
    expect(textCanHold(text)).toBe(expected);
  });

  it("property: holds exactly the strings with no U+0000 and no unpaired surrogate", () => {
    fc.assert(
      fc.property(anyString, (text) => {
        expect(textCanHold(text)).toBe(holdable(text));
      }),
      { numRuns: 2000 },
    );
  });
});

describe("storedBody", () => {
  it("stores a body text can hold as text, fingerprinted by the SHA-256 of its tag and UTF-8", () => {
    const body = '{"job_id":"award:order-8812","note":"naïve 🎉"}';
    const stored = storedBody(body);
    expect(stored).toEqual({
      form: "text",
      text: body,
      fingerprint: fingerprintOf("text", Buffer.from(body, "utf8")),
    });
  });

  it("stores the empty body as text (the SHA-256 of its tag alone)", () => {
    const stored = storedBody("");
    expect(stored.form).toBe("text");
    expect(stored.fingerprint.toString("hex")).toBe(
      "e3b98a4da31a127d4bde6e43033f66ba274cab0eb7eb1c70ec41402bf6273dd8",
    );
    expect(roundTrip("")).toBe("");
  });

  it.each<[string, string, number[]]>([
    ["U+0000", "a\u0000b", [0x61, 0, 0, 0, 0x62, 0]],
    ["a lone high surrogate", "\ud800", [0x00, 0xd8]],
    ["a lone low surrogate", "x\udfff", [0x78, 0, 0xff, 0xdf]],
    ["U+0000 beside a pair", "\u0000\ud83d\ude00", [0, 0, 0x3d, 0xd8, 0x00, 0xde]],
  ])("stores a body with %s as its UTF-16LE code units", (_label, body, bytes) => {
    const stored = storedBody(body);
    expect(stored.form).toBe("utf16");
    if (stored.form !== "utf16") return;
    expect([...stored.utf16]).toEqual(bytes);
    expect(stored.fingerprint).toEqual(fingerprintOf("utf16", Buffer.from(bytes)));
    expect(roundTrip(body)).toBe(body);
  });

  it("stores even a body text can hold as utf16 when that form is forced", () => {
    const stored = storedBody("ab", BODY_FORM.utf16);
    expect(stored.form).toBe("utf16");
    if (stored.form !== "utf16") return;
    expect([...stored.utf16]).toEqual([0x61, 0, 0x62, 0]);
    expect(stored.fingerprint).toEqual(fingerprintOf("utf16", Buffer.from([0x61, 0, 0x62, 0])));
  });

  it("asking for text does not force it: a body text cannot hold is still utf16", () => {
    expect(storedBody("\u0000", BODY_FORM.text).form).toBe("utf16");
    expect(roundTrip("\ud800", BODY_FORM.text)).toBe("\ud800");
  });

  it("property: bodyOf gives back exactly the body, whatever it holds", () => {
    fc.assert(
      fc.property(anyString, (body) => {
        expect(roundTrip(body)).toBe(body);
      }),
      { numRuns: 3000 },
    );
  });

  it("property: the form is text exactly when text can hold the body", () => {
    fc.assert(
      fc.property(anyString, (body) => {
        expect(storedBody(body).form).toBe(holdable(body) ? "text" : "utf16");
        expect(storedBody(body).form === "text").toBe(textCanHold(body));
      }),
      { numRuns: 2000 },
    );
  });

  it("property: the forced utf16 form always round-trips, two bytes per code unit", () => {
    fc.assert(
      fc.property(anyString, (body) => {
        const stored = storedBody(body, BODY_FORM.utf16);
        expect(stored.form).toBe("utf16");
        if (stored.form !== "utf16") return;
        expect(stored.utf16.equals(utf16leOf(body))).toBe(true);
        expect(roundTrip(body, BODY_FORM.utf16)).toBe(body);
      }),
      { numRuns: 2000 },
    );
  });

  it("property: any form argument round-trips", () => {
    fc.assert(
      fc.property(
        anyString,
        fc.constantFrom<BodyForm | undefined>(...BODY_FORMS, undefined),
        (body, form) => {
          expect(roundTrip(body, form)).toBe(body);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it("property: bodies stored one after another keep their own bytes (no shared buffer)", () => {
    fc.assert(
      fc.property(fc.array(anyString, { maxLength: 20 }), (bodies) => {
        const stored = bodies.map((body) => storedBody(body));
        const copies = stored.map(columnsOf);
        expect(copies.map(bodyOf)).toEqual(bodies);
        // Reading the original buffers after all were made, not only the copies.
        expect(stored.map((s) => (s.form === "text" ? s.text : s.utf16.toString("utf16le")))).toEqual(bodies);
      }),
      { numRuns: 300 },
    );
  });

  it("property: the fingerprint is the SHA-256 of the stored bytes, as the trigger computes it", () => {
    fc.assert(
      fc.property(
        anyString,
        fc.constantFrom<BodyForm | undefined>(BODY_FORM.utf16, undefined),
        (body, form) => {
          const stored = storedBody(body, form);
          expect(stored.fingerprint).toHaveLength(32);
          expect(stored.fingerprint.equals(fingerprintOf(stored.form, storedBytes(stored)))).toBe(true);
          const trigger =
            stored.form === "text"
              ? fingerprintOf("text", Buffer.from(body, "utf8"))
              : fingerprintOf("utf16", utf16leOf(body));
          expect(stored.fingerprint.equals(trigger)).toBe(true);
          expect(storedBody(body, form).fingerprint.equals(stored.fingerprint)).toBe(true);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it("property: different bodies get different fingerprints", () => {
    fc.assert(
      fc.property(anyString, anyString, (a, b) => {
        fc.pre(a !== b);
        expect(storedBody(a).fingerprint.equals(storedBody(b).fingerprint)).toBe(false);
      }),
      { numRuns: 4000 },
    );
  });

  it("property: bodies one code unit apart get different fingerprints", () => {
    fc.assert(
      fc.property(
        anyString.filter((body) => body.length > 0),
        fc.nat(),
        fc.oneof(fc.integer({ min: 0xd800, max: 0xdfff }), fc.integer({ min: 0, max: 0xffff })),
        (body, at, unit) => {
          const i = at % body.length;
          const other = body.slice(0, i) + String.fromCharCode(unit) + body.slice(i + 1);
          fc.pre(other !== body);
          expect(storedBody(body).fingerprint.equals(storedBody(other).fingerprint)).toBe(false);
        },
      ),
      { numRuns: 3000 },
    );
  });

  it.each([
    ["\ud800", "\ud801"],
    ["\udc00", "\udfff"],
    ["\ud800", "\udc00"],
    ["x\ud800y", "x\udbffy"],
    ['{"a":"\ud800"}', '{"a":"\ud801"}'],
    ["\ud800\u0000", "\ud801\u0000"],
  ])("bodies differing only in a lone surrogate (%j, %j) get different fingerprints", (a, b) => {
    // UTF-8 would map both to U+FFFD: the reason the utf16 form hashes the code units.
    expect(Buffer.from(a, "utf8").equals(Buffer.from(b, "utf8"))).toBe(true);
    const [sa, sb] = [storedBody(a), storedBody(b)];
    expect([sa.form, sb.form]).toEqual(["utf16", "utf16"]);
    expect(sa.fingerprint.equals(sb.fingerprint)).toBe(false);
    expect([roundTrip(a), roundTrip(b)]).toEqual([a, b]);
  });

  // The UTF-16LE bytes of a body with a lone surrogate can be the UTF-8 bytes of a text body (here
  // both are 41 D8 80 41): without the form's tag, two such bodies of one job would share one
  // pending row and the second body would be kept nowhere.
  it("a text body and a utf16 body with the same bytes get different fingerprints", () => {
    const [text, utf16] = [storedBody("A\u0600A"), storedBody("\ud841\u4180")];
    expect([text.form, utf16.form]).toEqual(["text", "utf16"]);
    expect(text.fingerprint.equals(utf16.fingerprint)).toBe(false);
  });
});

describe("bodyOf", () => {
  it("reads column body for the text form and body_utf16 for the utf16 form", () => {
    expect(bodyOf({ body_form: "text", body: "hello", body_utf16: null })).toBe("hello");
    expect(bodyOf({ body_form: "utf16", body: null, body_utf16: Buffer.from([0x00, 0xd8, 0x61, 0]) })).toBe(
      "\ud800a",
    );
  });

  it("goes by body_form when both columns are set", () => {
    const both = { body: "text column", body_utf16: utf16leOf("utf16 column") };
    expect(bodyOf({ body_form: "text", ...both })).toBe("text column");
    expect(bodyOf({ body_form: "utf16", ...both })).toBe("utf16 column");
  });

  it("an empty body is a body, not a missing column", () => {
    expect(bodyOf({ body_form: "text", body: "", body_utf16: null })).toBe("");
    expect(bodyOf({ body_form: "utf16", body: null, body_utf16: Buffer.alloc(0) })).toBe("");
  });

  it.each<[string, StoredBodyColumns]>([
    ["text without column body", { body_form: "text", body: null, body_utf16: utf16leOf("x") }],
    ["utf16 without column body_utf16", { body_form: "utf16", body: "x", body_utf16: null }],
    ["an unknown form", { body_form: "json", body: "{}", body_utf16: null }],
    ["no column at all", { body_form: "text", body: null, body_utf16: null }],
  ])("refuses %s", (_label, row) => {
    expect(() => bodyOf(row)).toThrow(RangeError);
  });
});

describe("jsonbCandidate: a JSON object jsonb can hold is offered as its original text", () => {
  it.each([
    '{"job_id":"award:order-8812","tenant_id":"t_42","payload":{"amount":5}}',
    "{}",
    '{ "spaced" : [ 1 , 2 ] ,\n  "nested": { "deep": true } }\n',
    '{"emoji":"🎉","accents":"naïve","escaped":"line\\nbreak \\"quoted\\" \\u00e9"}',
    '{"pair":"\\ud83d\\ude00"}',
    '{"pair":"\\uD83D\\uDE00"}',
    '{"path":"C:\\\\u0000dir","pattern":"\\\\ud800"}',
    '{"two escaped backslashes, then u0000":"\\\\\\\\u0000"}',
    '{"control":"\\u0001\\u001f"}',
  ])("%s", (body) => {
    expect(jsonbCandidate(body)).toBe(body);
    expect(roundTrip(body)).toBe(body);
  });

  it("keeps the spelling of numbers: not re-serialised", () => {
    const body = '{"a": 1.10, "big": 123456789012345678901234567890}';
    expect(JSON.stringify(JSON.parse(body))).not.toBe(body);
    expect(jsonbCandidate(body)).toBe(body);
  });

  it("keeps every digit of a large integer", () => {
    const body = '{"job_id":"j","payload":{"id":12345678901234567890}}';
    expect(jsonbCandidate(body)).toBe(body);
    expect(jsonbCandidate(body)).toContain("12345678901234567890");
  });

  it("offers an object nested exactly MAX_JSONB_DEPTH deep", () => {
    expect(MAX_JSONB_DEPTH).toBe(1000);
    const body = nestedObjects(MAX_JSONB_DEPTH);
    expect(nestingDepth(body)).toBe(MAX_JSONB_DEPTH);
    expect(jsonbCandidate(body)).toBe(body);
  });

  it("offers an object nested 101 deep (the old wrapper's bound was 100)", () => {
    const body = nestedObjects(101);
    expect(jsonbCandidate(body)).toBe(body);
  });

  it("offers an object with a very large array unchanged (no stack overflow)", () => {
    const body = JSON.stringify({ a: new Array(200_000).fill(0) });
    expect(jsonbCandidate(body)).toBe(body);
  });
});

describe("jsonbCandidate: anything else is not offered, and the body is still kept exactly", () => {
  it.each(["42", "-1.5e3", "null", "true", '"a string"', "[]", '[{"job_id":"j"}]'])(
    "JSON that is not an object (%s)",
    (body) => {
      expect(jsonbCandidate(body)).toBeNull();
      expect(storedBody(body).form).toBe("text");
      expect(roundTrip(body)).toBe(body);
    },
  );

  it.each(["", "hello", "{", "{'job_id':'x'}", '{"a":1,}', "NaN", "{} {}", "\ufeff{}"])(
    "text that is not JSON (%j)",
    (body) => {
      expect(jsonbCandidate(body)).toBeNull();
      expect(roundTrip(body)).toBe(body);
    },
  );

  it.each<[string, string]>([
    ["literal U+0000s", "a\u0000b\u0000"],
    ["a literal U+0000 inside what would be a JSON string", '{"a":"x\u0000"}'],
    ["lone surrogates", "a\ud800b\udfff"],
    ["a JSON object holding a literal lone surrogate (JSON.parse accepts it)", '{"a":"x\ud800"}'],
    ["an escaped high surrogate followed by a literal low one", '{"a":"\\ud83d\ude00"}'],
    ["U+0000 and a lone surrogate together", "\u0000\udc00"],
  ])("%s: stored as utf16, exactly (the old wrapper escaped or replaced them)", (_label, body) => {
    expect(jsonbCandidate(body)).toBeNull();
    expect(storedBody(body).form).toBe("utf16");
    expect(roundTrip(body)).toBe(body);
  });

  it.each<[string, string]>([
    ["a \\u0000 escape in a value", '{"a":"x\\u0000y"}'],
    ["a \\u0000 escape in a key", '{"\\u0000":1}'],
    ["a \\u0000 escape deep inside", '{"a":[{"b":"\\u0000"}]}'],
    ["a \\u0000 escape after an escaped backslash", '{"a":"\\\\\\u0000"}'],
    ["a \\u0000 escape hidden behind a duplicate key", '{"a":"\\u0000","a":1}'],
    ["a lone surrogate escape hidden behind a duplicate key", '{"a":{"b":"\\ud800","b":1}}'],
    ["a lone high surrogate escape", '{"a":"\\ud800"}'],
    ["a lone high surrogate escape at the end of a key", '{"k\\ud800":1}'],
    ["a lone low surrogate escape", '{"a":"\\udc00x"}'],
    ["a low surrogate escape alone", '{"a":"\\udc00"}'],
    ["an upper-case lone surrogate escape", '{"a":"\\uDBFF"}'],
    ["a high surrogate escape followed by a non-surrogate escape", '{"a":"\\ud800\\u0041"}'],
    ["a high surrogate escape followed by another escape", '{"a":"\\ud800\\n"}'],
    ["two high surrogate escapes then a low one", '{"a":"\\ud800\\ud800\\udc00"}'],
    ["a surrogate pair escaped in reverse", '{"a":"\\ude00\\ud83d"}'],
  ])("a JSON object with %s: stored as text, exactly", (_label, body) => {
    expect(jsonbCandidate(body)).toBeNull();
    expect(storedBody(body).form).toBe("text");
    expect(roundTrip(body)).toBe(body);
  });

  it("an object nested deeper than MAX_JSONB_DEPTH", () => {
    const body = nestedObjects(MAX_JSONB_DEPTH + 1);
    expect(jsonbCandidate(body)).toBeNull();
    expect(roundTrip(body)).toBe(body);
  });

  it("an object holding arrays nested deeper than MAX_JSONB_DEPTH", () => {
    const body = `{"a":${"[".repeat(MAX_JSONB_DEPTH)}${"]".repeat(MAX_JSONB_DEPTH)}}`;
    expect(nestingDepth(body)).toBe(MAX_JSONB_DEPTH + 1);
    expect(jsonbCandidate(body)).toBeNull();
  });

  it("a hostile depth of 100 000 does not exhaust the stack", () => {
    const body = `${'{"a":'.repeat(100_000)}1${"}".repeat(100_000)}`;
    expect(jsonbCandidate(body)).toBeNull();
    expect(roundTrip(body)).toBe(body);
    const arrays = `${"[".repeat(100_000)}${"]".repeat(100_000)}`;
    expect(jsonbCandidate(arrays)).toBeNull();
  });
});

describe("jsonbCandidate: properties", () => {
  it("property: offers the body itself or nothing; what it offers is a JSON object jsonb can hold", () => {
    fc.assert(
      fc.property(anyBody, (body) => {
        const candidate = jsonbCandidate(body);
        expect(roundTrip(body)).toBe(body);
        if (candidate === null) return;
        expect(candidate).toBe(body);
        const document: unknown = JSON.parse(candidate);
        expect(isPlainObject(document)).toBe(true);
        expect(holdable(candidate)).toBe(true);
        expect(NUL_ESCAPE.test(candidate)).toBe(false);
        expect(nestingDepth(candidate)).toBeLessThanOrEqual(MAX_JSONB_DEPTH);
        for (const text of stringsIn(document)) expect(holdable(text)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it("property: the JSON of an object is offered exactly when all its strings are storable", () => {
    fc.assert(
      fc.property(unitObject, (value) => {
        // JSON.stringify escapes U+0000 as \u0000 and a lone surrogate as \udxxx, both refused.
        const body = JSON.stringify(value);
        const expected = stringsIn(value).every(holdable) ? body : null;
        expect(jsonbCandidate(body)).toBe(expected);
      }),
      { numRuns: 2000 },
    );
  });
});

describe("the old wrapper's look-alikes are plain JSON objects", () => {
  it.each([
    '{"raw":"x"}',
    '{"raw":"a\\\\u0000b","nul":"escaped"}',
    '{"raw":"x","surrogates":"replaced"}',
    '{"raw":"\\u00e9","nul":"escaped","surrogates":"replaced"}',
  ])("%s is offered unchanged and comes back as itself", (body) => {
    expect(jsonbCandidate(body)).toBe(body);
    expect(storedBody(body).form).toBe("text");
    expect(roundTrip(body)).toBe(body);
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
      fc.property(fc.oneof(fc.jsonValue({ maxDepth: 8 }), unitTree), (value) => {
        expect(nestingDepth(JSON.stringify(value))).toBe(depthOf(value));
      }),
      { numRuns: 1000 },
    );
  });
});

describe("storableJson", () => {
  it("replaces U+0000 and lone surrogates with U+FFFD in keys and values", () => {
    expect(storableJson({ "\u0000": "a\ud800", ok: "\udc00b\u0000" })).toEqual({
      "\ufffd": "a\ufffd",
      ok: "\ufffdb\ufffd",
    });
    expect(storableJson(["\u0000", ["x\udfff", { "k\ud83d": null }]])).toEqual([
      "\ufffd",
      ["x\ufffd", { "k\ufffd": null }],
    ]);
    expect(storableJson("\ud800\u0000\udc00")).toBe("\ufffd\ufffd\ufffd");
  });

  it.each<[string, unknown]>([
    ["a well-formed string", "naïve 🎉 \ud83d\ude00"],
    ["the six characters \\u0000", "\\u0000"],
    ["U+FFFD", "\ufffd"],
    ["an integer", 42],
    ["a fraction", -1.5e-7],
    ["minus zero", -0],
    ["a large number", 1.7976931348623157e308],
    ["true", true],
    ["false", false],
    ["null", null],
  ])("leaves %s untouched", (_label, value) => {
    expect(Object.is(storableJson(value), value)).toBe(true);
  });

  it("leaves a well-formed document equal to itself", () => {
    const value = {
      message_id: "m-1",
      attributes: { trace: { stringValue: "🎉", dataType: "String" } },
      n: [1, null],
    };
    expect(storableJson(value)).toEqual(value);
  });

  it("reaches strings inside 33 levels of nesting", () => {
    let value: unknown = "\u0000\ud800";
    let expected: unknown = "\ufffd\ufffd";
    for (let level = 0; level < 33; level++) {
      value = level % 2 === 0 ? { [`k${level}\u0000`]: value } : [value];
      expected = level % 2 === 0 ? { [`k${level}\ufffd`]: expected } : [expected];
    }
    expect(nestingDepth(JSON.stringify(value))).toBe(33);
    expect(storableJson(value)).toEqual(expected);
  });

  it("keeps what is nested deeper as its JSON text, made storable too", () => {
    let value: unknown = "\u0000\ud800";
    for (let level = 0; level < 40; level++) value = [value];
    const json = JSON.stringify(storableJson(value));
    // No escape jsonb refuses (an escaped backslash before "u0000" is text, not an escape).
    expect(json).not.toMatch(/(?<!\\)\\u0000|(?<!\\)\\ud800/);
    expect(JSON.parse(json)).toEqual(JSON.parse(JSON.stringify(storableJson(JSON.parse(json)))));
  });

  it("property: replaces exactly the unstorable code units, at any depth it reaches", () => {
    fc.assert(
      fc.property(unitTree, (value) => {
        const result = storableJson(value);
        expect(result).toEqual(mapStrings(value, replaceUnstorable));
        const json = JSON.stringify(result);
        expect(NUL_ESCAPE.test(json)).toBe(false);
        expect(SURROGATE_ESCAPE.test(json)).toBe(false);
        for (const text of stringsIn(result)) expect(holdable(text)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it("property: a JSON value whose strings are all storable is returned equal", () => {
    fc.assert(
      fc.property(
        // "__proto__" keys are the known bug below; fc.jsonValue draws them on purpose.
        fc.jsonValue().filter((value) => !stringsIn(value).includes("__proto__")),
        (value) => {
          fc.pre(stringsIn(value).every(holdable));
          expect(storableJson(value)).toEqual(value);
        },
      ),
      { numRuns: 1000 },
    );
  });

  // "__proto__" is an own key after JSON.parse and a valid SQS message attribute name: assigned
  // with `out[key] = …` it would set the result's prototype and vanish from the stored JSON.
  it('keeps a "__proto__" key', () => {
    const value = JSON.parse('{"__proto__":{"stringValue":"x"},"b":1}') as unknown;
    expect(JSON.stringify(storableJson(value))).toBe('{"__proto__":{"stringValue":"x"},"b":1}');
  });
});
