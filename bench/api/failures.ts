/**
 * The failure templates the seed draws from (~40): class, a message whose ids, UUIDs and numbers
 * vary per row, and the frames of a V8 stack, each seen by the consumers that would fail that way.
 * Their order is their index in the seed's pick table: the same order, the same seeded rows.
 */
import { RETRIED } from "./failures-retried.ts";
import { ALL, C, type FailureTemplate, LIB } from "./world.ts";

/** Hard: permanent failures, dead-lettered at once. */
const HARD: readonly FailureTemplate[] = [
  {
    kind: "hard",
    consumers: [C["award-points"], C["expire-subscription"]],
    weight: 40,
    class: "PermanentJobError",
    message: "account acct-%1$s is closed",
    frames: [],
    own: "loadAccount",
  },
  {
    kind: "hard",
    consumers: [C["award-points"]],
    weight: 10,
    class: "DatabaseError",
    message: 'duplicate key value violates unique constraint "points_ledger_order_key" [23505]',
    frames: [LIB.pg],
    own: "async applyChange",
  },
  {
    kind: "hard",
    consumers: [C["send-receipt-email"]],
    weight: 30,
    class: "PermanentJobError",
    message: "customer %2$s has no email address",
    frames: [],
    own: "resolveRecipient",
  },
  {
    kind: "hard",
    consumers: [C["send-receipt-email"], C["sync-crm-contact"]],
    weight: 8,
    class: "TypeError",
    message: "Cannot read properties of undefined (reading 'email')",
    frames: [],
    own: "toContact",
  },
  {
    kind: "hard",
    consumers: [C["sync-crm-contact"]],
    weight: 30,
    class: "HttpError",
    message: "CRM API answered 404 Not Found for contact %2$s",
    frames: [],
    own: "async upsertContact",
  },
  {
    kind: "hard",
    consumers: [C["generate-invoice"]],
    weight: 30,
    class: "ValidationError",
    message: "invoice INV-%1$s: VAT number is not valid for its country",
    frames: [],
    own: "validateInvoice",
  },
  {
    kind: "hard",
    consumers: [C["generate-invoice"]],
    weight: 10,
    class: "DatabaseError",
    message:
      'insert or update on table "invoice_lines" violates foreign key constraint "invoice_lines_product_fk" [23503]',
    frames: [LIB.pg],
    own: "async saveInvoice",
  },
  {
    kind: "hard",
    consumers: [C["generate-invoice"], C["expire-subscription"]],
    weight: 5,
    class: "RangeError",
    message: "Invalid time value",
    frames: [LIB.date],
    own: "periodEnd",
  },
  {
    kind: "hard",
    consumers: [C["resize-product-image"]],
    weight: 40,
    class: "ImageError",
    message: "Input buffer contains unsupported image format",
    frames: [LIB.sharp],
    own: "async resize",
  },
  {
    kind: "hard",
    consumers: [C["resize-product-image"]],
    weight: 10,
    class: "ImageError",
    message: "Input image exceeds pixel limit (%1$s x %3$s)",
    frames: [LIB.sharp],
    own: "async resize",
  },
  {
    kind: "hard",
    consumers: [C["deliver-webhook"]],
    weight: 30,
    class: "HttpError",
    message: "webhook endpoint answered 410 Gone: subscription %1$s was deleted",
    frames: [],
    own: "async deliver",
  },
  {
    kind: "hard",
    consumers: [C["deliver-webhook"]],
    weight: 3,
    class: "Error",
    message: "certificate has expired [CERT_HAS_EXPIRED]",
    frames: [LIB.undici],
    own: "async deliver",
  },
  {
    kind: "hard",
    consumers: [C["index-search-document"]],
    weight: 30,
    class: "ResponseError",
    message:
      "mapper_parsing_exception: failed to parse field [price] of type [float] in document with id '%1$s'",
    frames: [LIB.opensearch],
    own: "async indexDocument",
  },
  {
    kind: "hard",
    consumers: [C["expire-subscription"]],
    weight: 30,
    class: "PermanentJobError",
    message: "subscription sub_%2$s already expired",
    frames: [],
    own: "expireSubscription",
  },
];

/** Poison: the message could not be read; thrown by jobfence's envelope parse, no own frame. */
const POISON: readonly FailureTemplate[] = [
  {
    kind: "poison",
    consumers: ALL,
    weight: 40,
    class: "PoisonMessageError",
    message: "payload.amount: expected number, received string",
    frames: [LIB.zod, LIB.envelope],
    own: null,
  },
  {
    kind: "poison",
    consumers: ALL,
    weight: 30,
    class: "PoisonMessageError",
    message: "body is not JSON: Unexpected token < in JSON at position %3$s",
    frames: [LIB.envelope],
    own: null,
  },
  {
    kind: "poison",
    consumers: ALL,
    weight: 15,
    class: "PoisonMessageError",
    message: "payload.lines[%3$s].qty: expected integer, received string",
    frames: [LIB.zod, LIB.envelope],
    own: null,
  },
  {
    kind: "poison",
    consumers: ALL,
    weight: 15,
    class: "PoisonMessageError",
    message: "envelope.tenant_id is missing",
    frames: [LIB.zod, LIB.envelope],
    own: null,
  },
];

/** Unrecorded: found on the backstop queue, no failure recorded, no stack. */
const UNRECORDED: readonly FailureTemplate[] = [
  {
    kind: "unrecorded",
    consumers: ALL,
    weight: 100,
    class: "UnrecordedFailure",
    message: "found on the backstop queue after %3$s receives",
    frames: null,
    own: null,
  },
];

/** Incidents only (weight 0): see INCIDENTS in bench/api/world.ts. */
const INCIDENT_ONLY: readonly FailureTemplate[] = [
  {
    key: "partner-down",
    kind: "exhausted",
    consumers: [C["deliver-webhook"]],
    weight: 0,
    class: "FetchError",
    message:
      "request to https://hooks.acme-%1$s.example/events failed, reason: connect ECONNREFUSED 10.0.%3$s.17:443",
    frames: [LIB.undici],
    own: "async deliver",
  },
  {
    key: "crm-rate-limit",
    kind: "exhausted",
    consumers: [C["sync-crm-contact"]],
    weight: 0,
    class: "HttpError",
    message: "CRM API answered 429 Too Many Requests (retry after %3$s s) for contact %2$s",
    frames: [],
    own: "async upsertContact",
  },
  {
    key: "bad-deploy",
    kind: "hard",
    consumers: [C["generate-invoice"]],
    weight: 0,
    class: "TypeError",
    message: "Cannot read properties of undefined (reading 'taxRate')",
    frames: [],
    own: "computeTotals",
  },
];

export const FAILURES: readonly FailureTemplate[] = [
  ...RETRIED,
  ...HARD,
  ...POISON,
  ...UNRECORDED,
  ...INCIDENT_ONLY,
];

/** The index in FAILURES of the template named `key` (an incident's). */
export function templateIndex(key: string): number {
  const index = FAILURES.findIndex((t) => t.key === key);
  if (index < 0) throw new Error(`no failure template ${key}`);
  return index;
}
