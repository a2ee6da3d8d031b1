/**
 * Keyset cursors of the list. Opaque to clients and sealed (./seal.ts): a cursor names a position
 * (created_at with microseconds, id) and the filter it was issued for, so a cursor used with
 * another filter, edited or made up is refused rather than silently paging something else. Pure.
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import type { KeysetPosition } from "../db/queries/dead-letter-columns.ts";
import { InvalidCursorError } from "../errors/dead-letter.ts";
import { type SealKey, seal, unseal } from "./seal.ts";
import { timestampSchema } from "./timestamp.ts";

const PURPOSE = "jobfence:list-cursor:v2";

const payloadSchema = z
  .object({
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

/** The cursor that resumes the list after `position` under `filter`. */
export function encodeCursor(key: SealKey, position: KeysetPosition, filter: object): string {
  return seal(key, PURPOSE, { t: position.createdAt, i: position.id, f: filterFingerprint(filter) });
}

/** The position a cursor names; throws InvalidCursorError when it is unusable with `filter`. */
export function decodeCursor(key: SealKey, cursor: string, filter: object): KeysetPosition {
  const result = payloadSchema.safeParse(unseal(key, PURPOSE, cursor));
  if (!result.success) throw new InvalidCursorError("cursor is not one this API issued");
  if (result.data.f !== filterFingerprint(filter)) {
    throw new InvalidCursorError(
      "cursor was issued for other filters; repeat the same request's filters or start without a cursor",
    );
  }
  return { createdAt: result.data.t, id: result.data.i };
}
