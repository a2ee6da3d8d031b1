/**
 * Reliability 5a: generated bodies, poison and not. Bodies of every kind a producer or an attacker
 * could send (test/support/bodies.ts: random bytes and text, JSON that is not an object or any JSON
 * at all, envelopes with wrong types or missing fields, huge and deeply nested documents, U+0000
 * and lone surrogates, near-JSON, valid-looking envelopes whose payload the consumer's schema
 * refuses) and valid jobs among them go to the real handler (award-points, connected as
 * the consumer's own role) in batches of ten and of one, as Lambda delivers them.
 *
 * The property: whatever the body, the handler never throws and acks it, and it is either applied
 * once (one fence, one effect, no dead letter) or becomes exactly one pending poison dead letter,
 * recorded on its first attempt, under the job id its envelope carries (the SQS MessageId when none
 * can be read), with zero retries (no SQS call asks to hide a message again). Which of the two is
 * fixed by the body's class; where a class mixes both, by the product's parser.
 */
import { randomBytes as cryptoRandomBytes } from "node:crypto";
import fc from "fast-check";
import { afterAll, beforeAll, expect, it } from "vitest";
import { awardPointsConsumer, awardPointsPayload } from "../../functions/award-points/consumer.ts";
import { localEventBridgeClient, localSqsClient } from "../../local/aws-clients.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { createBackstopDrain } from "../../shared/backstop/drain.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { bodyOf } from "../../shared/db/stored-body.ts";
import { parseMessage } from "../../shared/envelope/envelope.ts";
import { arbitraryBody, BODY_CLASSES } from "../support/bodies.ts";
import {
  type ConsumerTestBed,
  consumerTestBed,
  invoke,
  OPS_BUS,
  sqsRecord,
} from "../support/consumer-harness.ts";
import { byTier } from "../support/tier.ts";
import { reportFigures, runSeed, tally } from "./support/figures.ts";
import { type SqsFaultProxy, startSqsFaultProxy } from "./support/sqs-fault-proxy.ts";

const BODIES = byTier({ everyday: 300, full: 1000, reliability: 10_000 });
const SEED = runSeed();
const CONSUMER = "award-points";

let bed: ConsumerTestBed;
/** A pass-through proxy in front of the emulator: it counts the SQS calls the handler makes. */
let proxy: SqsFaultProxy;
beforeAll(async () => {
  bed = await consumerTestBed();
  proxy = await startSqsFaultProxy(bed.emulator.endpoint, Math.random);
});
afterAll(async () => {
  await proxy?.close();
  await bed?.close();
});

// ---- The oracle ---------------------------------------------------------------------------------

/**
 * The job id a poison body's dead letter must carry, by docs/design.md §2.1 read independently of the
 * product's parser: a JSON object's `job_id` when it is a non-blank string of at most 255
 * characters that text can store (no U+0000, no lone surrogate); otherwise none (the MessageId
 * stands in).
 */
function readableJobId(body: string): string | undefined {
  let document: unknown;
  try {
    document = JSON.parse(body);
  } catch {
    return undefined;
  }
  if (typeof document !== "object" || document === null || Array.isArray(document)) return undefined;
  const id = (document as Record<string, unknown>).job_id;
  if (typeof id !== "string" || id.includes("\u0000") || !id.isWellFormed()) return undefined;
  if (!/\S/.test(id) || [...id].length > 255) return undefined;
  return id;
}

/** Whether the body is JSON text of an object (only such a body can have a jsonb payload). */
function isJsonObjectText(body: string): boolean {
  try {
    const document: unknown = JSON.parse(body);
    return typeof document === "object" && document !== null && !Array.isArray(document);
  } catch {
    return false;
  }
}

// ---- The run ------------------------------------------------------------------------------------

