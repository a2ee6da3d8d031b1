/**
 * How a dead letter keeps the body it was given (docs/design.md §5.3): exactly, whatever it holds, so that
 * replay sends the very bytes that were received. Pure.
 *
 * The body is a JavaScript string: UTF-16 code units. PostgreSQL's text holds any of them except
 * U+0000 and lone surrogates (UTF-8 cannot encode those; node-postgres would silently send U+FFFD).
 * So the stored form is chosen from the content, never guessed from a key inside it:
 *
 *   text   the body in column `body`            when text can hold it (every body SQS can deliver)
 *   utf16  its code units, little-endian, in    otherwise; bytea takes any bytes, so this form can
 *          column `body_utf16`                  never be refused for what it contains
 *
 * Separately, `payload` is the envelope as jsonb when jsonb accepts the body as a JSON object: it is
 * what operators read and filter on, never what replay sends. jsonb refuses more than text does
 * (`\u0000` escapes, lone surrogate escapes, numbers outside `numeric`, nesting deeper than the
 * server's stack), so {@link jsonbCandidate} skips what is sure to fail and the writer stores
 * `payload` as NULL when the server refuses the rest.
 */
import { createHash } from "node:crypto";
import { parseJson } from "../envelope/parse-json.ts";

/** Each value says where the body is. */
export const BODY_FORM = {
  /** Column `body`, the text exactly as received. */
  text: "text",
  /** Column `body_utf16`, the UTF-16 code units little-endian (the body had U+0000 or a lone surrogate). */
  utf16: "utf16",
} as const;

/** One of {@link BODY_FORM}. */
export type BodyForm = (typeof BODY_FORM)[keyof typeof BODY_FORM];

/** Every body form. */
export const BODY_FORMS = Object.values(BODY_FORM) as [BodyForm, ...BodyForm[]];

/** A body ready for the dead-letter columns. */
export type StoredBody =
  | { readonly form: "text"; readonly text: string; readonly fingerprint: Buffer }
  | { readonly form: "utf16"; readonly utf16: Buffer; readonly fingerprint: Buffer };

/**
 * The body's stored form and its fingerprint, as the database computes it (trigger
 * dead_letters_fingerprint_body): SHA-256 of a tag byte naming the form ("t" or "u") and the stored
 * bytes. The tag keeps the forms apart: the UTF-16 bytes of one body can be the UTF-8 bytes of
 * another ("A\u0600A" and "\ud841\u4180" are both 41 D8 80 41). `form` forces the utf16 form (the
 * writer's last resort, for a database whose encoding cannot hold the text).
 */
export function storedBody(body: string, form?: BodyForm): StoredBody {
  if (form !== BODY_FORM.utf16 && textCanHold(body)) {
    return { form: BODY_FORM.text, text: body, fingerprint: tagged("t", Buffer.from(body, "utf8")) };
  }
  const utf16 = Buffer.from(body, "utf16le");
  return { form: BODY_FORM.utf16, utf16, fingerprint: tagged("u", utf16) };
}

/** The stored columns of a dead letter's body. */
export interface StoredBodyColumns {
  readonly body_form: string;
  readonly body: string | null;
  readonly body_utf16: Buffer | null;
}

/** The body exactly as it was received, from its stored columns. */
export function bodyOf(row: StoredBodyColumns): string {
  if (row.body_form === BODY_FORM.text && row.body !== null) return row.body;
  if (row.body_form === BODY_FORM.utf16 && row.body_utf16 !== null) return row.body_utf16.toString("utf16le");
  throw new RangeError(
    `a dead letter's body_form ${JSON.stringify(row.body_form)} does not match its columns`,
  );
}

/** Whether PostgreSQL's text holds `text` as it is: no U+0000, no lone surrogate. */
export function textCanHold(text: string): boolean {
  return text.isWellFormed() && !text.includes("\u0000");
}

/**
 * Nesting past this is not offered to jsonb: the server's parser recurses, and the depth it allows
 * depends on its `max_stack_depth`; a deeper body would only cost a refused statement first.
 */
export const MAX_JSONB_DEPTH = 1000;

/**
 * The body as a jsonb parameter when it is worth trying: a JSON object with no escape jsonb is sure
 * to refuse, nested at most {@link MAX_JSONB_DEPTH}. The original text goes to the server, not a
 * re-serialisation, so jsonb keeps every digit of a number a JavaScript double would round.
 */
export function jsonbCandidate(body: string): string | null {
  if (!textCanHold(body) || nestingDepth(body) > MAX_JSONB_DEPTH || !jsonbEscapesSafe(body)) return null;
  try {
    const document: unknown = parseJson(body);
    return typeof document === "object" && document !== null && !Array.isArray(document) ? body : null;
  } catch {
    return null;
  }
}

/**
 * Whether a JSON text is free of the escapes jsonb refuses: `\u0000` and a `\uD800`–`\uDFFF`
 * escape that is not half of a pair. Checked on the text: JSON.parse keeps only the last of
 * duplicate keys, so a refused value could hide behind one.
 */
function jsonbEscapesSafe(text: string): boolean {
  for (let i = text.indexOf("\\"); i !== -1; i = text.indexOf("\\", i + 2)) {
    if (text[i + 1] !== "u") continue;
    const unit = Number.parseInt(text.slice(i + 2, i + 6), 16);
    if (unit === 0) return false;
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next =
        text.slice(i + 6, i + 8) === "\\u" ? Number.parseInt(text.slice(i + 8, i + 12), 16) : Number.NaN;
      if (!(next >= 0xdc00 && next <= 0xdfff)) return false;
      i += 6; // the low half is consumed with its high half
    } else if (unit >= 0xdc00 && unit <= 0xdfff) {
      return false;
    }
  }
  return true;
}

/**
 * The deepest nesting of `[`/`{` in a JSON text, counted without parsing (so a hostile body
 * cannot exhaust the stack); brackets inside strings are skipped.
 */
export function nestingDepth(text: string): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      depth++;
      if (depth > deepest) deepest = depth;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return deepest;
}

/** Nesting past this is kept as its JSON text: the walk is recursive, and attributes are shallow. */
const STORABLE_JSON_DEPTH = 32;

/**
 * A JSON value every string of which text and jsonb can hold: U+0000 and lone surrogates become
 * U+FFFD, in keys and values (a subtree nested deeper than {@link STORABLE_JSON_DEPTH} becomes its
 * JSON text, made storable the same way). For what the row keeps beside the body (message
 * attributes), which SQS restricts to the same characters as bodies, so only a hand-built event
 * can need it.
 */
export function storableJson(value: unknown, depth = 0): unknown {
  if (typeof value === "string") return storableString(value);
  if (value === null || typeof value !== "object") return value;
  if (depth > STORABLE_JSON_DEPTH) return storableString(JSON.stringify(value) ?? "null");
  if (Array.isArray(value)) return value.map((item) => storableJson(item, depth + 1));
  // fromEntries defines own properties: a "__proto__" key stays a key instead of a prototype.
  return Object.fromEntries(
    Object.entries(value).map(([key, item]) => [storableString(key), storableJson(item, depth + 1)]),
  );
}

function storableString(text: string): string {
  return textCanHold(text) ? text : text.replaceAll("\u0000", "\ufffd").toWellFormed();
}

function tagged(tag: "t" | "u", bytes: Buffer): Buffer {
  return createHash("sha256").update(tag, "latin1").update(bytes).digest();
}
