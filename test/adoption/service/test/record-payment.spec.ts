/**
 * The service's test of its consumer, with jobfence's kit against an embedded PostgreSQL: the core
 * migrations by the `jobfence` command, the service's own by the service, its own Middy chain
 * driven by the kit.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import { consumerTestKit, type RunningPostgres, startEmbeddedPostgres } from "jobfence/testing";
import pg from "pg";
import { audited, paymentChain } from "../src/chain.js";
import { recordPayment } from "../src/consumer.js";

let postgres: RunningPostgres;
let kit: Awaited<ReturnType<typeof consumerTestKit<typeof recordPayment.payload>>>;

/** Starting PostgreSQL and migrating takes seconds; a hang must fail the run, not hold it. */
const SETUP_TIMEOUT_MS = 120_000;

before(
  async () => {
    postgres = await startEmbeddedPostgres({ durability: "fast" });
    // jobfence owns `core` and the consumer's role; nothing else.
    execFileSync(
      "npx",
      ["jobfence", "migrate", "--database-url", postgres.url, "--consumer", "record-payment"],
      {
        stdio: "inherit",
      },
    );
    // The service's own migration tool (here: plain SQL) owns the rest.
    const client = new pg.Client({ connectionString: postgres.url });
    await client.connect();
    await client.query(readFileSync(new URL("../../migrations/0001_invoices.sql", import.meta.url), "utf8"));
    await client.query("INSERT INTO billing.invoices (id, amount_cents) VALUES ('inv-1', 500)");
    await client.end();
    kit = await consumerTestKit(recordPayment, { databaseUrl: postgres.url, chain: paymentChain });
  },
  { timeout: SETUP_TIMEOUT_MS },
);

after(async () => {
  await kit?.close();
  await postgres?.stop();
});

test("a payment delivered twice is applied once, through the service's own chain", async () => {
  const job = kit.job({ invoice_id: "inv-1", amount_cents: 200 });
  const delivery = await kit.deliver(job, job);
  assert.equal(delivery.applied.length, 1);
  assert.equal(delivery.duplicates.length, 1);
  const [invoice] = await kit.query<{ paid_cents: number }>(
    "SELECT paid_cents FROM billing.invoices WHERE id = 'inv-1'",
  );
  assert.equal(invoice?.paid_cents, 200);
  assert.ok((await kit.fence(job.job_id)) !== undefined);
  assert.ok(audited.length >= 2, `the service's middleware saw each record: ${audited.join(", ")}`);
});

test("a payment for no invoice is a hard dead letter; a body that is not JSON is poison", async () => {
  const missing = kit.job({ invoice_id: "inv-404", amount_cents: 1 });
  const delivery = await kit.deliver(missing, "{not json");
  assert.deepEqual(
    delivery.results.map((r) => [r.status, r.kind]),
    [
      ["dead-lettered", "hard"],
      ["dead-lettered", "poison"],
    ],
  );
  assert.equal((await kit.deadLetters({ kind: "hard" })).length, 1);
});

test("jobfence doctor finds the database as the definitions declare it", () => {
  const report = execFileSync(
    "npx",
    ["jobfence", "doctor", "--database-url", postgres.url, "--definitions", "dist/src/consumer.js"],
    { encoding: "utf8" },
  );
  assert.match(report, /no findings/);
});

test("jobfence ops is the ops CLI, suggesting commands as the service runs it", () => {
  const help = execFileSync("npx", ["jobfence", "ops", "dead-letters", "replay", "--help"], {
    encoding: "utf8",
  });
  assert.match(help, /jobfence ops dead-letters replay <filters…>/);
});

test("the payload's types come from the consumer's schema", () => {
  // @ts-expect-error amount_cents is a number: a kit whose types were lost would accept this
  kit.job({ invoice_id: "inv-1", amount_cents: "200" });
});
