/**
 * RFC 3339 timestamps that PostgreSQL's timestamptz accepts as well: zod's ISO check allows year
 * 0000 and UTC offsets up to ±23:59, which PostgreSQL refuses (22008, 22009). A client's timestamp
 * must be refused as a bad request, not reach the database and fail there.
 *
 * The check is one regular expression, and the document shows that very expression as the field's
 * `pattern`: zod's own for an ISO date-time with an offset (calendar days and leap years included),
 * with the year 0000 and offsets past ±15:59 taken out.
 */
import { z } from "zod";

/** zod's pattern for an RFC 3339 date-time with a required offset (or Z), as its schema shows it. */
function zodDateTimePattern(): string {
  const { pattern } = z.toJSONSchema(z.iso.datetime({ offset: true, local: false })) as { pattern?: string };
  if (pattern === undefined) throw new Error("zod's ISO date-time schema has no pattern");
  return pattern;
}

/** Replaces `from` in `text` exactly once, or fails: a zod upgrade that changed its pattern must be noticed. */
function replaceOnce(text: string, from: string, to: string): string {
  const at = text.indexOf(from);
  if (at < 0 || text.indexOf(from, at + 1) >= 0) {
    throw new Error(`zod's date-time pattern changed: ${JSON.stringify(from)} is not in it exactly once`);
  }
  return text.slice(0, at) + to + text.slice(at + from.length);
}

/** The pattern of a timestamp PostgreSQL reads: not year 0000, and an offset of at most ±15:59. */
export const POSTGRES_TIMESTAMP_PATTERN = replaceOnce(
  replaceOnce(zodDateTimePattern(), "[+-](?:[01]\\d|2[0-3]):[0-5]\\d", "[+-](?:0\\d|1[0-5]):[0-5]\\d"),
  "^",
  "^(?!0000)",
);

/** An RFC 3339 timestamp with an offset (or Z), within PostgreSQL's range. */
export const timestampSchema = z
  .string()
  .regex(
    new RegExp(POSTGRES_TIMESTAMP_PATTERN),
    "must be an RFC 3339 timestamp with an offset (or Z), from year 0001, with a UTC offset of at most ±15:59",
  )
  .meta({ format: "date-time" });
