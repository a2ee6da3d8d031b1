/**
 * Reliability 5a: generated poison. Bodies of every kind a producer or an attacker could send —
 * random bytes and text, JSON that is not an object, envelopes with wrong types or missing fields,
 * huge and deeply nested documents, U+0000 and lone surrogates, near-JSON, and valid-looking
 * envelopes whose payload the consumer's schema refuses — go to the real handler (award-points,
 * connected as jobfence_consumer) in batches of ten, as Lambda delivers them.
 *
 * Each must become exactly one pending poison dead letter, recorded on its first attempt, under
 * the job id its envelope carries (the SQS MessageId when none can be read), with zero retries: the
 * handler acks every record, never throws and never asks SQS to hide a message again. Nothing is
 * applied and nothing is fenced.
 */
import { randomBytes as cryptoRandomBytes } from "node:crypto";
import fc from "fast-check";
import { afterAll, beforeAll, expect, it } from "vitest";
import { awardPointsConsumer, awardPointsPayload } from "../../functions/award-points/consumer.ts";
import { localEventBridgeClient, localSqsClient } from "../../local/aws-clients.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { createBackstopDrain } from "../../shared/backstop/drain.ts";
import { createPool } from "../../shared/db/pool.ts";
import { parseMessage } from "../../shared/envelope/envelope.ts";
import {
  type ConsumerTestBed,
  consumerTestBed,
  invoke,
  OPS_BUS,
  sqsRecord,
} from "../support/consumer-harness.ts";
import { reportFigures, runSeed, sized, tally } from "./support/figures.ts";
import { type SqsFaultProxy, startSqsFaultProxy } from "./support/sqs-fault-proxy.ts";

const BODIES = sized(1000, 10_000);
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

// ---- Generators -------------------------------------------------------------------------------

/** A generated case: its category, and its body given a job id unique to the run. */
interface PoisonCase {
  readonly category: string;
  readonly build: (uniqueId: string) => string;
}

type Envelope = Record<string, unknown> & { payload?: unknown };

/** A valid envelope: every case below breaks it in at least one way. */
function validEnvelope(id: string): Envelope {
  return {
    job_id: id,
    tenant_id: "t-fuzz",
    correlation_id: `corr-${id}`,
    payload: { user_id: "u-fuzz", points: 5 },
  };
}

/** Sets a dotted path (`payload.points`) of an envelope. */
function setPath(envelope: Envelope, path: string, value: unknown): Envelope {
  const [head, tail] = path.split(".") as [string, string | undefined];
  if (tail === undefined) return { ...envelope, [head]: value };
  return { ...envelope, [head]: { ...(envelope[head] as object), [tail]: value } };
}

function deletePath(envelope: Envelope, path: string): Envelope {
  const [head, tail] = path.split(".") as [string, string | undefined];
  const copy = { ...envelope };
  if (tail === undefined) delete copy[head];
  else {
    const inner = { ...(copy[head] as Record<string, unknown>) };
    delete inner[tail];
    copy[head] = inner;
  }
  return copy;
}

const notAString = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.jsonValue({ maxDepth: 1 }), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 5 }), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 3 }),
);
/** Anything JSON can say that is not a positive 32-bit integer. */
const notPoints = fc.oneof(
  fc.integer({ max: 0 }),
  fc.integer({ min: 2_147_483_648, max: Number.MAX_SAFE_INTEGER }),
  fc.double({ noNaN: true, noDefaultInfinity: true }).filter((d) => !Number.isInteger(d)),
  fc.string({ maxLength: 12 }),
  fc.constantFrom("5", "1e3", true, null, [5], { n: 5 }),
);
const notAnObject = fc.oneof(
  fc.constant(null),
  fc.integer(),
  fc.string({ maxLength: 20 }),
  fc.array(fc.jsonValue({ maxDepth: 1 }), { maxLength: 4 }),
);

const randomBytes = fc
  .tuple(fc.uint8Array({ maxLength: 400 }), fc.constantFrom("latin1", "utf8") as fc.Arbitrary<BufferEncoding>)
  .map(([bytes, encoding]): PoisonCase => {
    const text = Buffer.from(bytes).toString(encoding);
    return { category: "random bytes", build: () => text };
  });

const randomText = fc
  .string({ unit: "binary", maxLength: 300 })
  .map((text): PoisonCase => ({ category: "random text", build: () => text }));

const jsonNotAnObject = fc
  .jsonValue({ maxDepth: 4 })
  .filter((v) => v === null || typeof v !== "object" || Array.isArray(v))
  .map(
    (value): PoisonCase => ({ category: "JSON that is not an object", build: () => JSON.stringify(value) }),
  );

