/**
 * Reading JSON text correctly on every runtime jobfence supports. Pure, except the one-time probe.
 *
 * V8's `JSON.parse` in Node 24 and 26 (V8 13.6 and 14.x; Node 20 and 22 are correct) can misread an
 * object key written with a backslash escape: when an earlier parse built an object whose next key
 * is the text the escaped key's raw source begins with, the new key is read as that earlier key.
 * After `JSON.parse('{"x":0,"\\\\":0}')` (keys `x` and `\`), `JSON.parse('{"x":0,"\\"":0}')` has
 * the keys `x` and `\` instead of `x` and `"`; a key written `\u0042` is read as `\` the same way. A
 * reviver does not help (the key is wrong before it is called). In a warm container that makes a
 * conflicting job read as its predecessor, or work see a wrong key (nodejs/node#63785).
 *
 * Only keys whose JSON text holds a backslash are affected, so {@link parseJson} keeps `JSON.parse`
 * for every text without one (one native scan for a backslash, the common body's only extra cost),
 * and for texts whose backslashes all sit in string values (one more native scan of the strings).
 * A text with an escaped key is read by {@link parseJsonStrict}, on every runtime: the probe below
 * only knows the misreads seen so far, and such texts are rare enough that their cost does not
 * matter.
 *
 * {@link parseJsonStrict} reads RFC 8259 JSON exactly as `JSON.parse` is specified to: it accepts
 * the same texts (no trailing commas, leading zeros, bad escapes, raw control characters, or
 * anything after the value) and builds the same values: plain objects whose keys are own data
 * properties, `__proto__` included, a repeated key keeping its first place and its last value;
 * lone surrogate escapes as lone surrogates; numbers as `Number` reads them (`-0` is -0). It is
 * iterative, with an explicit stack, so a body nested hundreds of thousands deep (an SQS body of
 * 1 MiB can be) is read as `JSON.parse` reads it, not with a stack overflow. It refuses with a
 * SyntaxError, as `JSON.parse` does, so a body it refuses is poison as before.
 */
/** The options of a parse. */
export interface ParseJsonOptions {
  /**
   * Keep each number whose text a JavaScript number would not write back the same (integers past
   * 2^53, long decimals, `1.0`) as raw JSON (`JSON.rawJSON`), so `JSON.stringify` writes it out
   * digit for digit. @default false
   */
  readonly exactNumbers?: boolean;
}

/** JSON.rawJSON: Node 22 and later have it; without it, numbers are kept as JavaScript reads them. */
const rawJSON: (text: string) => unknown =
  (JSON as unknown as { rawJSON?: (text: string) => unknown }).rawJSON ?? ((text) => Number(text));

/** The reviver that keeps numbers exact with `JSON.parse` (its third argument is the source text). */
const exactNumbersReviver = (
  _key: string,
  value: unknown,
  context?: { readonly source?: string },
): unknown =>
  typeof value === "number" && context?.source !== undefined && String(value) !== context.source
    ? rawJSON(context.source)
    : value;

/**
 * `JSON.parse(text)`, read correctly on every runtime: through `JSON.parse` when no object key of
 * the text is written with an escape, else through {@link parseJsonStrict}. Throws SyntaxError for
 * a text that is not JSON.
 */
export function parseJson(text: string, options: ParseJsonOptions = {}): unknown {
  const source = typeof text === "string" ? text : String(text);
  if (source.indexOf("\\") !== -1 && hasEscapedKey(source)) return parseJsonStrict(source, options);
  return options.exactNumbers
    ? JSON.parse(source, exactNumbersReviver as (key: string, value: unknown) => unknown)
    : JSON.parse(source);
}

/**
 * Whether some object key in `text` is written with a backslash escape (or the text ends inside
 * a string, which is not JSON: the strict parser refuses it). A key is a string followed, after
 * optional whitespace, by `:`. For a text that is not JSON the answer may be either, which is
 * safe: `JSON.parse` reads left to right and refuses the text at its first error, so it reaches an
 * escaped key only through a valid prefix, which is tokenised here the same way.
 *
 * Linear: the next quote and the next backslash are each found by a native scan that never goes
 * back, however many escapes a string holds.
 */
