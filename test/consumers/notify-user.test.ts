/**
 * notify-user, tested alone with the testing kit: a database of this file's own (every registered
 * migration applied), the SQS emulator and the real harness, in the consumer's own role, and the
 * fake email provider its step sends through (EMAIL_PROVIDER_URL). What feeds it (award-points'
 * follow-ups) is tested in test/integration/outbox.test.ts.
 *
 * The email goes out once per job whatever happens around it: a duplicate reuses the recorded
 * step, a lost answer repeats the call with the same key and the provider answers from it, a
 * provider's refusal dead-letters the job at once. (A crash between the call and its checkpoint,
 * which needs the harness's fault points, is in test/integration/fake-provider-steps.test.ts.)
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { notifyUserConsumer } from "../../functions/notify-user/consumer.ts";
import { EMAIL_PROVIDER_URL, userAddress } from "../../functions/notify-user/email.ts";
import { PermanentJobError, stepKey } from "../../shared/index.ts";
import {
  type ConsumerTestKit,
  consumerTestKit,
  type FakeProvider,
  startFakeProvider,
} from "../../testing/index.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

let db: TestDatabase;
let provider: FakeProvider;
let kit: ConsumerTestKit<typeof notifyUserConsumer.payload>;
beforeAll(async () => {
  db = await createTestDatabase();
  provider = await startFakeProvider();
  process.env[EMAIL_PROVIDER_URL] = provider.url;
  kit = await consumerTestKit(notifyUserConsumer, { databaseUrl: db.url });
});
afterAll(async () => {
  await kit?.close();
  await provider?.close();
  await db?.drop();
});
afterEach(() => {
  process.env[EMAIL_PROVIDER_URL] = provider.url;
});

/** The consumer's effect on one job, read from its own table. */
const entriesOf = (jobId: string) =>
  kit.query(
    "SELECT user_id, points, correlation_id, provider_message_id FROM notify_user.notifications WHERE job_id = $1",
    [jobId],
  );
/** The provider's emails and requests under one job's key. */
const emailsOf = (jobId: string) => {
  const key = stepKey("notify-user", jobId, "email");
  return {
    emails: provider.ledger().filter((e) => e.key === key),
    requests: provider
      .requests()
      .filter((r) => r.key === key)
      .map((r) => r.outcome),
  };
};

describe("the email", () => {
  it("is sent once, through the provider under the step's key, and recorded with the notification; a duplicate sends nothing", async () => {
    const job = kit.job({ user_id: "u-1", kind: "points-awarded", points: 10 }, { correlationId: "c-1" });
    const delivery = await kit.deliver(job, job);
    expect(delivery.results.map((r) => r.status)).toEqual(["applied", "duplicate"]);
    expect(await kit.fence(job.job_id)).toMatchObject({ jobId: job.job_id, consumer: "notify-user" });
    const { emails, requests } = emailsOf(job.job_id);
    expect(emails).toEqual([
      expect.objectContaining({
        kind: "email",
        request: {
          to: userAddress("u-1"),
          subject: "You earned 10 points",
          text: expect.stringContaining("10"),
        },
      }),
    ]);
    expect(requests).toEqual(["acted"]);
    expect(await entriesOf(job.job_id)).toEqual([
      { user_id: "u-1", points: 10, correlation_id: "c-1", provider_message_id: emails[0]?.id },
    ]);
  });

  it("whose answer is lost is sent once: the retry calls with the same key and gets the email already sent", async () => {
    provider.fault({ path: "/v1/emails", mode: "hang", act: true });
    const job = kit.job({ user_id: "u-lost", kind: "points-awarded", points: 3 });
    const first = await kit.deliver(job);
    expect(first.results.map((r) => r.status)).toEqual(["retry"]);
    expect(emailsOf(job.job_id).emails).toHaveLength(1); // sent, but never answered
    const retried = await kit.redeliver();
    expect(retried.results.map((r) => r.status)).toEqual(["applied"]);
    const { emails, requests } = emailsOf(job.job_id);
    expect(requests).toEqual(["hung", "replayed"]);
    expect(emails).toHaveLength(1);
    expect(await entriesOf(job.job_id)).toMatchObject([{ provider_message_id: emails[0]?.id }]);
  });

  it("is retried with its key while the provider fails, and sent once when it answers", async () => {
    provider.fault({ path: "/v1/emails", mode: "fail", status: 503 });
    provider.fault({ path: "/v1/emails", mode: "fail", status: 429 });
    const job = kit.job({ user_id: "u-busy", kind: "points-awarded", points: 5 });
    expect((await kit.deliver(job)).results.map((r) => r.status)).toEqual(["retry"]);
    expect((await kit.redeliver()).results.map((r) => r.status)).toEqual(["retry"]);
    expect((await kit.redeliver()).results.map((r) => r.status)).toEqual(["applied"]);
    expect(emailsOf(job.job_id).requests).toEqual(["failed", "failed", "acted"]);
    expect(emailsOf(job.job_id).emails).toHaveLength(1);
  });

  it("refused by the provider (a 4xx) dead-letters the job at once, hard, with no notification", async () => {
    provider.fault({ path: "/v1/emails", mode: "fail", status: 400 });
    const job = kit.job({ user_id: "u-refused", kind: "points-awarded", points: 6 });
    const delivery = await kit.deliver(job);
    expect(delivery.results.map((r) => [r.status, r.kind])).toEqual([["dead-lettered", "hard"]]);
    expect(String(delivery.results[0]?.error)).toMatch(
      /step "email" failed for good: the email provider answered 400 invalid_request_error/,
    );
    expect(await entriesOf(job.job_id)).toEqual([]);
    expect(emailsOf(job.job_id)).toEqual({ emails: [], requests: ["failed"] });
  });

  it("without EMAIL_PROVIDER_URL is not sent: the job is retried, saying what to set", async () => {
    delete process.env[EMAIL_PROVIDER_URL];
    const job = kit.job({ user_id: "u-unset", kind: "points-awarded", points: 8 });
    const delivery = await kit.deliver(job);
    expect(delivery.results.map((r) => r.status)).toEqual(["retry"]);
    expect(String(delivery.results[0]?.error)).toMatch(/EMAIL_PROVIDER_URL is required/);
    process.env[EMAIL_PROVIDER_URL] = "ftp://mail.example.com";
    expect(String((await kit.redeliver()).results[0]?.error)).toMatch(/not an http or https URL/);
    process.env[EMAIL_PROVIDER_URL] = provider.url;
    expect((await kit.redeliver()).results.map((r) => r.status)).toEqual(["applied"]);
    expect(emailsOf(job.job_id).requests).toEqual(["acted"]);
  });
});

it("dead-letters a conflict (the same job id, another payload) without applying it", async () => {
  const first = kit.job({ user_id: "u-2", kind: "points-awarded", points: 100 });
  const other = kit.job({ user_id: "u-2", kind: "points-awarded", points: 999 }, { jobId: first.job_id });
  const delivery = await kit.deliver(first, other);
  expect(delivery.deadLettered).toMatchObject([{ jobId: first.job_id, kind: "conflict" }]);
  expect(await entriesOf(first.job_id)).toMatchObject([{ user_id: "u-2", points: 100 }]);
  expect(emailsOf(first.job_id).emails).toHaveLength(1);
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
  expect(emailsOf(refused.job_id).emails).toEqual([]);
});