const wrongTypes = fc
  .oneof(
    fc.tuple(fc.constantFrom("job_id", "tenant_id", "correlation_id", "payload.user_id"), notAString),
    fc.tuple(fc.constant("payload.points"), notPoints),
    fc.tuple(fc.constant("payload"), notAnObject),
  )
  .map(
    ([path, value]): PoisonCase => ({
      category: "wrong types",
      build: (id) => JSON.stringify(setPath(validEnvelope(id), path, value)),
    }),
  );

const missingFields = fc
  .subarray(["job_id", "tenant_id", "payload", "payload.user_id", "payload.points"], { minLength: 1 })
  .map(
    (paths): PoisonCase => ({
      category: "missing fields",
      build: (id) => JSON.stringify(paths.reduce((e, p) => deletePath(e, p), validEnvelope(id))),
    }),
  );

const huge = fc
  .tuple(fc.integer({ min: 50_000, max: 250_000 }), fc.constantFrom("user_id", "points", "text", "job_id"))
  .map(
    ([size, where]): PoisonCase => ({
      category: "huge",
      build: (id) => {
        if (where === "text") return `not json ${"A".repeat(size)}`;
        // The job_id only: over-long correlation and tenant ids have a test of their own below.
        if (where === "job_id") return JSON.stringify({ ...validEnvelope(id), job_id: "j".repeat(size) });
        const value = where === "user_id" ? "x".repeat(size) : Array.from({ length: size / 10 }, () => 1);
        return JSON.stringify(setPath(validEnvelope(id), `payload.${where}`, value));
      },
    }),
  );

const deep = fc
  .tuple(fc.integer({ min: 20, max: 10_000 }), fc.constantFrom("array", "object", "payload", "user_id"))
  .map(
    ([depth, where]): PoisonCase => ({
      category: "deeply nested",
      build: (id) => {
        const arrays = `${"[".repeat(depth)}${"]".repeat(depth)}`;
        const objects = `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`;
        if (where === "array") return arrays;
        if (where === "object") return objects;
        const head = `{"job_id":${JSON.stringify(id)},"tenant_id":"t-fuzz","payload":`;
        if (where === "payload") return `${head}${objects}}`;
        return `${head}{"user_id":${arrays},"points":1}}`;
      },
    }),
  );

/** U+0000 and lone surrogates, as the text itself or as JSON escapes, where text cannot hold them. */
const unstorable = fc
  .tuple(
    fc.constantFrom("\u0000", "\ud800", "\udfff"),
    fc.constantFrom("job_id", "tenant_id", "correlation_id", "payload.user_id", "raw", "raw-in-string"),
    fc.string({ maxLength: 8 }),
  )
  .map(
    ([bad, where, around]): PoisonCase => ({
      category: "U+0000 and lone surrogates",
      build: (id) => {
        if (where === "raw") return `${around}${bad}${around}`;
        // An unescaped control character inside a JSON string: not JSON at all.
        if (where === "raw-in-string") return `{"job_id":"${id}${bad}","tenant_id":"t","payload":{}}`;
        const value = `${around}${bad}${around}`;
        return JSON.stringify(
          setPath(validEnvelope(id), where, where === "job_id" ? `${id}${value}` : value),
        );
      },
    }),
  );

const invalidPayload = fc
  .oneof(
    notPoints.map((points) => ({ user_id: "u-fuzz", points })),
    fc
      .oneof(
        fc.constant(""),
        fc.integer({ min: 129, max: 400 }).map((n) => "u".repeat(n)),
        fc.string({ maxLength: 5 }).map((s) => `${s}\u0000`),
      )
      .map((user_id) => ({ user_id, points: 5 })),
    notAnObject,
    fc.constant({}),
  )
  .map(
    (payload): PoisonCase => ({
      category: "valid-looking envelope, invalid payload",
      build: (id) => JSON.stringify({ ...validEnvelope(id), payload }),
    }),
  );

const nearJson = fc
  .tuple(
    fc.constantFrom(
      "truncated",
      "trailing comma",
      "single quotes",
      "BOM",
      "garbage after",
      "leading zero",
      "NaN",
      "duplicate key",
    ),
    fc.nat(),
  )
  .map(
    ([how, n]): PoisonCase => ({
      category: "near-JSON",
      build: (id) => {
        const text = JSON.stringify(validEnvelope(id));
        switch (how) {
          case "truncated":
            return text.slice(0, n % (text.length - 1));
          case "trailing comma":
            return `${text.slice(0, -1)},}`;
          case "single quotes":
            return text.replaceAll('"', "'");
          case "BOM":
            return `\ufeff${text}`;
          case "garbage after":
            return `${text}x`;
          case "leading zero":
            return text.replace('"points":5', '"points":05');
          case "NaN":
            return text.replace('"points":5', '"points":NaN');
          default:
            // Valid JSON; the last of duplicate keys wins, and it is not a valid number of points.
            return text.replace('"points":5', '"points":5,"points":-5');
        }
      },
    }),
  );

