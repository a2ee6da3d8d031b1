/**
 * JSON as SQS takes it. Pure.
 *
 * SQS accepts a message body only in #x9, #xA, #xD, #x20–#xD7FF, #xE000–#xFFFD and
 * #x10000–#x10FFFF. `JSON.stringify` escapes control characters and lone surrogates but writes
 * U+FFFE and U+FFFF as they are, so a payload holding either (which arrived escaped, as `\uffff`)
 * would be refused on every send. Written escaped instead, it is the same JSON: the consumer parses
 * the same value, and its fingerprint is the same.
 */

const REFUSED_BY_SQS = /[\uFFFE\uFFFF]/g;

/** `JSON.stringify(value)` with what SQS refuses escaped; undefined for a value JSON cannot hold. */
export function sqsJson(value: unknown): string | undefined {
  const text = JSON.stringify(value);
  return text === undefined
    ? undefined
    : text.replace(REFUSED_BY_SQS, (c) => `\\u${c.charCodeAt(0).toString(16)}`);
}
