/**
 * What a fence transaction decided for one job, as a value: the batch transaction hands it to the
 * record's spine, which takes it instead of opening a transaction of its own.
 */

/** What a fence transaction did with a record's job. */
export type FenceSettlement =
  /** Its work committed, `fenceMs` after the transaction's BEGIN. */
  | { readonly status: "applied"; readonly fenceMs?: number }
  /** Its fence existed with its fingerprint, or an earlier record of the batch carried the same job. */
  | { readonly status: "duplicate" }
  /** Its job id's fence (or an earlier record of the batch) holds another job. */
  | { readonly status: "conflict"; readonly fenceFingerprint: Buffer }
  /** Its work threw (the batch was redone without it), or the batch's commit failed. */
  | { readonly status: "failed"; readonly error: unknown };

/**
 * What an existing fence means for a message with `fingerprint`: the same job (a duplicate), or
 * another job under the same id (a conflict). A fence written before fingerprints existed cannot
 * tell, and counts as the same job.
 */
export function settlementOfExisting(fingerprint: Buffer, fenced: Buffer | null): FenceSettlement {
  if (fenced === null || fenced.equals(fingerprint)) return { status: "duplicate" };
  return { status: "conflict", fenceFingerprint: fenced };
}