it(`${BODIES} generated bodies: each applied once or one pending poison dead letter, zero retries, never a throw`, async () => {
  const cases = fc.sample(arbitraryBody, { numRuns: BODIES, seed: SEED });
  const bodies = cases.map((c, i) => ({
    category: c.category,
    fate: c.fate,
    messageId: `fz-msg-${i}`,
    // One length throughout: a class that writes text after the id keeps it unique.
    body: c.build(`fz-${String(i).padStart(6, "0")}-`),
  }));
  const expected = bodies.map((b) => {
    const parsed = parseMessage(b.body, awardPointsPayload, b.messageId);
    return {
      ...b,
      applies: parsed.ok,
      parsedJobId: parsed.identity.jobId,
      jobId: parsed.ok ? parsed.job.jobId : (readableJobId(b.body) ?? b.messageId),
    };
  });
  // The run's own premise: one fate per body needs one job id per body.
  expect(new Set(expected.map((e) => e.jobId)).size).toBe(BODIES);
  // A poison class's bodies are poison by the product's parser too, a job class's are jobs (a body
  // it got wrong would be a bug there).
  const misread = expected.filter(
    (e) => (e.fate === "poison" && e.applies) || (e.fate === "job" && !e.applies),
  );
  expect(misread.map((e) => ({ category: e.category, body: e.body.slice(0, 200) }))).toEqual([]);
  const jobs = expected.filter((e) => e.applies);
  const poison = expected.filter((e) => !e.applies);

  const outcomes: Record<string, number> = {};
  const handler = bed.consumer(awardPointsConsumer, {
    sqs: localSqsClient(proxy.endpoint),
    onOutcome: (outcome) => {
      tally(outcomes, outcome.status === "dead-lettered" ? `dead-lettered:${outcome.kind}` : outcome.status);
    },
  });
  const throws: string[] = [];
  const unacked: string[] = [];
  const started = Date.now();
  // Batches of ten and of one, in turn.
  for (let i = 0, n = 0; i < expected.length; n++) {
    const size = n % 2 === 0 ? 10 : 1;
    const batch = expected.slice(i, i + size).map((e) => sqsRecord(e.body, { messageId: e.messageId }));
    i += size;
    try {
      unacked.push(...(await invoke(handler, batch)));
    } catch (error) {
      throws.push(String(error));
    }
  }
  const durationMs = Date.now() - started;

  const rows = await bed.db.withClient(async (c) => {
    const { rows } = await c.query<{
      message_id: string;
      job_id: string;
      error_kind: string;
      status: string;
      attempts: number;
      no_payload: boolean;
      body_form: string;
      body: string | null;
      body_utf16: Buffer | null;
    }>(
      `SELECT message_attributes->>'message_id' AS message_id, job_id, error_kind, status, attempts,
              payload IS NULL AS no_payload, body_form, body, body_utf16
         FROM core.dead_letters WHERE consumer = $1`,
      [CONSUMER],
    );
    return rows;
  });
  const countsByJob = (sql: string) =>
    bed.db.withClient(async (c) => {
      const { rows } = await c.query<{ job_id: string; n: number }>(sql);
      return new Map(rows.map((r) => [r.job_id, r.n]));
    });
  const fencesByJob = await countsByJob(
    "SELECT job_id, count(*)::int AS n FROM core.processed_jobs WHERE consumer_id = core.consumer_id('award-points') GROUP BY job_id",
  );
  const ledgerByJob = await countsByJob(
    "SELECT job_id, count(*)::int AS n FROM award_points.ledger GROUP BY job_id",
  );
  const fences = await bed.db.withClient(
    async (c) =>
      (await c.query<{ n: number }>("SELECT count(*)::int AS n FROM core.processed_jobs")).rows[0]?.n,
  );
  const ledger = [...ledgerByJob.values()].reduce((a, b) => a + b, 0);
  const byMessage = new Map(rows.map((r) => [r.message_id, r]));
  const deadLettersByJob = new Map<string, number>();
  for (const r of rows) deadLettersByJob.set(r.job_id, (deadLettersByJob.get(r.job_id) ?? 0) + 1);
  const wrong: unknown[] = [];
  for (const e of poison) {
    const row = byMessage.get(e.messageId);
    const ok =
      row !== undefined &&
      row.job_id === e.jobId &&
      // The product's own reading of the identity agrees with the independent one.
      row.job_id === e.parsedJobId &&
      row.error_kind === "poison" &&
      row.status === "pending_review" &&
      row.attempts === 1 &&
      // The body is kept exactly as received; a payload only for a JSON object.
      bodyOf(row) === e.body &&
      (isJsonObjectText(e.body) || row.no_payload) &&
      // Exactly one: no other dead letter of the job, and no fence or effect.
      deadLettersByJob.get(e.jobId) === 1 &&
      !fencesByJob.has(e.jobId) &&
      !ledgerByJob.has(e.jobId);
    if (!ok) {
      const { body: _b, body_utf16: _u, ...fields } = row ?? {};
      wrong.push({ category: e.category, body: e.body.slice(0, 120), row: row && fields });
    }
  }
  for (const e of jobs) {
    const ok =
      fencesByJob.get(e.jobId) === 1 &&
      ledgerByJob.get(e.jobId) === 1 &&
      !byMessage.has(e.messageId) &&
      !deadLettersByJob.has(e.jobId);
    if (!ok) {
      wrong.push({
        category: e.category,
        body: e.body.slice(0, 120),
        fences: fencesByJob.get(e.jobId),
        ledger: ledgerByJob.get(e.jobId),
        deadLetter: byMessage.get(e.messageId),
      });
    }
  }
  const alerts = bed.sink.events.filter((e) => e.detailType === "DeadLetterRecorded").length;
  const categories: Record<string, number> = {};
  for (const e of expected) tally(categories, e.category);

  await reportFigures("poison-fuzz", {
    seed: SEED,
    bodiesTried: BODIES,
    badInputsTried: poison.length,
    jobsApplied: jobs.length,
    categories,
    durationMs,
    outcomes,
    deadLetters: rows.length,
    handlerThrows: throws.length,
    recordsNotAcked: unacked.length,
    changeMessageVisibilityCalls: proxy.counts.forwarded.ChangeMessageVisibility ?? 0,
    alertsPublished: alerts,
    wrongOrMissingDeadLetters: wrong.length,
    fences,
    effects: ledger,
  });

  expect(throws).toEqual([]);
  expect(unacked).toEqual([]);
  expect(wrong.slice(0, 5)).toEqual([]);
  expect(rows).toHaveLength(poison.length);
  expect(outcomes).toEqual({
    "dead-lettered:poison": poison.length,
    ...(jobs.length > 0 ? { applied: jobs.length } : {}),
  });
  // No retry, so no ChangeMessageVisibility: the only SQS calls are the applied jobs' follow-ups,
  // one relay after each COMMIT.
  expect(proxy.counts.forwarded).toEqual(jobs.length > 0 ? { SendMessageBatch: jobs.length } : {});
  expect(alerts).toBe(poison.length);
  expect(fences).toBe(jobs.length);
  expect(ledger).toBe(jobs.length);
  // Every class was tried, and the run reached both sides of the property, mostly the poison one.
  expect(Object.keys(categories).sort()).toEqual(BODY_CLASSES.map((c) => c.category).sort());
  expect(jobs.length).toBeGreaterThan(0);
  expect(poison.length).toBeGreaterThan(BODIES / 2);
}, 600_000);

