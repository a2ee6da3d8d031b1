/**
 * The confirmation token of a bulk operation's plan, and the rule for when one is needed. The token
 * binds the operation's kind, its filter and the set the plan matched (count, an order-free
 * checksum of the ids, and the last row), sealed with the deployment's key and valid for 15
 * minutes. Starting with it re-counts the set: if anything changed, the operator sees the new
 * set before anything runs. Pure.
 */
import { randomBytes } from "node:crypto";
import { z } from "zod";
import type { KeysetPosition } from "../db/queries/dead-letter-columns.ts";
import {
  InvalidPlanTokenError,
  PlanExpiredError,
  PlanFromEarlierKeyError,
} from "../errors/bulk-operation.ts";
import { filterFingerprint } from "./cursor.ts";
import { readUnverified, type SealKey, seal, unseal } from "./seal.ts";
import { timestampSchema } from "./timestamp.ts";

/** How long a plan's token may be used. */
export const PLAN_TOKEN_TTL_SECONDS = 15 * 60;

const PURPOSE = "jobfence:bulk-plan:v1";

/** The set a plan matched. */
export interface PlannedSet {
  readonly kind: "replay" | "discard";
  readonly matched: number;
  readonly checksum: string;
  readonly bound: KeysetPosition;
}

const payloadSchema = z
  .object({
    k: z.enum(["replay", "discard"]),
    f: z.string(),
    n: z.number().int().positive(),
    c: z.string().regex(/^-?\d+$/),
    t: timestampSchema,
    i: z.uuid(),
    e: z.number().int(),
    // A nonce: every plan issues its own token, so each can start its own operation (one each).
    r: z.string().regex(/^[A-Za-z0-9_-]{11}$/),
  })
  .strict();

/** The token for `set` planned under `filter` at `nowMs`. */
export function issuePlanToken(
  key: SealKey,
  set: PlannedSet,
  filter: object,
  nowMs: number,
): { token: string; expiresAt: string } {
  const expires = Math.floor(nowMs / 1000) + PLAN_TOKEN_TTL_SECONDS;
  const token = seal(key, PURPOSE, {
    k: set.kind,
    f: filterFingerprint(filter),
    n: set.matched,
    c: set.checksum,
    t: set.bound.createdAt,
    i: set.bound.id,
    e: expires,
    r: randomBytes(8).toString("base64url"),
  });
  return { token, expiresAt: new Date(expires * 1000).toISOString() };
}

/** The set a token confirms for `kind` under `filter`; throws when it is not a usable one. */
export function readPlanToken(
  key: SealKey,
  token: string,
  kind: "replay" | "discard",
  filter: object,
  nowMs: number,
): PlannedSet {
  const parsed = payloadSchema.safeParse(unseal(key, PURPOSE, token));
  if (!parsed.success) {
    // A plan token in every part but its MAC: sealed under a key this API no longer has.
    if (payloadSchema.safeParse(readUnverified(token)).success) {
      throw new PlanFromEarlierKeyError(
        `the token's signature does not match this API's key: either its plan was made before the key changed (the local stack makes a new key at every start; a deployment, when its key is rotated) or the token was altered; either way it can start nothing; ${planAgain(kind)}`,
      );
    }
    throw new InvalidPlanTokenError(`the token is not one this API issued; ${planAgain(kind)}`);
  }
  const p = parsed.data;
  if (p.k !== kind) throw new InvalidPlanTokenError(`the token confirms a ${p.k}, not a ${kind}`);
  if (p.f !== filterFingerprint(filter)) {
    throw new InvalidPlanTokenError(
      "the token was issued for another filter; send the plan's filter unchanged",
    );
  }
  if (p.e * 1000 <= nowMs)
    throw new PlanExpiredError(
      `the plan's token expired at ${new Date(p.e * 1000).toISOString()}; ${planAgain(kind)}`,
    );
  return { kind: p.k, matched: p.n, checksum: p.c, bound: { createdAt: p.t, id: p.i } };
}

/** How to get a usable token: plan the same set again and start with the new one. */
function planAgain(kind: "replay" | "discard"): string {
  return `plan again (POST /v1/core/dead-letters/${kind}/plan with the same filter, or the ops CLI's dead-letters ${kind} <filters> --plan) and start it with the new token`;
}

/**
 * Whether starting an operation on `matched` rows needs the plan's token: more rows than
 * `confirmAbove`, or every pending dead letter there is, however the filter was spelled (a filter
 * that happens to match everything is no narrower than none).
 */
export function confirmationRequired(matched: number, pendingTotal: number, confirmAbove: number): boolean {
  return matched > confirmAbove || matched >= pendingTotal;
}
