/**
 * RFC 8785 JSON Canonicalization Scheme (JCS): one text per JSON value, whatever key order,
 * whitespace or number spelling it was sent with. Pure.
 *
 * - Object keys are sorted by UTF-16 code units (JavaScript's default string comparison), which is
 *   what RFC 8785 §3.2.3 prescribes. Integer-like keys sort as strings too ("10" before "2"), unlike
 *   a JavaScript object's own key order, so sorting keys and calling JSON.stringify is not JCS.
 * - Numbers are written as ECMAScript's Number-to-String writes them (RFC 8785 §3.2.2.3), -0 as "0".
 * - Strings are escaped as JSON.stringify escapes them: `\"`, `\\`, `\b \f \n \r \t`, other controls
 *   as lowercase `\u00xx`, everything else as is (RFC 8785 §3.2.2.2).
 * - Lone surrogates: RFC 8785 requires I-JSON input, which has none, so it does not say what to do
 *   with them. We write them as JSON.stringify does, as lowercase `\udxxx` escapes. That is
 *   deterministic, keeps "\ud800" and "\udc00" apart, and leaves the canonical text well-formed, so
 *   its UTF-8 encoding (which would otherwise turn every lone surrogate into U+FFFD) is lossless.
 *
 * Only JSON values are accepted: null, booleans, finite numbers, strings, arrays and plain objects
 * (prototype Object.prototype or null). An object property whose value is `undefined` is left out,
 * as JSON.stringify does; symbol-keyed properties are ignored, as JSON.stringify does. Anything else
 * (undefined elsewhere, functions, symbols, bigints, NaN and ±Infinity, Dates and other class
 * instances, cycles) throws {@link CanonicalJsonError} naming the path, rooted at `$`. `toJSON` is
 * not called: a plain object's `toJSON` is a function, which is refused like any other.
 *
 * A value from JSON.rawJSON (as parseJsonExact in shared/db/exact-json.ts makes for numbers beyond
 * double precision) is canonicalised as the JSON value its text stands for, so a number compares as
 * the IEEE double RFC 8785 prescribes, exactly as it would have after a plain JSON.parse.
 *
 * The walk is iterative, with an explicit stack: an SQS body of 1 MiB can nest ~500,000 levels and
 * JSON.parse accepts that, but a recursive walk (or JSON.stringify) would overflow the call stack.
 */
import { CanonicalJsonError } from "../errors/job.ts";

/**
 * JSON.isRawJSON: Node 22 and later have it. Node 20 has neither it nor JSON.rawJSON, so no value
 * there is raw JSON (parse-json.ts keeps such numbers as numbers).
 */
const isRawJSON: (value: unknown) => value is { readonly rawJSON: string } =
  (JSON as unknown as { isRawJSON?: (value: unknown) => value is { readonly rawJSON: string } }).isRawJSON ??
  ((value: unknown): value is { readonly rawJSON: string } => false);

/** An array or object whose children are being written. */
interface Frame {
  readonly container: object;
  /** Sorted own keys of an object; null for an array. */
  readonly keys: string[] | null;
  /** Position of the next child to look at (array index, or index into `keys`). */
  next: number;
  /** Index or key of the child being written, for error paths. */
  at: number | string;
  /** Whether a member has been written yet (decides the comma). */
  wrote: boolean;
}

