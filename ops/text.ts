/**
 * Making values safe and short for a terminal line. Values that come from dead letters (job ids,
 * payloads, error messages) were written by whoever produced the message: a crafted value must
 * not be able to rewrite the operator's terminal with control or bidi characters.
 */

/** C0/C1 controls, DEL, line/paragraph separators and bidi controls. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const UNSAFE_CHARS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** A value made safe for a terminal line: control and bidi characters escaped; null is "-". */
export function clean(value: unknown): string {
  const text = value === null || value === undefined ? "-" : String(value);
  return text.replace(UNSAFE_CHARS, (c) => {
    if (c === "\n") return "\\n";
    if (c === "\t") return "\\t";
    if (c === "\r") return "\\r";
    return `\\u${(c.codePointAt(0) ?? 0).toString(16).padStart(4, "0")}`;
  });
}

/** Length in code points (what a terminal shows, near enough). */
export function width(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

/** At most `max` code points; a cut value ends with "…". */
export function truncate(text: string, max: number): string {
  if (width(text) <= max) return text;
  return `${Array.from(text)
    .slice(0, Math.max(0, max - 1))
    .join("")}…`;
}
