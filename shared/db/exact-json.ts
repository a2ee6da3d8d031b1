/**
 * JSON from PostgreSQL without losing digits. node-postgres parses jsonb into JavaScript numbers,
 * which silently round integers beyond 2^53 and long decimals; a dead letter's payload must come
 * back exactly as it was received. Reading jsonb as text and parsing it here keeps every number
 * whose text a JavaScript number would not reproduce as raw JSON (JSON.rawJSON), so
 * JSON.stringify writes it out digit for digit.
 */

interface ReviverContext {
  readonly source?: string;
}

const { rawJSON } = JSON as unknown as { rawJSON(text: string): unknown };

/** Parses JSON text, keeping numbers exact. */
export function parseJsonExact(text: string): unknown {
  const reviver = (_key: string, value: unknown, context?: ReviverContext): unknown =>
    typeof value === "number" && context?.source !== undefined && String(value) !== context.source
      ? rawJSON(context.source)
      : value;
  return JSON.parse(text, reviver as (key: string, value: unknown) => unknown);
}
