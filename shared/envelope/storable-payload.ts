/**
 * What a dead letter stores as `payload` (SPEC §2, §5): the envelope as received when it is a JSON
 * object PostgreSQL's jsonb can hold, otherwise `{"raw": "<body text>"}`. Pure.
 *
 * The result is JSON text for a `jsonb` parameter. A body that qualifies is passed through as its
 * original text, not re-serialised, so PostgreSQL parses exactly what was sent (a large integer
 * keeps every digit, which a JavaScript number would not).
 *
 * jsonb cannot hold U+0000, nor a lone UTF-16 surrogate, and refuses documents nested deeper than
 * its parser's stack allows. Such bodies are kept as raw text instead; a literal NUL in the text is
 * escaped to the six characters `\u0000` and the row says so (`"nul": "escaped"`), and lone
 * surrogates become U+FFFD (`"surrogates": "replaced"`).
 */

/** Deeper JSON than this is stored as raw text rather than as a jsonb document. */
export const MAX_STORED_DEPTH = 100;

/** The jsonb-safe form of a message body, as JSON text of an object. */
export function storablePayload(body: string): string {
  if (nestingDepth(body) <= MAX_STORED_DEPTH) {
    try {
      const document: unknown = JSON.parse(body);
      if (
        typeof document === "object" &&
        document !== null &&
        !Array.isArray(document) &&
        jsonbSafe(document)
      ) {
        return body;
      }
    } catch {
      // not JSON: stored raw below
    }
  }
  return JSON.stringify(rawPayload(body));
}

function rawPayload(body: string): Record<string, unknown> {
  const payload: Record<string, unknown> = {};
  let text = body;
  if (text.includes("\u0000")) {
    text = text.replaceAll("\u0000", "\\u0000");
    payload.nul = "escaped";
  }
  if (!text.isWellFormed()) {
    text = text.toWellFormed();
    payload.surrogates = "replaced";
  }
  return { raw: text, ...payload };
}

/**
 * Whether every key and string value of the parsed document is text jsonb can hold: no U+0000,
 * no lone surrogate. Walks iteratively; the depth was bounded before parsing.
 */
function jsonbSafe(document: object): boolean {
  const pending: unknown[] = [document];
  while (pending.length > 0) {
    const value = pending.pop();
    if (typeof value === "string") {
      if (value.includes("\u0000") || !value.isWellFormed()) return false;
    } else if (Array.isArray(value)) {
      pending.push(...value);
    } else if (typeof value === "object" && value !== null) {
      for (const [key, inner] of Object.entries(value)) pending.push(key, inner);
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
