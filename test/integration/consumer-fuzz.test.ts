/**
 * Property: whatever body arrives, the handler never throws and never leaves the record
 * unaccounted for. A body that parses as a job is applied (its fence exists); any other body
 * becomes exactly one pending poison dead letter. Runs the real handler against PostgreSQL.
 */
import fc from "fast-check";
import { afterAll, beforeAll, expect, it } from "vitest";
import { awardPointsConsumer, awardPointsPayload } from "../../functions/award-points/consumer.ts";
import { parseMessage } from "../../shared/envelope/envelope.ts";
import { type ConsumerTestBed, consumerTestBed, invoke, sqsRecord } from "../support/consumer-harness.ts";

let bed: ConsumerTestBed;
beforeAll(async () => {
  bed = await consumerTestBed();
});
afterAll(async () => {
  await bed?.close();
});

const anything = fc.oneof(fc.jsonValue(), fc.constant(undefined));
const envelopeLike = fc.record(
  {
    job_id: fc.oneof(fc.string({ maxLength: 300, unit: "grapheme" }), fc.integer(), fc.constant(null)),
    tenant_id: fc.oneof(fc.string({ maxLength: 20 }), fc.integer()),
    correlation_id: fc.oneof(fc.string({ maxLength: 40 }), fc.constant(null)),
    payload: fc.oneof(
      fc.record({
        user_id: fc.string({ maxLength: 130 }),
        points: fc.oneof(fc.integer(), fc.double(), fc.string()),
      }),
      anything,
    ),
  },
  { requiredKeys: [] },
);
const validish = fc.record({
  job_id: fc.string({ minLength: 1, maxLength: 255 }),
  tenant_id: fc.string({ maxLength: 20 }),
  payload: fc.record({
    user_id: fc.string({ minLength: 1, maxLength: 20 }),
    points: fc.integer({ min: 1, max: 1000 }),
  }),
});
const bodies = fc.oneof(
  validish.map((e) => JSON.stringify(e)),
  fc.string({ unit: "binary", maxLength: 200 }),
  fc.jsonValue().map((v) => JSON.stringify(v) ?? ""),
  envelopeLike.map((e) => JSON.stringify(e)),
  fc.string({ unit: "binary", maxLength: 50 }).map((s) => `{"job_id":"${s}","tenant_id":"t","payload":{}}`),
);

it("every body either applies or becomes one poison dead letter; the handler never throws", async () => {
  const handler = bed.consumer(awardPointsConsumer);
  let applied = 0;
  let poisoned = 0;
  await fc.assert(
    fc.asyncProperty(bodies, async (body) => {
      const record = sqsRecord(body);
      const failures = await invoke(handler, [record]);
      expect(failures).toEqual([]);

      const parsed = parseMessage(body, awardPointsPayload, record.messageId);
      const { rows } = await bed.db.withClient((c) =>
        c.query(
          `SELECT (SELECT count(*)::int FROM core.processed_jobs WHERE consumer = 'award-points' AND job_id = $1) AS fences,
                  (SELECT count(*)::int FROM core.dead_letters
                    WHERE consumer = 'award-points' AND job_id = $1 AND status = 'pending_review' AND error_kind = 'poison') AS poison`,
          [parsed.identity.jobId],
        ),
      );
      if (parsed.ok) {
        applied++;
        expect(rows[0].fences).toBe(1);
      } else {
        poisoned++;
        expect(rows[0].poison).toBe(1);
      }
    }),
    { numRuns: 300 },
  );
  // The generators reach both sides of the property, not only the poison one.
  expect(applied).toBeGreaterThan(0);
  expect(poisoned).toBeGreaterThan(150);
});
