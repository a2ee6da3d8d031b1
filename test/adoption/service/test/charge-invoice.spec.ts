/**
 * The service's test of its consumer with a step, against jobfence's fake payment provider: a real
 * HTTP server that honours Idempotency-Key as gateways do and keeps a ledger of what it did.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import { stepKey } from "jobfence";
import {
  consumerTestKit,
  type FakeProvider,
  type RunningPostgres,
  startEmbeddedPostgres,
  startFakeProvider,
} from "jobfence/testing";
import pg from "pg";
import { chargeInvoice } from "../src/charge.js";

let postgres: RunningPostgres;
let provider: FakeProvider;
let kit: Awaited<ReturnType<typeof consumerTestKit<typeof chargeInvoice.payload>>>;

const SETUP_TIMEOUT_MS = 120_000;

before(
  async () => {
    postgres = await startEmbeddedPostgres({ durability: "fast" });
    execFileSync(
      "npx",
      ["jobfence", "migrate", "--database-url", postgres.url, "--consumer", "charge-invoice"],
      { stdio: "inherit" },
    );
    const client = new pg.Client({ connectionString: postgres.url });
    await client.connect();
    await client.query(
      readFileSync(new URL("../../migrations/0001_invoices.sql", import.meta.url), "utf8").replaceAll(
        "jobfence_consumer_record_payment",
        "jobfence_consumer_charge_invoice",
      ),
    );
    await client.query("INSERT INTO billing.invoices (id, amount_cents) VALUES ('inv-9', 900)");
    await client.end();
    provider = await startFakeProvider();
    process.env.PAYMENTS_URL = provider.url;
    kit = await consumerTestKit(chargeInvoice, { databaseUrl: postgres.url });
  },
  { timeout: SETUP_TIMEOUT_MS },
);

after(async () => {
  await kit?.close();
  await provider?.close();
  await postgres?.stop();
});

test("a charge delivered twice, its provider failing once, charges the card once with the job's key", async () => {
  const job = kit.job({ invoice_id: "inv-9", amount_cents: 900, customer: "cus_1" });
  provider.fault({ path: "/v1/charges", mode: "fail", status: 503 });
  const first = await kit.deliver(job);
  assert.deepEqual(
    first.results.map((r) => r.status),
    ["retry"],
  );
  // The retry calls again, with the same key: the provider acts now, and the result is recorded.
  const retried = await kit.redeliver();
  assert.equal(retried.applied.length, 1);
  // A duplicate finds the fence and calls nothing.
  const again = await kit.deliver(job);
  assert.equal(again.duplicates.length, 1);
  const charges = provider.ledger().filter((entry) => entry.kind === "charge");
  assert.equal(charges.length, 1);
  assert.equal(charges[0]?.key, stepKey("charge-invoice", job.job_id, "charge"));
  const [recorded] = await kit.steps(job.job_id);
  assert.equal(recorded?.key, charges[0]?.key);
  assert.deepEqual(recorded?.result, { id: charges[0]?.id, amount: 900 });
  const [invoice] = await kit.query<{ paid_cents: number }>(
    "SELECT paid_cents FROM billing.invoices WHERE id = 'inv-9'",
  );
  assert.equal(invoice?.paid_cents, 900);
});
