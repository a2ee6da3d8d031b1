import { afterAll, beforeAll, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { pollOnce } from "../../local/event-source.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { type ApiTestBed, apiTestBed } from "../support/api-harness.ts";
import { award, effectsOf, invoke, sqsRecord } from "../support/consumer-harness.ts";
import { sendMessage } from "../support/sqs.ts";

let bed: ApiTestBed;
beforeAll(async () => {
  bed = await apiTestBed();
});
afterAll(async () => {
  await bed?.close();
});

it("lists, gets, replays through a real queue, and discards", async () => {
  const queue = await bed.queue("smoke");
  let failNext = true;
  const consumer = bed.consumer(
    {
      ...awardPointsConsumer,
      work: async (job, tx) => {
        if (failNext) {
          failNext = false;
          const { PermanentJobError } = await import("../../shared/errors/job.ts");
          throw new PermanentJobError("first time fails");
        }
        await awardPointsConsumer.work(job, tx);
      },
    },
    { queueUrl: queue.url },
  );
  await sendMessage(bed.sqs, queue.url, award("smoke-1"));
  const source = { sqs: bed.sqs, queueUrl: queue.url, queueArn: queue.arn };
  await pollOnce(source, consumer, lambdaContext("award-points"));
  expect(await invoke(consumer, [sqsRecord("nope", { messageId: "smoke-poison" })])).toEqual([]);

  const list = await bed.call("GET", "/v1/core/dead-letters?status=pending_review", {
    token: bed.tokens.read,
  });
  expect(list.status).toBe(200);
  expect(list.body.items.map((i: { job_id: string }) => i.job_id).sort()).toEqual([
    "smoke-1",
    "smoke-poison",
  ]);
  const id = list.body.items.find((i: { job_id: string }) => i.job_id === "smoke-1").id;

  const one = await bed.call("GET", `/v1/core/dead-letters/${id}`, { token: bed.tokens.read });
  expect(one.body).toMatchObject({ id, error_kind: "hard", payload: award("smoke-1") });

  const replay = await bed.call("POST", `/v1/core/dead-letters/${id}/replay`, { token: bed.tokens.replay });
  expect(replay.status).toBe(200);
  expect(replay.body).toMatchObject({ id, status: "replayed" });
  await pollOnce(source, consumer, lambdaContext("award-points"));
  expect(await effectsOf(bed.db, "smoke-1")).toMatchObject({ ledger: 1, fences: 1 });

  const again = await bed.call("POST", `/v1/core/dead-letters/${id}/replay`, { token: bed.tokens.replay });
  expect(again.status).toBe(409);
  expect(again.contentType).toBe("application/problem+json");

  const poisonId = list.body.items.find((i: { job_id: string }) => i.job_id === "smoke-poison").id;
  const noReason = await bed.call("POST", `/v1/core/dead-letters/${poisonId}/discard`, {
    token: bed.tokens.discard,
    body: {},
  });
  expect(noReason.status).toBe(400);
  const discard = await bed.call("POST", `/v1/core/dead-letters/${poisonId}/discard`, {
    token: bed.tokens.discard,
    body: { reason: "garbage from a test producer" },
  });
  expect(discard.body).toEqual({ id: poisonId, status: "discarded", reason: "garbage from a test producer" });

  const stats = await bed.call("GET", "/v1/core/dead-letters/stats", { token: bed.tokens.read });
  expect(stats.status).toBe(200);
  expect(stats.body.counts).toEqual(
    expect.arrayContaining([
      { consumer: "award-points", status: "replayed", error_kind: "hard", count: 1 },
      { consumer: "award-points", status: "discarded", error_kind: "poison", count: 1 },
    ]),
  );
  expect(stats.body.oldest_pending).toEqual([]);

  expect((await bed.call("GET", "/v1/core/dead-letters")).status).toBe(401);
  expect((await bed.call("GET", "/v1/core/dead-letters", { token: bed.tokens.replay })).status).toBe(403);
});

it("returns a payload's large numbers digit for digit", async () => {
  const body =
    '{"job_id":"big-number","tenant_id":"t","payload":{"user_id":"u","points":12345678901234567890123}}';
  const consumer = bed.consumer(awardPointsConsumer);
  expect(await invoke(consumer, [sqsRecord(body)])).toEqual([]);
  const list = await bed.call("GET", "/v1/core/dead-letters?job_id=big-number", { token: bed.tokens.read });
  const id = list.body.items[0].id;
  const response = await fetch(`${bed.apiUrl}/v1/core/dead-letters/${id}`, {
    headers: { authorization: `Bearer ${bed.tokens.read}` },
  });
  expect(await response.text()).toContain('"points":12345678901234567890123');
});
