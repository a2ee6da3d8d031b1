/**
 * RFC 3339 timestamps that PostgreSQL's timestamptz accepts as well: zod's ISO check allows year
 * 0000 and UTC offsets up to ±23:59, which PostgreSQL refuses (22008, 22009). A client's timestamp
 * must be refused as a bad request, not reach the database and fail there.
 */
import { z } from "zod";

/** PostgreSQL accepts UTC offsets up to ±15:59. */
const MAX_OFFSET_HOURS = 15;

/** Whether PostgreSQL can read an RFC 3339 timestamp that zod's ISO check already accepted. */
export function isPostgresTimestamp(text: string): boolean {
  const year = Number(text.slice(0, 4));
  const offset = /([+-])(\d{2}):?(\d{2})$/.exec(text);
  return year >= 1 && (!offset || Number(offset[2]) <= MAX_OFFSET_HOURS) && Number.isFinite(Date.parse(text));
}

/** An RFC 3339 timestamp with an offset (or Z), within PostgreSQL's range. */
export const timestampSchema = z.iso.datetime({ offset: true, local: false }).refine(isPostgresTimestamp, {
  message: "must be a timestamp from year 0001 with a UTC offset of at most ±15:59",
});
