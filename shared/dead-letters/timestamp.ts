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

/**
 * The pattern of a timestamp PostgreSQL reads as sent: not year 0000, an offset of at most ±15:59,
 * and at most nine fraction digits (nanoseconds, as Go's RFC3339Nano writes them). PostgreSQL keeps
 * microseconds and rounds the rest away, but refuses (22007) a fraction of about 130 digits, which
 * zod's `\.\d+` allowed.
 */
export const POSTGRES_TIMESTAMP_PATTERN = replaceOnce(
  replaceOnce(
    replaceOnce(zodDateTimePattern(), "[+-](?:[01]\\d|2[0-3]):[0-5]\\d", "[+-](?:0\\d|1[0-5]):[0-5]\\d"),
    "(?:\\.\\d+)?",
    "(?:\\.\\d{1,9})?",
  ),
  "^",
  "^(?!0000)",
);

/** An RFC 3339 timestamp with an offset (or Z), within PostgreSQL's range, as sent. */
export const timestampSchema = z
  .string()
  .regex(
    new RegExp(POSTGRES_TIMESTAMP_PATTERN),
    "must be an RFC 3339 timestamp with an offset (or Z), from year 0001, with a UTC offset of at most ±15:59 and at most nine fraction digits",
  )
  .meta({ format: "date-time" });

/**
 * The instant `text` names (a valid {@link timestampSchema}), spelled one way: UTC, `Z`, nine fraction
 * digits (as sent, padded: nothing is rounded). Two spellings of one instant (`2026-01-01T01:00:00+01:00`, `2026-01-01T00:00:00.000Z`)
 * become the same text, so a filter compared as text (the one-running-operation guard) compares
 * instants. An instant whose UTC year would leave 0001–9999 keeps its spelling.
 */
export function canonicalInstant(text: string): string {
  const match =
    /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:Z|([+-])(\d{2}):(\d{2}))$/.exec(text);
  if (!match) return text;
  const [, y, mo, d, h, mi, sec, fraction = "", sign, oh = "0", om = "0"] = match;
  const offsetMinutes = (sign === "-" ? -1 : 1) * (Number(oh) * 60 + Number(om));
  const utc = new Date(0);
  utc.setUTCFullYear(Number(y), Number(mo) - 1, Number(d));
  utc.setUTCHours(Number(h), Number(mi) - offsetMinutes, Number(sec), 0);
  const year = utc.getUTCFullYear();
  if (year < 1 || year > 9999) return text;
  const pad = (n: number, width = 2) => String(n).padStart(width, "0");
  return `${pad(year, 4)}-${pad(utc.getUTCMonth() + 1)}-${pad(utc.getUTCDate())}T${pad(utc.getUTCHours())}:${pad(
    utc.getUTCMinutes(),
  )}:${pad(utc.getUTCSeconds())}.${fraction.padEnd(9, "0")}Z`;
}
