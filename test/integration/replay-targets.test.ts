/**
 * A replay sends a dead letter only to a queue registered for its consumer (migration 0014). The
 * consumer writes a dead letter's `queue`, so without the registry a consumer could record a row
 * naming another consumer's queue, and an operator's replay (single or bulk) would hand its body to
 * that consumer. Both replay paths refuse such a row and leave it pending.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerConsumerQueues } from "../../shared/db/queries/provision-login.ts";
import { type ApiTestBed, apiTestBed } from "../support/api-harness.ts";
import { runBulkToEnd } from "../support/bulk.ts";
import { queueDepth } from "../support/sqs.ts";

const BASE = "/v1/core/dead-letters";
let bed: ApiTestBed;
let ownQueue: string;
let otherQueue: string;

beforeAll(async () => {
  bed = await apiTestBed();
  ownQueue = (await bed.queue("award-points-own")).url;
  otherQueue = (await bed.queue("record-payment-victim")).url;
  await bed.db.withClient((c) => registerConsumerQueues(c, "award-points", [ownQueue]));
});
afterAll(async () => {
  await bed?.close();
});

/** A pending award-points dead letter naming `queue`, written by the consumer's own role. */
async function deadLetterNaming(queue: string, jobId: string): Promise<string> {
  return bed.db.withClient(async (c) => {
    await c.query("BEGIN");
    await c.query("SET LOCAL ROLE jobfence_consumer_award_points");
    const { rows } = await c.query<{ id: string }>(
      `INSERT INTO core.dead_letters (job_id, consumer, queue, tenant_id, attempts, error_kind, last_error,
                                      correlation_id, body_form, body)
       VALUES ($1, 'award-points', $2, 't_42', 1, 'hard', '{"class":"PermanentJobError","message":"no"}', $1,
               'text', $3)
       RETURNING id`,
      [
        jobId,
        queue,
        JSON.stringify({ job_id: jobId, tenant_id: "t_42", payload: { user_id: "u1", points: 5 } }),
      ],
    );
    await c.query("COMMIT");
    return rows[0]?.id as string;
  });
}

const statusOf = (id: string) =>
  bed.db.withClient(async (c) => {
    const { rows } = await c.query<{ status: string }>("SELECT status FROM core.dead_letters WHERE id = $1", [
      id,
    ]);
    return rows[0]?.status;
  });

describe("replay targets", () => {
  it("a single replay of a row naming another consumer's queue is refused (409) and sends nothing", async () => {
    const id = await deadLetterNaming(otherQueue, "forged-1");
    const response = await bed.call("POST", `${BASE}/${id}/replay`, { token: bed.tokens.replay });
    expect(response.status).toBe(409);
    expect(response.body).toMatchObject({ reason: "foreign-queue", current_status: "pending_review" });
    expect(await queueDepth(bed.sqs, otherQueue)).toBe(0);
    expect(await statusOf(id)).toBe("pending_review");
  });

  it("a bulk replay skips it as foreign-queue and replays the consumer's own", async () => {
    const forged = await deadLetterNaming(otherQueue, "forged-2");
    const own = await deadLetterNaming(ownQueue, "own-2");
    const done = await runBulkToEnd(
      { pool: bed.opsPool, sqs: bed.sqs },
      { kind: "replay", filter: { job_id: "forged-2" } },
    );
    expect(done.skipped).toEqual([
      expect.objectContaining({ dead_letter_id: forged, reason: "foreign-queue" }),
    ]);
    expect(await queueDepth(bed.sqs, otherQueue)).toBe(0);
    expect(await statusOf(forged)).toBe("pending_review");

    const response = await bed.call("POST", `${BASE}/${own}/replay`, { token: bed.tokens.replay });
    expect(response.status).toBe(200);
    expect(await queueDepth(bed.sqs, ownQueue)).toBe(1);
    expect(await statusOf(own)).toBe("replayed");
  });

  it("registration takes queue URLs of a consumer this database has a role for", async () => {
    await bed.db.withClient(async (c) => {
      await expect(registerConsumerQueues(c, "never-migrated", [ownQueue])).rejects.toMatchObject({
        code: "22023",
      });
      await expect(registerConsumerQueues(c, "award-points", [])).rejects.toMatchObject({ code: "22023" });
      await expect(registerConsumerQueues(c, "award-points", ["not a url"])).rejects.toMatchObject({
        code: "22023",
      });
    });
  });
});
