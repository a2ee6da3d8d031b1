/**
 * Property: any body SQS can deliver comes back from replay byte for byte, whichever path recorded
 * it — the harness (poison, or a job its work refuses) or the backstop drain (unrecorded) — and
 * each message the drain receives ends in exactly one row, whether or not its job was applied.
 *
 * The bodies are arbitrary SQS-deliverable text (non-empty; tab, LF, CR, U+0020–U+D7FF, U+E000–U+FFFD; the
 * emulator refuses characters beyond U+FFFF that real SQS takes) mixed with the shapes that used to
 * be altered: look-alikes of the old `{"raw": …}` wrapper, JSON whose spelling jsonb normalises
 * (whitespace, key order, duplicate keys, 1.0 and 1e2), numbers jsonb refuses, escapes it refuses.
 */
import fc from "fast-check";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { localEventBridgeClient } from "../../local/aws-clients.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { createBackstopDrain, type DrainedDefinition } from "../../shared/backstop/drain.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { replayDeadLetter } from "../../shared/dead-letters/replay.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  effectsOf,
  invoke,
  OPS_BUS,
  sqsRecord,
} from "../support/consumer-harness.ts";
import { receiveAll } from "../support/sqs.ts";
import { byTier } from "../support/tier.ts";

/** Bodies per path (fast-check runs). */
const RUNS = byTier({ everyday: 30, full: 60 });

/** One character SQS (and the emulator) delivers. */
const sqsChar = fc.oneof(
  { weight: 1, arbitrary: fc.constantFrom("\t", "\n", "\r", '"', "\\", "{", "}", ":", ",") },
  { weight: 6, arbitrary: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)) },
  { weight: 2, arbitrary: fc.integer({ min: 0x80, max: 0xd7ff }).map((c) => String.fromCharCode(c)) },
  { weight: 1, arbitrary: fc.integer({ min: 0xe000, max: 0xfffd }).map((c) => String.fromCharCode(c)) },
);
const sqsText = fc.string({ unit: sqsChar, maxLength: 200 });

/** Bodies, deliverable by SQS, of every shape that used to come back changed. */
const deliverableBody = fc.oneof(
  // SQS refuses an empty body.
  sqsText.filter((s) => s.length > 0),
  sqsText.map((raw) => JSON.stringify({ raw })),
  sqsText.map((raw) => JSON.stringify({ raw: `${raw}\\u0000`, nul: "escaped" })),
  sqsText.map((raw) => `{"raw":${JSON.stringify(raw)},"surrogates":"replaced"}`),
  fc
    .tuple(sqsText, fc.constantFrom("1.0", "1e2", "-0", "1e200000", "1e-20000", "12345678901234567890.5"))
    .map(
      ([s, n]) =>
        `{ "job_id" : ${JSON.stringify(`j-${s}`.slice(0, 200))}, "b": ${n}, "a": 1, "a": 2 , "tenant_id":"t", "payload": {"user_id":"u","points":${n}} }`,
    ),
  sqsText.map(
    (s) =>
      `{"job_id":"esc","tenant_id":"t","payload":{"user_id":"\\u0000${JSON.stringify(s).slice(1, -1)}","points":"\\ud800"}}`,
  ),
  fc.jsonValue().map((v) => JSON.stringify(v)),
);

let bed: ConsumerTestBed;
let ops: pg.Pool;

beforeAll(async () => {
  bed = await consumerTestBed();
  ops = createPool({ connectionString: bed.db.url, role: "jobfence_ops", max: 2 });
});
afterAll(async () => {
  await ops?.end();
  await bed?.close();
});

/** The backstop drain of award-points, whose replays go to `sourceQueueUrl`. */
function drainOf(sourceQueueUrl: string, definition?: DrainedDefinition) {
  return createBackstopDrain(
    {
      consumer: "award-points",
      sourceQueueUrl,
      sourceMaxReceiveCount: 8,
      databaseUrl: bed.db.url,
      opsBusName: OPS_BUS,
      dbRole: consumerRoleName("award-points"),
    },
    { eventBridge: localEventBridgeClient(bed.sink.endpoint), ...(definition ? { definition } : {}) },
  );
}

/** The one pending dead letter of a message, by its SQS message id. */
async function rowOf(messageId: string): Promise<{ id: string; error_kind: string }[]> {
  return bed.db.withClient(async (c) => {
    const { rows } = await c.query<{ id: string; error_kind: string }>(
      "SELECT id, error_kind FROM core.dead_letters WHERE message_attributes->>'message_id' = $1",
      [messageId],
    );
    return rows;
  });
}

/** Replays the row and returns the body that reached the queue. */
async function replayed(id: string, queueUrl: string): Promise<string | undefined> {
  const result = await replayDeadLetter({ pool: ops, sqs: bed.sqs }, id, "exact-replay-test");
  expect(result.status).toBe("replayed");
  const received = await receiveAll(bed.sqs, queueUrl);
  expect(received).toHaveLength(1);
  return received[0]?.Body;
}

