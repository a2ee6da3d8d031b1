/**
 * JSON from PostgreSQL without losing digits. node-postgres parses jsonb into JavaScript numbers,
 * which silently round integers beyond 2^53 and long decimals; a dead letter's payload must come
 * back exactly as it was received. Reading jsonb as text and parsing it here keeps every number
 * whose text a JavaScript number would not reproduce as raw JSON (JSON.rawJSON), so
 * JSON.stringify writes it out digit for digit. Escaped keys are read correctly on every runtime
 * (parse-json.ts).
 */
import { parseJson } from "../envelope/parse-json.ts";

/** Parses JSON text, keeping numbers exact. */
export function parseJsonExact(text: string): unknown {
  return parseJson(text, { exactNumbers: true });
}
