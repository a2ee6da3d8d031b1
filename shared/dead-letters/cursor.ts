/**
 * Keyset cursors of the list and bulk replay. Opaque to clients (base64url JSON), validated on
 * the way back in: a cursor names a position (created_at with microseconds, id) and the filter it
 * was issued for, so a cursor used with another filter, or edited, is refused rather than silently
 * paging something else. Pure.
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import { InvalidCursorError } from "../errors.ts";
import { timestampSchema } from "./timestamp.ts";

/** A position in (created_at, id) order. `createdAt` is PostgreSQL's text, microseconds kept. */
export interface KeysetPosition {
  readonly createdAt: string;
  readonly id: string;
}

/**
 * Which walk a cursor belongs to: the list pages newest first, a bulk replay oldest first, so a
 * position from one means something else in the other.
 */
export type CursorWalk = "list" | "bulk-replay";

const payloadSchema = z
  .object({
    v: z.literal(1),
    t: timestampSchema,
    i: z.uuid(),
    f: z.string().regex(/^[0-9a-f]{16}$/),
  })
  .strict();

/** A short fingerprint of a filter: same filter, same fingerprint, whatever the key order. */
export function filterFingerprint(filter: object): string {
  const canonical = JSON.stringify(
    Object.entries(filter)
      .filter(([, value]) => value !== undefined)
      .sort(([a], [b]) => a.localeCompare(b)),
  );
  return createHash("sha256").update(canonical).digest("hex").slice(0, 16);
}

/** The cursor that resumes `walk` after `position` under `filter`. */
export function encodeCursor(position: KeysetPosition, filter: object, walk: CursorWalk): string {
  const payload = { v: 1, t: position.createdAt, i: position.id, f: filterFingerprint({ ...filter, walk }) };
  return Buffer.from(JSON.stringify(payload), "utf8").toString("base64url");
}

/** The position a cursor names; throws InvalidCursorError when it is unusable with `filter` in `walk`. */
export function decodeCursor(cursor: string, filter: object, walk: CursorWalk): KeysetPosition {
  let parsed: unknown;
  try {
    if (!/^[A-Za-z0-9_-]+$/.test(cursor)) throw new InvalidCursorError("not base64url");
    parsed = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8"));
  } catch {
    throw new InvalidCursorError("cursor is not one this API issued");
  }
  const result = payloadSchema.safeParse(parsed);
  if (!result.success) throw new InvalidCursorError("cursor is not one this API issued");
  if (result.data.f !== filterFingerprint({ ...filter, walk })) {
    throw new InvalidCursorError(
      "cursor was issued for other filters or another endpoint; repeat the same request's filters or start without a cursor",
    );
  }
  return { createdAt: result.data.t, id: result.data.i };
}