let n = 0;
describe("replay sends exactly the bytes received", () => {
  it.each(["per-record", "batch"] as const)(
    "through the harness, %s (every job refused by its work, so every body becomes a dead letter)",
    async (commitMode) => {
      const queue = await bed.queue(`exact-harness-${commitMode}`);
      const refusing = bed.consumer(
        {
          ...awardPointsConsumer,
          commitMode,
          work: async () => {
            throw new PermanentJobError("refused so the body is dead-lettered");
          },
        },
        { queueUrl: queue.url },
      );
      await fc.assert(
        fc.asyncProperty(deliverableBody, async (body) => {
          const messageId = `exact-h-${n++}`;
          expect(await invoke(refusing, [sqsRecord(body, { messageId })])).toEqual([]);
          const rows = await rowOf(messageId);
          expect(rows).toHaveLength(1);
          expect(await replayed((rows[0] as { id: string }).id, queue.url)).toBe(body);
        }),
        { numRuns: RUNS },
      );
    },
  );

  it("through the backstop drain", async () => {
    const source = await bed.queue("exact-drain-source");
    const drain = drainOf(source.url);
    try {
      await fc.assert(
        fc.asyncProperty(deliverableBody, async (body) => {
          const messageId = `exact-d-${n++}`;
          const response = await drain({ Records: [sqsRecord(body, { messageId })] }, lambdaContext("drain"));
          expect(response.batchItemFailures).toEqual([]);
          const rows = await rowOf(messageId);
          expect(rows.map((r) => r.error_kind)).toEqual(["unrecorded"]);
          expect(await replayed((rows[0] as { id: string }).id, source.url)).toBe(body);
        }),
        { numRuns: RUNS },
      );
    } finally {
      await drain.pool.end();
    }
  });
});

describe("the backstop drain: every message it receives ends in exactly one row", () => {
  it("a poison body whose readable job_id has a fence, and an applied job's own message, are each recorded", async () => {
    const handler = bed.consumer(awardPointsConsumer);
    expect(await invoke(handler, [sqsRecord(JSON.stringify(award("drain-fenced", 3)))])).toEqual([]);
    expect((await effectsOf(bed.db, "drain-fenced")).fences).toBe(1);
    const source = await bed.queue("drain-fenced-source");
    const drain = drainOf(source.url);
    try {
      const poison = JSON.stringify({
        job_id: "drain-fenced",
        tenant_id: "t_42",
        payload: { points: "many" },
      });
      const applied = JSON.stringify(award("drain-fenced", 3));
      const records = [
        sqsRecord(poison, { messageId: "drain-poison" }),
        sqsRecord(applied, { messageId: "drain-applied" }),
      ];
      expect((await drain({ Records: records }, lambdaContext("drain"))).batchItemFailures).toEqual([]);
      expect((await rowOf("drain-poison")).map((r) => r.error_kind)).toEqual(["unrecorded"]);
      expect((await rowOf("drain-applied")).map((r) => r.error_kind)).toEqual(["unrecorded"]);
      // Delivered again (a lost ack): the same rows.
      expect((await drain({ Records: records }, lambdaContext("drain"))).batchItemFailures).toEqual([]);
      expect(await rowOf("drain-poison")).toHaveLength(1);
      expect(await rowOf("drain-applied")).toHaveLength(1);
      expect((await effectsOf(bed.db, "drain-fenced")).ledger).toBe(1);
    } finally {
      await drain.pool.end();
    }
  });
});

describe("the backstop drain fingerprints jobs as its consumer does", () => {
  it("with the consumer's narrowing, a drained copy of an applied job is superseded on replay, not a conflict", async () => {
    const narrowing = {
      ...awardPointsConsumer,
      fingerprint: (p: { user_id: string; points: number }) => ({ user: p.user_id, points: p.points }),
    };
    const source = await bed.queue("drain-narrowed-source");
    const consumer = bed.consumer(narrowing, { queueUrl: source.url });
    const body = JSON.stringify({
      ...award("drain-narrowed", 6),
      payload: { user_id: "u-1", points: 6, note: "x" },
    });
    expect(await invoke(consumer, [sqsRecord(body)])).toEqual([]);
    const drain = drainOf(source.url, narrowing);
    try {
      expect(
        (
          await drain(
            { Records: [sqsRecord(body, { messageId: "drain-narrowed-copy" })] },
            lambdaContext("drain"),
          )
        ).batchItemFailures,
      ).toEqual([]);
      const [row] = await rowOf("drain-narrowed-copy");
      const result = await replayDeadLetter({ pool: ops, sqs: bed.sqs }, (row as { id: string }).id, "t");
      expect(result.status).toBe("superseded");
      expect(await receiveAll(bed.sqs, source.url)).toEqual([]);
    } finally {
      await drain.pool.end();
    }
  });
});
