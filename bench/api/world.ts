/**
 * The world bench/api.ts seeds: its consumers, queues, tenants, statuses and error kinds, who
 * resolves dead letters and why, the shape of a failure template (bench/api/failures.ts holds
 * them), the incidents, and the words the message filter is timed with.
 */
import { LOCAL_REGION } from "../../local/aws-clients.ts";
import { at } from "../lib/support.ts";

export const CONSUMERS = [
  "award-points",
  "send-receipt-email",
  "sync-crm-contact",
  "generate-invoice",
  "resize-product-image",
  "deliver-webhook",
  "index-search-document",
  "expire-subscription",
] as const;
const QUEUE_BASE = `https://sqs.${LOCAL_REGION}.amazonaws.com/123456789012`;
export const QUEUES = [
  `${QUEUE_BASE}/jobfence-orders`,
  `${QUEUE_BASE}/jobfence-notifications`,
  `${QUEUE_BASE}/jobfence-billing.fifo`,
] as const;
/** The queue each consumer (same index) reads. */
export const QUEUE_OF_CONSUMER = [0, 1, 0, 2, 0, 1, 0, 2].map((q) => at(QUEUES, q));
export const TENANTS = Array.from({ length: 50 }, (_, t) => `tenant-${String(t).padStart(3, "0")}`);
export const STATUSES = ["pending_review", "replayed", "discarded", "superseded"] as const;
export const ERROR_KINDS = ["exhausted", "hard", "poison", "unrecorded"] as const;
export type ErrorKind = (typeof ERROR_KINDS)[number];
export const DISCARD_REASONS = [
  "duplicate of an order already refunded by support",
  "test traffic from the staging producer",
  "customer account erased (GDPR request)",
  "payload from the retired v1 producer; cannot be processed",
];
export const ACTORS = ["ops-alice", "ops-bob", "oncall-carol", "bulk-replay-runbook"];
/** Days the seeded rows' created_at spans, ending now. */
export const SEED_DAYS = 30;

/** Library frames a failure is thrown from, above the consumer's own frame. */
export const LIB = {
  pg: "at /var/task/node_modules/pg/lib/client.js:545:17",
  pgPool: "at /var/task/node_modules/pg-pool/index.js:45:11",
  undici: "at async fetch (node:internal/deps/undici/undici:13510:13)",
  nodemailer:
    "at SMTPConnection._formatError (/var/task/node_modules/nodemailer/lib/smtp-connection/index.js:809:19)",
  smithy: "at throwDefaultError (/var/task/node_modules/@smithy/smithy-client/dist-cjs/index.js:867:20)",
  opensearch: "at onBody (/var/task/node_modules/@opensearch-project/opensearch/lib/Transport.js:426:23)",
  sharp: "at Sharp.toBuffer (/var/task/node_modules/sharp/lib/output.js:163:17)",
  date: "at Date.toISOString (<anonymous>)",
  zod: "at ZodObject.parse (/var/task/node_modules/zod/v4/classic/parse.js:12:11)",
  envelope: "at parseEnvelope (/var/task/shared/envelope/envelope.mjs:1:2210)",
} as const;

/** All consumers. */
export const ALL = CONSUMERS.map((_, c) => c);
/** A consumer's index by name. */
export const C = Object.fromEntries(CONSUMERS.map((name, c) => [name, c])) as Record<
  (typeof CONSUMERS)[number],
  number
>;

/** How one kind of failure looks in last_error; `key` names the incidents'. */
export interface FailureTemplate {
  readonly key?: string;
  readonly kind: ErrorKind;
  /** Consumers (indices into CONSUMERS) that fail this way. */
  readonly consumers: readonly number[];
  /** Weight among the templates of its kind and consumer; 0: only in its incident. */
  readonly weight: number;
  readonly class: string;
  /** format() text: %1$s an id number, %2$s a UUID, %3$s a small number (ms, a count, an octet). */
  readonly message: string;
  /** Library frames on top of the stack; null: no stack at all. */
  readonly frames: readonly string[] | null;
  /** The consumer's own function in the stack (its first own frame); null: none (parse errors). */
  readonly own: string | null;
}

/**
 * Bursts of one failure: rows created in [from, to) (fractions of the seeded month) are, with
 * probability `share`, the incident's consumer failing its way.
 */
export const INCIDENTS = [
  { key: "partner-down", from: 0.13, to: 0.14, share: 0.7 }, // day 3.9–4.2: 26 days ago, 7 h
  { key: "crm-rate-limit", from: 0.58, to: 0.6, share: 0.7 }, // day 17.4–18: 14 h
  { key: "bad-deploy", from: 0.965, to: 0.97, share: 0.7 }, // yesterday, 3.6 h
] as const;

/** Words the message filter is timed with (case-insensitive, as an operator types them). */
export const MESSAGE_COMMON = "timeout";
export const MESSAGE_RARE = "deadlock";
/** Only in the 26-day-old incident: a rare word whose rows are all at one end of the table. */
export const MESSAGE_BURST = "econnrefused";