export function hasEscapedKey(text: string): boolean {
  let backslash = text.indexOf("\\");
  if (backslash === -1) return false;
  let quote = text.indexOf('"');
  while (quote !== -1) {
    // `quote` opens a string; find where it closes.
    let at = quote + 1;
    let escaped = false;
    for (;;) {
      if (quote < at) quote = text.indexOf('"', at);
      if (quote === -1) return true;
      if (backslash !== -1 && backslash < at) backslash = text.indexOf("\\", at);
      if (backslash === -1 || backslash > quote) break;
      // An escape before the quote: skip it (it may be the quote itself, `\"`).
      escaped = true;
      at = backslash + 2;
    }
    // `quote` closes the string. It is a key when `:` comes next.
    let next = quote + 1;
    let char = text.charCodeAt(next);
    while (char === 0x20 || char === 0x09 || char === 0x0a || char === 0x0d) char = text.charCodeAt(++next);
    if (escaped && char === 0x3a) return true;
    if (backslash === -1) return false;
    quote = text.indexOf('"', quote + 1);
  }
  return false;
}

/** What each of JSON's two-character escapes stands for, by the escaped character's code. */
const SHORT_ESCAPES: Readonly<Record<number, string>> = {
  34: '"',
  92: "\\",
  47: "/",
  98: "\b",
  102: "\f",
  110: "\n",
  114: "\r",
  116: "\t",
};

/** A JSON number (RFC 8259 §6), matched where `lastIndex` says. */
const JSON_NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
/** Four hexadecimal digits, matched where `lastIndex` says. */
const HEX4 = /[0-9A-Fa-f]{4}/y;

/** An array or object being read. */
interface Frame {
  readonly container: unknown[] | Record<string, unknown>;
  /** Whether `container` is an array. */
  readonly array: boolean;
  /** The key whose value is being read (objects). */
  key: string;
}

/**
 * Reads `text` as RFC 8259 JSON without `JSON.parse` (see the module's comment for what it builds
 * and refuses). Throws SyntaxError naming the position of the first error.
 */
