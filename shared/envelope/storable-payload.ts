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
      if (typeof document === "object" && document !== null && !Array.isArray(document) && jsonbSafe(body)) {
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
 * Whether the JSON text holds only what jsonb accepts. Checked on the text, not the parsed value:
 * JSON.parse keeps only the last of duplicate keys, so a refused value could hide behind one.
 * jsonb refuses the escape `\u0000` and a `\uD800`–`\uDFFF` escape that is not half of a pair;
 * a literal lone surrogate is caught by isWellFormed.
 */
function jsonbSafe(text: string): boolean {
  if (!text.isWellFormed()) return false;
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