// Found here: correlation_id and tenant_id had no length bound, but core.dead_letters indexes both
// with B-trees, whose entries hold at most ~2.7 kB, so a message carrying a longer (incompressible)
// one could never be dead-lettered, by the consumer or by the backstop drain. Both are now bounded
// at 255 characters (the envelope, migration 0007), and a poison message's identity leaves an
// unusable one out.
it("a message with a 4 kB correlation_id or tenant_id still becomes exactly one dead letter", async () => {
  const long = () => cryptoRandomBytes(3000).toString("base64url"); // incompressible, 4000 characters
  const cases = [
    { job_id: "long-corr-1", tenant_id: "t-fuzz", correlation_id: long(), payload: { points: -1 } },
    { job_id: "long-tenant-1", tenant_id: long(), payload: { points: -1 } },
  ];
  const handler = bed.consumer(awardPointsConsumer, { sqs: localSqsClient(proxy.endpoint) });
  const records = cases.map((c) => sqsRecord(JSON.stringify(c), { messageId: `${c.job_id}-msg` }));
  const consumerFailures = await invoke(handler, records);

  const pool = createPool({ connectionString: bed.db.url, role: consumerRoleName("award-points") });
  try {
    const drain = createBackstopDrain(
      {
        consumer: CONSUMER,
        sourceQueueUrl: `${bed.emulator.endpoint}/000000000000/award-points`,
        sourceMaxReceiveCount: 8,
        databaseUrl: bed.db.url,
        opsBusName: OPS_BUS,
      },
      { pool, eventBridge: localEventBridgeClient(bed.sink.endpoint) },
    );
    const backstopped = records.map((r) => ({
      ...r,
      attributes: { ...r.attributes, ApproximateReceiveCount: "1" },
    }));
    const drainResponse = await drain({ Records: backstopped }, lambdaContext("award-points-backstop"));
    const rows = await bed.db.withClient(async (c) => {
      const { rows } = await c.query<{ job_id: string }>(
        "SELECT job_id FROM core.dead_letters WHERE job_id = ANY($1::text[]) ORDER BY job_id",
        [cases.map((c) => c.job_id)],
      );
      return rows.map((r) => r.job_id);
    });
    expect({ consumerFailures, drainFailures: drainResponse.batchItemFailures, rows }).toEqual({
      consumerFailures: [],
      drainFailures: [],
      rows: ["long-corr-1", "long-tenant-1"],
    });
  } finally {
    await pool.end();
  }
});
