/**
 * The fake payment provider the benchmark charges through (jobfence/testing's `startFakeProvider`:
 * Idempotency-Key as Stripe honours it, a ledger of effects, a log of requests), from one place.
 */
export {
  type FakeProvider,
  type LedgerEntry,
  type RequestEntry,
  startFakeProvider,
} from "../../testing/fake-provider.ts";