/** Paths longer than this many steps are shown with the middle elided. */
const PATH_STEPS_SHOWN = 40;
/** Keys longer than this are shown truncated in paths. */
const PATH_KEY_SHOWN = 64;
/** A key shown as `.key` in paths; any other is shown as `["key"]`. */
const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** The RFC 8785 canonical JSON text of `value`; throws {@link CanonicalJsonError} for a non-JSON value. */
export function canonicalJson(value: unknown): string {
  // Appended to, not joined from parts: most texts are a few dozen characters.
  let out = "";
  const stack: Frame[] = [];
  /**
   * Containers being written at depth SCANNED_DEPTH or more, with their depth in `stack`, to tell a
   * cycle from a shared value; shallower ones are found in `stack` itself. Made only for a value
   * that nests that deep.
   */
  let deep: Map<object, number> | undefined;

  const refuse = (what: string): never => {
    throw new CanonicalJsonError(`${pathOf(stack, stack.length)} ${what}: not a JSON value`);
  };

  /** Writes a primitive, or opens a container by pushing its frame. */
  const write = (item: unknown): void => {
    switch (typeof item) {
      case "string":
        out += quote(item);
        return;
      case "number":
        if (!Number.isFinite(item)) refuse(`is ${item} (JSON numbers are finite)`);
        out += String(item); // Number-to-String, as RFC 8785 requires; String(-0) is "0"
        return;
      case "boolean":
        out += item ? "true" : "false";
        return;
      case "undefined":
        refuse("is undefined");
        return;
      case "bigint":
        refuse("is a bigint (send it as a string)");
        return;
      case "symbol":
        refuse("is a symbol");
        return;
      case "function":
        refuse("is a function");
        return;
    }
    if (item === null) {
      out += "null";
      return;
    }
    const container = item as object;
    if (isRawJSON(container)) {
      // Raw JSON text is always a primitive (JSON.rawJSON refuses objects and arrays).
      write(JSON.parse(container.rawJSON));
      return;
    }
    const depth = openDepth(stack, deep, container);
    if (depth !== undefined) refuse(`refers back to ${pathOf(stack, depth)} (a cycle)`);
    const prototype: unknown = Object.getPrototypeOf(container);
    let keys: string[] | null;
    if (Array.isArray(container)) {
      if (prototype !== Array.prototype)
        refuse(`is an instance of ${className(prototype)}, not a plain array`);
      keys = null;
      out += "[";
    } else {
      if (prototype !== Object.prototype && prototype !== null) {
        refuse(`is an instance of ${className(prototype)}, not a plain object`);
      }
      keys = sortedKeys(container);
      out += "{";
    }
    if (stack.length >= SCANNED_DEPTH) {
      deep ??= new Map();
      deep.set(container, stack.length);
    }
    stack.push({ container, keys, next: 0, at: 0, wrote: false });
  };

  write(value);
  while (stack.length > 0) {
    const frame = stack[stack.length - 1] as Frame;
    const { container, keys } = frame;
    if (keys === null) {
      const array = container as readonly unknown[];
      if (frame.next < array.length) {
        const index = frame.next++;
        frame.at = index;
        if (index > 0) out += ",";
        write(array[index]); // a hole reads as undefined and is refused with it
        continue;
      }
      out += "]";
    } else {
      const object = container as Readonly<Record<string, unknown>>;
      let member: unknown;
      let key: string | undefined;
      while (frame.next < keys.length) {
        key = keys[frame.next++] as string;
        member = object[key];
        if (member !== undefined) break;
        key = undefined;
      }
      if (key !== undefined) {
        frame.at = key;
        out += frame.wrote ? `,${quote(key)}:` : `${quote(key)}:`;
        frame.wrote = true;
        write(member);
        continue;
      }
      out += "}";
    }
    stack.pop();
    if (stack.length >= SCANNED_DEPTH) deep?.delete(container);
  }
  return out;
}

/** A character JSON.stringify writes escaped: `"`, `\\`, a control, or a surrogate (escaped when lone). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the controls are what it looks for
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/** JSON.stringify of a string: the same text, without the call when nothing in it is escaped. */
function quote(text: string): string {
  return NEEDS_ESCAPE.test(text) ? JSON.stringify(text) : `"${text}"`;
}

/** Containers open at a depth below this are looked for in the stack itself. */
const SCANNED_DEPTH = 8;

/** The depth at which `container` is open (being written), or undefined when it is not. */
function openDepth(
  stack: readonly Frame[],
  deep: ReadonlyMap<object, number> | undefined,
  container: object,
): number | undefined {
  const scanned = Math.min(stack.length, SCANNED_DEPTH);
  for (let i = 0; i < scanned; i++) if ((stack[i] as Frame).container === container) return i;
  return deep?.get(container);
}

/** Keys at or below this many are sorted here; more go to Array.prototype.sort. */
const INSERTION_SORT_MAX = 16;

/**
 * The object's own enumerable string keys in UTF-16 code-unit order, as `Object.keys(o).sort()`
 * gives them (keys are distinct, so the order is total and any correct sort gives the same
 * array). A few keys, the common case, are sorted by insertion: the built-in sort costs more
 * than the comparisons there.
 */
function sortedKeys(object: object): string[] {
  const keys = Object.keys(object);
  if (keys.length > INSERTION_SORT_MAX) return keys.sort();
  for (let i = 1; i < keys.length; i++) {
    const key = keys[i] as string;
    let j = i - 1;
    while (j >= 0 && (keys[j] as string) > key) {
      keys[j + 1] = keys[j] as string;
      j--;
    }
    keys[j + 1] = key;
  }
  return keys;
}

/** The path through the first `depth` frames, as `$.items[3]["a key"]`, its middle elided when long. */
function pathOf(stack: readonly Frame[], depth: number): string {
  const step = (frame: Frame): string => {
    if (frame.keys === null) return `[${frame.at}]`;
    const key = String(frame.at);
    if (IDENTIFIER.test(key)) return `.${key}`;
    const shown = key.length > PATH_KEY_SHOWN ? `${key.slice(0, PATH_KEY_SHOWN)}…` : key;
    return `[${JSON.stringify(shown)}]`;
  };
  let path = "$";
  if (depth <= PATH_STEPS_SHOWN) {
    for (let i = 0; i < depth; i++) path += step(stack[i] as Frame);
    return path;
  }
  const half = PATH_STEPS_SHOWN / 2;
  for (let i = 0; i < half; i++) path += step(stack[i] as Frame);
  path += `…(${depth - 2 * half} levels)…`;
  for (let i = depth - half; i < depth; i++) path += step(stack[i] as Frame);
  return path;
}

/** A class's name for a message, from the prototype of the refused value. */
function className(prototype: unknown): string {
  const ctor: unknown =
    typeof prototype === "object" && prototype !== null
      ? Object.getOwnPropertyDescriptor(prototype, "constructor")?.value
      : undefined;
  return typeof ctor === "function" && ctor.name !== "" ? ctor.name : "a class";
}