export function parseJsonStrict(text: string, options: ParseJsonOptions = {}): unknown {
  const exact = options.exactNumbers === true;
  const length = text.length;
  let at = 0;
  const fail = (what: string): never => {
    throw new SyntaxError(`${what} at position ${at}`);
  };
  const skipSpace = (): number => {
    let char = text.charCodeAt(at);
    while (char === 0x20 || char === 0x0a || char === 0x0d || char === 0x09) char = text.charCodeAt(++at);
    return char; // NaN past the end
  };
  /** A string whose opening quote is at `at`; leaves `at` after its closing quote. */
  const string = (): string => {
    let decoded = "";
    let start = ++at;
    for (;;) {
      if (at >= length) fail("Unterminated string");
      const char = text.charCodeAt(at);
      if (char === 0x22) break;
      if (char < 0x20) fail("Bad control character in string literal");
      if (char !== 0x5c) {
        at++;
        continue;
      }
      decoded += text.slice(start, at);
      const escaped = text.charCodeAt(at + 1);
      if (escaped === 0x75) {
        HEX4.lastIndex = at + 2;
        if (!HEX4.test(text)) {
          at += 2;
          fail("Bad Unicode escape");
        }
        decoded += String.fromCharCode(Number.parseInt(text.slice(at + 2, at + 6), 16));
        at += 6;
      } else {
        const short = SHORT_ESCAPES[escaped];
        if (short === undefined) {
          at++;
          fail("Bad escaped character");
        }
        decoded += short;
        at += 2;
      }
      start = at;
    }
    decoded += text.slice(start, at);
    at++;
    return decoded;
  };
  /** An object's key and its colon; leaves `at` at the value. */
  const key = (): string => {
    if (skipSpace() !== 0x22) fail("Expected double-quoted property name");
    const name = string();
    if (skipSpace() !== 0x3a) fail("Expected ':' after property name");
    at++;
    return name;
  };
  const set = (object: Record<string, unknown>, name: string, member: unknown): void => {
    // CreateDataProperty, as JSON.parse does: no __proto__ setter, a repeated key stays in place.
    if (name === "__proto__") {
      Object.defineProperty(object, name, {
        value: member,
        writable: true,
        enumerable: true,
        configurable: true,
      });
    } else {
      object[name] = member;
    }
  };

  const stack: Frame[] = [];
  for (;;) {
    // Read a value: a primitive into `value`, or open a container and read its first member.
    let value: unknown;
    const char = skipSpace();
    if (char === 0x7b /* { */) {
      at++;
      if (skipSpace() === 0x7d) {
        at++;
        value = {};
      } else {
        stack.push({ container: {}, array: false, key: key() });
        continue;
      }
    } else if (char === 0x5b /* [ */) {
      at++;
      if (skipSpace() === 0x5d) {
        at++;
        value = [];
      } else {
        stack.push({ container: [], array: true, key: "" });
        continue;
      }
    } else if (char === 0x22) {
      value = string();
    } else if (char === 0x74 && text.startsWith("true", at)) {
      at += 4;
      value = true;
    } else if (char === 0x66 && text.startsWith("false", at)) {
      at += 5;
      value = false;
    } else if (char === 0x6e && text.startsWith("null", at)) {
      at += 4;
      value = null;
    } else {
      JSON_NUMBER.lastIndex = at;
      const number = (char === 0x2d || (char >= 0x30 && char <= 0x39)) && JSON_NUMBER.exec(text);
      if (!number) fail(at < length ? `Unexpected token '${text[at]}'` : "Unexpected end of JSON input");
      const source = (number as RegExpExecArray)[0];
      at += source.length;
      const read = Number(source);
      value = exact && String(read) !== source ? rawJSON(source) : read;
    }

    // Put the value in its container; close every container it completes.
    for (;;) {
      const frame = stack[stack.length - 1];
      if (frame === undefined) {
        skipSpace();
        if (at < length) fail("Unexpected non-whitespace character after JSON");
        return value;
      }
      if (frame.array) (frame.container as unknown[]).push(value);
      else set(frame.container as Record<string, unknown>, frame.key, value);
      const next = skipSpace();
      if (next === 0x2c /* , */) {
        at++;
        if (!frame.array) frame.key = key();
        break;
      }
      if (next !== (frame.array ? 0x5d : 0x7d)) {
        fail(
          at < length
            ? `Expected ',' or '${frame.array ? "]" : "}"}' after ${frame.array ? "array element" : "property value"}`
            : "Unexpected end of JSON input",
        );
      }
      at++;
      stack.pop();
      value = frame.container;
    }
  }
}

/** A key unlikely to be any application's, so the probe's objects leave no shape it would meet. */
const PROBE_KEY = "jobfence:json-key-probe";

let probed: boolean | undefined;

/**
 * Whether this runtime's `JSON.parse` misreads escaped keys: the known reproductions, run once per
 * process (the answer is memoised). Each poisoning parse uses {@link PROBE_KEY} first, so the
 * shapes it leaves behind are met only by the probe's own objects.
 */
export function runtimeMisreadsJsonKeys(): boolean {
  if (probed !== undefined) return probed;
  const keysOf = (text: string): string[] => Object.keys(JSON.parse(text) as object);
  const pairs: readonly [poison: string, text: string, key: string][] = [
    [`{"${PROBE_KEY}":0,"\\\\":0}`, `{"${PROBE_KEY}":0,"\\"":0}`, '"'],
    [`{"${PROBE_KEY}":1,"\\\\":0}`, `{"${PROBE_KEY}":1,"\\u0042":0}`, "B"],
  ];
  probed = false;
  for (const [poison, text, key] of pairs) {
    keysOf(poison);
    const keys = keysOf(text);
    if (keys.length !== 2 || keys[1] !== key) probed = true;
  }
  return probed;
}
