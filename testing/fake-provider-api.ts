/**
 * What the fake provider (./fake-provider.ts) accepts and answers, apart from its server: the
 * bodies of its two endpoints, the faults it can be told to inject, the records it keeps and the
 * shape of its error answers. Shaped after Stripe's API (JSON bodies instead of form encoding), so a
 * consumer's step talks to it as it would to a real provider. Pure.
 */
import { z } from "zod";
import { ConfigurationError } from "../shared/errors/configuration.ts";

/** The provider's effects: a charge made, an email sent. */
export type ProviderEffect = "charge" | "email";

/** The endpoints that act, each with the effect it has. */
export const PROVIDER_ENDPOINTS: Readonly<Record<string, ProviderEffect>> = Object.freeze({
  "/v1/charges": "charge",
  "/v1/emails": "email",
});

/** POST /v1/charges: an amount in the currency's smallest unit, charged to a customer. */
export const chargeRequest = z.strictObject({
  amount: z.number().int().positive(),
  currency: z.string().regex(/^[A-Za-z]{3}$/, "a three-letter ISO currency code"),
  customer: z.string().min(1),
  description: z.string().optional(),
});

/** POST /v1/emails: one plain-text message to one address. */
export const emailRequest = z.strictObject({
  to: z.email(),
  subject: z.string().min(1),
  text: z.string(),
});

/** Each endpoint's body. */
export const REQUEST_BODIES: Readonly<Record<ProviderEffect, z.ZodType>> = Object.freeze({
  charge: chargeRequest,
  email: emailRequest,
});

/**
 * An Idempotency-Key as Stripe accepts it: 1 to 255 printable ASCII characters. A UUID, or a key
 * made by jobfence's `stepKey`, is one.
 */
export const IDEMPOTENCY_KEY = /^[\x20-\x7e]{1,255}$/;

/** One effect the provider had, in order. */
export interface LedgerEntry {
  /** 1, 2, 3…: the effect's place in the ledger (a reset starts again at 1). */
  readonly seq: number;
  /** The object's id, as answered: `ch_…` or `em_…`. */
  readonly id: string;
  readonly kind: ProviderEffect;
  /** The Idempotency-Key it was made under; null when the request carried none. */
  readonly key: string | null;
  /** The request's body, as parsed. */
  readonly request: unknown;
  /** When it was made (ISO 8601). */
  readonly at: string;
}

/**
 * What became of a request:
 * - `acted`: the effect was made and answered at once;
 * - `replayed`: a repeat of a key and the same request, answered with the first answer, no effect;
 * - `refused`: answered 4xx without an effect (a bad body or key, a key used with another request or
 *   still in flight, an unknown path);
 * - `failed`: a `fail` fault answered it, without an effect;
 * - `hung`: a `hang` fault holds it unanswered (with its effect made when the fault said `act`);
 * - `late`: a `late` fault made the effect and answers after its delay.
 */
export type RequestOutcome = "acted" | "replayed" | "refused" | "failed" | "hung" | "late";

/** A request the provider saw (control requests under `/_fake/` are not kept). */
export interface RequestEntry {
  readonly seq: number;
  readonly method: string;
  readonly path: string;
  /** Its Idempotency-Key; null when it carried none. */
  readonly key: string | null;
  readonly outcome: RequestOutcome;
  /** The status it was (or, when late, will be) answered with; null when hung. */
  readonly status: number | null;
  /** The ledger entry it made, if any. */
  readonly effect: string | null;
  readonly at: string;
}

/**
 * A fault for the next requests that would act (to `path`, or to either endpoint): requests answered
 * from a remembered key, or refused, pass untouched and do not count.
 * - `fail`: answer `status` (500) without acting or remembering the key, so a retry with the same
 *   key acts;
 * - `hang`: never answer; with `act`, make the effect and remember the key first (a retry is then
 *   replayed), without it, as if the request never arrived (a retry acts);
 * - `late`: act and remember the key at once, and answer after `delayMs` (2000); a retry meanwhile
 *   gets 409 `idempotency_key_in_use`, after it the replayed answer.
 *
 * Each applies to `times` requests (1), then is gone; faults apply in the order they were given.
 */
export type FaultSpec =
  | { path?: string; mode: "fail"; status?: number; times?: number }
  | { path?: string; mode: "hang"; act?: boolean; times?: number }
  | { path?: string; mode: "late"; delayMs?: number; times?: number };

const faultPath = z
  .enum(Object.keys(PROVIDER_ENDPOINTS) as [string, ...string[]], {
    error: `an endpoint: ${Object.keys(PROVIDER_ENDPOINTS).join(" or ")}`,
  })
  .optional();
const times = z.number().int().min(1).max(1_000_000).default(1);

const faultSchema = z.discriminatedUnion(
  "mode",
  [
    z.strictObject({
      mode: z.literal("fail"),
      path: faultPath,
      status: z.number().int().min(400).max(599).default(500),
      times,
    }),
    z.strictObject({ mode: z.literal("hang"), path: faultPath, act: z.boolean().default(false), times }),
    z.strictObject({
      mode: z.literal("late"),
      path: faultPath,
      delayMs: z.number().int().min(0).max(600_000).default(2000),
      times,
    }),
  ],
  { error: 'mode: one of "fail", "hang", "late"' },
);

/** A fault with its defaults filled in. */
export type Fault = z.output<typeof faultSchema>;

/** `spec` with its defaults; throws {@link ConfigurationError} listing every problem. */
export function parseFault(spec: unknown): Fault {
  const parsed = faultSchema.safeParse(spec);
  if (parsed.success) return parsed.data;
  throw new ConfigurationError(
    "fake provider fault",
    parsed.error.issues.map((issue) =>
      issue.path.length > 0 ? `${issue.path.join(".")}: ${issue.message}` : issue.message,
    ),
  );
}

/** Stripe's error types, as the fake answers them. */
export type ProviderErrorType =
  | "invalid_request_error"
  | "idempotency_error"
  | "api_error"
  | "rate_limit_error"
  | "card_error";

/** An error answer's body, as Stripe shapes it. */
export function errorBody(
  type: ProviderErrorType,
  message: string,
  code?: string,
): { error: { type: ProviderErrorType; message: string; code?: string } } {
  return { error: { type, message, ...(code === undefined ? {} : { code }) } };
}

/** The error type a `fail` fault answers its status with. */
export function faultErrorType(status: number): ProviderErrorType {
  if (status === 429) return "rate_limit_error";
  if (status === 402) return "card_error";
  return status >= 500 ? "api_error" : "invalid_request_error";
}

/** A body's problems, one clause each, for an `invalid_request_error`'s message. */
export function describeIssues(error: z.ZodError): string {
  return error.issues
    .map((issue) => (issue.path.length > 0 ? `${issue.path.join(".")}: ${issue.message}` : issue.message))
    .join("; ");
}