const badIdentity = fc
  .oneof(
    fc.constantFrom("", " ", "\t\n ", "\u00a0"),
    fc.integer({ min: 256, max: 400 }).map((n) => "j".repeat(n)),
    fc.integer({ min: 256, max: 300 }).map((n) => "😀".repeat(n)),
  )
  .map(
    (jobId): PoisonCase => ({
      category: "unusable job_id",
      build: () => JSON.stringify(validEnvelope(jobId)),
    }),
  );

const poisonCase = fc.oneof(
  { weight: 8, arbitrary: randomBytes },
  { weight: 8, arbitrary: randomText },
  { weight: 5, arbitrary: jsonNotAnObject },
  { weight: 12, arbitrary: wrongTypes },
  { weight: 8, arbitrary: missingFields },
  { weight: 1, arbitrary: huge },
  { weight: 6, arbitrary: deep },
  { weight: 12, arbitrary: unstorable },
  { weight: 20, arbitrary: invalidPayload },
  { weight: 12, arbitrary: nearJson },
  { weight: 8, arbitrary: badIdentity },
);

// ---- The oracle ---------------------------------------------------------------------------------

/**
 * The job id the dead letter must carry, by SPEC §2 read independently of the product's parser: a
 * JSON object's `job_id` when it is a non-blank string of at most 255 characters that text can
 * store (no U+0000, no lone surrogate); otherwise none (the MessageId stands in).
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

/** Whether the body is JSON text of an object (SPEC §2 stores anything else as `{"raw": …}`). */
function isJsonObjectText(body: string): boolean {
  try {
    const document: unknown = JSON.parse(body);
    return typeof document === "object" && document !== null && !Array.isArray(document);
  } catch {
    return false;
  }
}

// ---- The run ------------------------------------------------------------------------------------

it(`${BODIES} generated poison bodies: each one pending poison dead letter, zero retries, never a throw`, async () => {
  const cases = fc.sample(poisonCase, { numRuns: BODIES, seed: SEED });
  const bodies = cases.map((c, i) => ({
    category: c.category,
    messageId: `fz-msg-${i}`,
    body: c.build(`fz-${i}`),
  }));
  const expected = bodies.map((b) => ({ ...b, jobId: readableJobId(b.body) ?? b.messageId }));
  // The run's own premise: one dead letter per body needs one job id per body.
  expect(new Set(expected.map((e) => e.jobId)).size).toBe(BODIES);
  // And every body is poison by the product's parser too (a body it accepted would be a bug there).
  const accepted = expected.filter((e) => parseMessage(e.body, awardPointsPayload, e.messageId).ok);
  expect(accepted.map((a) => a.body.slice(0, 200))).toEqual([]);

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
  for (let i = 0; i < expected.length; i += 10) {
    const batch = expected.slice(i, i + 10).map((e) => sqsRecord(e.body, { messageId: e.messageId }));
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
      raw: boolean;
    }>(
      `SELECT message_attributes->>'message_id' AS message_id, job_id, error_kind, status, attempts,
              payload ? 'raw' AS raw
         FROM core.dead_letters WHERE consumer = $1`,
      [CONSUMER],
    );
    return rows;
  });
  const fences = await bed.db.withClient(
    async (c) =>
      (await c.query<{ n: number }>("SELECT count(*)::int AS n FROM core.processed_jobs")).rows[0]?.n,
  );
  const ledger = await bed.db.withClient(
    async (c) =>
      (await c.query<{ n: number }>("SELECT count(*)::int AS n FROM award_points.ledger")).rows[0]?.n,
  );
  const byMessage = new Map(rows.map((r) => [r.message_id, r]));
  const wrong: unknown[] = [];
  for (const e of expected) {
    const row = byMessage.get(e.messageId);
    const ok =
      row !== undefined &&
      row.job_id === e.jobId &&
      row.error_kind === "poison" &&
      row.status === "pending_review" &&
      row.attempts === 1 &&
      // SPEC §2: a body that is not a JSON object is stored as {"raw": "<text>"}.
      (isJsonObjectText(e.body) || row.raw);
    if (!ok) wrong.push({ category: e.category, body: e.body.slice(0, 120), row });
  }
  const alerts = bed.sink.events.filter((e) => e.detailType === "DeadLetterRecorded").length;
  const categories: Record<string, number> = {};
  for (const e of expected) tally(categories, e.category);

  await reportFigures("poison-fuzz", {
    seed: SEED,
    badInputsTried: BODIES,
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
  expect(rows).toHaveLength(BODIES);
  expect(outcomes).toEqual({ "dead-lettered:poison": BODIES });
  expect(proxy.counts.forwarded).toEqual({});
  expect(alerts).toBe(BODIES);
  expect(fences).toBe(0);
  expect(ledger).toBe(0);
  // Every category was tried.
  expect(Object.keys(categories)).toHaveLength(11);
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

  const pool = createPool({ connectionString: bed.db.url, role: "jobfence_consumer" });
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
