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
 * The instant `text` names (a valid {@link timestampSchema}) as PostgreSQL reads it, spelled one
 * way: UTC, `Z`, six fraction digits. PostgreSQL keeps microseconds: it reads a longer fraction as a
 * double and rounds it to the microsecond half to even (`rint(frac * 1e6)`), so `.0000005` is
 * `.000000` and `.9999995` the next second; this does the same, with the same double arithmetic.
 * Two spellings of one instant (`2026-01-01T01:00:00+01:00`, `2026-01-01T00:00:00.000Z`) become one
 * text, so a filter compared as text (the one-running-operation guard) compares instants, and a
 * stored filter shows the instant it acts on. An instant whose UTC year would be 0000 or 10000 is
 * spelled with the offset that keeps it in 0001 or 9999 (+15:59 or -15:59); one that a rounding
 * carries past the last second -15:59 can spell is kept as sent.
 */
export function canonicalInstant(text: string): string {
  const match =
    /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:Z|([+-])(\d{2}):(\d{2}))$/.exec(text);
  if (!match) return text;
  const [, y, mo, d, h, mi, sec, fraction, sign, oh = "0", om = "0"] = match;
  const micros = fraction === undefined ? 0 : roundHalfEven(Number(`0.${fraction}`) * 1e6);
  const offsetMinutes = (sign === "-" ? -1 : 1) * (Number(oh) * 60 + Number(om));
  const utc = new Date(0);
  utc.setUTCFullYear(Number(y), Number(mo) - 1, Number(d));
  // A fraction that rounds to a whole second carries into the seconds.
  utc.setUTCHours(Number(h), Number(mi) - offsetMinutes, Number(sec) + Math.floor(micros / 1e6), 0);
  const year = utc.getUTCFullYear();
  const shift = year < 1 ? MAX_OFFSET_MINUTES : year > 9999 ? -MAX_OFFSET_MINUTES : 0;
  const local = new Date(utc.getTime() + shift * 60_000);
  // A rounding carry past 9999-12-31T23:59:59-15:59 has no spelling in four digits: kept as sent.
  if (local.getUTCFullYear() < 1 || local.getUTCFullYear() > 9999) return text;
  const pad = (n: number, width = 2) => String(n).padStart(width, "0");
  const zone =
    shift === 0
      ? "Z"
      : `${shift > 0 ? "+" : "-"}${pad(Math.floor(Math.abs(shift) / 60))}:${pad(Math.abs(shift) % 60)}`;
  return `${pad(local.getUTCFullYear(), 4)}-${pad(local.getUTCMonth() + 1)}-${pad(local.getUTCDate())}T${pad(
    local.getUTCHours(),
  )}:${pad(local.getUTCMinutes())}:${pad(local.getUTCSeconds())}.${pad(micros % 1e6, 6)}${zone}`;
}

/** The largest UTC offset PostgreSQL reads, in minutes (±15:59). */
const MAX_OFFSET_MINUTES = 15 * 60 + 59;

/** C's `rint` in its default mode: to the nearest integer, a tie to the even one. */
function roundHalfEven(x: number): number {
  const floor = Math.floor(x);
  const diff = x - floor;
  if (diff > 0.5) return floor + 1;
  if (diff < 0.5) return floor;
  return floor % 2 === 0 ? floor : floor + 1;
}
