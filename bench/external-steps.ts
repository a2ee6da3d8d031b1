/**
 * `node bench/external-steps.ts`: what happens to an effect outside the database (a charge through
 * a payment provider) when the Lambda container dies mid-job, with jobfence's `job.step` and with
 * the two ways a team makes that call today, side by side on the same consumer, PostgreSQL and
 * provider (bench/external-steps/systems.ts):
 * (a) jobfence `job.step("charge", …)`: the key jobfence derives (stepKey) sent as the provider's
 *     Idempotency-Key, the answer checkpointed in core.job_steps before the fence transaction;
 * (b) bare: the same call made in the work, no key;
 * (c) Powertools' `makeIdempotent` around the call (DynamoDB store on dynalite, keyed on the job
 *     id, as bench/powertools runs it), no key to the provider.
 * The provider is the fake one (jobfence/testing), which honours Idempotency-Key as Stripe does and
 * keeps a ledger of its effects.
 *
 * Kill points (SIGKILL of a real child process, bench/external-steps/matrix.ts): K1 before the
 * call; K2 after the provider acted, before the checkpoint (bare: before the work's commit;
 * Powertools: before its completion record); K3 after the checkpoint, before the fence commits;
 * K4 after the commit, before the ack. The batch is then redelivered until acked (bounded) and the
 * provider's effects and calls counted per job: 1 effect = charged once, 0 = lost, 2+ = doubled.
 *
 * Targets: jobfence doubles 0 and loses 0 at every point; bare and Powertools, the controls, each
 * double at least one job (a matrix that never sees them double could not see jobfence double).
 */
import { randomBytes } from "node:crypto";
import { z } from "zod";
import { runExternalMatrix } from "./external-steps/matrix.ts";
import { crashRows, crashTable, crashTargets, where } from "./external-steps/summary.ts";
import { VARIANT_KEYS, VARIANTS, type VariantKey } from "./external-steps/systems.ts";
import { defineBenchmark } from "./lib/define.ts";
import { IDEMPOTENCY_TABLE, startDynalite } from "./powertools/stores.ts";

const options = z.object({
  trials: z.coerce.number().int().positive().default(5).describe("crash trials per point per variant"),
  batch: z.coerce
    .number()
    .int()
    .min(1)
    .max(10)
    .default(3)
    .describe("records per SQS batch; the killed job moves through it from trial to trial"),
  variants: z
    .array(z.enum(VARIANT_KEYS as [VariantKey, ...VariantKey[]]))
    .min(1)
    .default([...VARIANT_KEYS])
    .describe("variants to run: jobfence, bare, powertools"),
  timeoutMs: z.coerce
    .number()
    .int()
    .min(1000)
    .multipleOf(1000)
    .default(3000)
    .describe("Lambda function timeout (Powertools' in-progress expiry; every redelivery waits it), ms"),
  parallel: z.coerce.number().int().positive().default(6).describe("crash trials run at once"),
  redeliveries: z.coerce
    .number()
    .int()
    .positive()
    .default(3)
    .describe("deliveries after a crash before a record still failing counts as never acked"),
});

await defineBenchmark({
  name: "external-steps",
  title: "an external call across a crash: jobfence job.step vs a bare call vs Powertools makeIdempotent",
  method:
    "the same award-points consumer (database effect in the fence transaction) charging through a fake Stripe-like provider, three ways; a real child process SIGKILLed at K1 before the call, K2 provider acted before the checkpoint, K3 after the checkpoint before the fence commits, K4 after the commit before the ack; redelivery until acked (bounded, each after the function timeout); provider ledger entries (effects) and requests (calls) per job, database ledger rows per job",
  options,
  quick: { trials: 1, parallel: 12, redeliveries: 2 },
  database: "durable",
  async setup({ cleanups }) {
    const dynalite = await startDynalite();
    cleanups.push(() => dynalite.stop());
    return { dynalite, keyPrefix: `jobfence-steps-${randomBytes(4).toString("hex")}` };
  },
  async run({ options: o, database, table }, { dynalite, keyPrefix }) {
    console.log(
      `crash matrix: ${o.trials} trial(s) per point per variant, batches of ${o.batch}, function timeout ${o.timeoutMs} ms`,
    );
    const results = await runExternalMatrix({
      databaseUrl: database.url,
      dynamodb: { endpoint: dynalite.endpoint, tableName: IDEMPOTENCY_TABLE },
      keyPrefix,
      variants: o.variants,
      trials: o.trials,
      batch: o.batch,
      timeoutMs: o.timeoutMs,
      parallel: o.parallel,
      redeliveries: o.redeliveries,
      log: (line) => console.log(`  ${line}`),
    });
    const rows = crashRows(results, o.variants);
    const { headers, cells } = crashTable(rows);
    table(
      `crash matrix: SIGKILL at the point, redelivered until acked (at most ${o.redeliveries} times); the provider's ledger entries (effects) and requests (calls) per job (0 effects: lost, 2+: doubled)`,
      headers,
      cells,
    );
    return { rows, results };
  },
  verdict({ rows }, { options: o }) {
    const repeats = rows
      .filter((r) => r.variant === "jobfence" && r.calls > r.effects)
      .map((r) => `${r.point} ${r.calls} calls for ${r.effects} effects`)
      .join("; ");
    const unattributed = rows.reduce((n, r) => n + r.unattributed, 0);
    return {
      targets: crashTargets(rows),
      notes: [
        `${VARIANTS.jobfence}: calls repeated with the same key and answered from it by the provider: ${repeats || "none"}`,
        `the database's effect not exactly once: ${where(rows, "databaseNotOnce") || "none (the fence, every variant)"}`,
        `never acked within ${o.redeliveries} redeliveries: ${where(rows, "neverAcked") || "none"}`,
        ...(unattributed > 0 ? [`${unattributed} provider requests could not be told to a job`] : []),
      ],
    };
  },
});
