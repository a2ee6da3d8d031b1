/**
 * notify-user, tested alone with the testing kit: a database of this file's own (every registered
 * migration applied), the SQS emulator and the real harness, in the consumer's own role. What feeds
 * it (award-points' follow-ups) is tested in test/integration/outbox.test.ts.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { notifyUserConsumer } from "../../functions/notify-user/consumer.ts";
import { PermanentJobError } from "../../shared/index.ts";
import { type ConsumerTestKit, consumerTestKit } from "../../testing/index.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

let db: TestDatabase;
let kit: ConsumerTestKit<typeof notifyUserConsumer.payload>;
beforeAll(async () => {
  db = await createTestDatabase();
  kit = await consumerTestKit(notifyUserConsumer, { databaseUrl: db.url });
});
afterAll(async () => {
  await kit?.close();
  await db?.drop();
});

/** The consumer's effect on one job, read from its own table. */
const entriesOf = (jobId: string) =>
  kit.query("SELECT user_id, points, correlation_id FROM notify_user.notifications WHERE job_id = $1", [
    jobId,
  ]);

it("applies a job once and absorbs its duplicate", async () => {
  const job = kit.job({ user_id: "u-1", kind: "points-awarded", points: 10 }, { correlationId: "c-1" });
  const delivery = await kit.deliver(job, job);
  expect(delivery.results.map((r) => r.status)).toEqual(["applied", "duplicate"]);
  expect(await kit.fence(job.job_id)).toMatchObject({ jobId: job.job_id, consumer: "notify-user" });
  expect(await entriesOf(job.job_id)).toEqual([{ user_id: "u-1", points: 10, correlation_id: "c-1" }]);
});

it("dead-letters a conflict (the same job id, another payload) without applying it", async () => {
  const first = kit.job({ user_id: "u-2", kind: "points-awarded", points: 100 });
  const other = kit.job({ user_id: "u-2", kind: "points-awarded", points: 999 }, { jobId: first.job_id });
  const delivery = await kit.deliver(first, other);
  expect(delivery.deadLettered).toMatchObject([{ jobId: first.job_id, kind: "conflict" }]);
  expect(await entriesOf(first.job_id)).toMatchObject([{ user_id: "u-2", points: 100 }]);
});

it("dead-letters what it cannot read as poison, and a permanent error as hard, with no effect", async () => {
  const refused = kit.uncheckedJob({ user_id: "u-3", kind: "points-awarded", points: -5 });
  const failing = kit.failing(
    kit.job({ user_id: "u-4", kind: "points-awarded", points: 7 }),
    new PermanentJobError("refused"),
  );
  const delivery = await kit.deliver(refused, "{ not json", failing);
  expect(delivery.results.map((r) => [r.status, r.kind])).toEqual([
    ["dead-lettered", "poison"],
    ["dead-lettered", "poison"],
    ["dead-lettered", "hard"],
  ]);
  expect(await kit.deadLetters({ jobId: failing.job_id })).toMatchObject([
    { kind: "hard", status: "pending_review" },
  ]);
  expect(await entriesOf(refused.job_id)).toEqual([]);
  expect(await entriesOf(failing.job_id)).toEqual([]);
});
