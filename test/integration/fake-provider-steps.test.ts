/**
 * Steps against the fake provider over real HTTP (testing/fake-provider.ts, Stripe's
 * Idempotency-Key semantics), with the consumer's real harness, PostgreSQL and role: what
 * test/integration/steps.test.ts proves with an in-process stand-in, here with the provider a
 * consumer's steps would meet. A consumer with two steps, a charge then an email, each sent with
 * its step's key; the provider's ledger says how many effects each job had.
 *
 * - each step calls once, and a retry of the job reuses what was recorded;
 * - a crash between a call's answer and its checkpoint repeats the call with the same key, and the
 *   provider answers from the key: one charge;
 * - a call given up before its late answer is retried with the same key: refused while the first
 *   request is in flight (409, retried), then answered from the key: one charge;
 * - a permanent failure after both steps leaves a dead letter showing them; its replay calls nothing;
 * - a provider's refusal the step declares permanent dead-letters the job before the next step;
 * - notify-user, whose email a crash before its checkpoint would otherwise send twice, sends one.
 */
import type { SQSRecord } from "aws-lambda";
import type pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { awardPoints } from "../../functions/award-points/award.ts";
import { awardPointsPayload } from "../../functions/award-points/consumer.ts";
import { notifyUserConsumer } from "../../functions/notify-user/consumer.ts";
import {
  EmailProviderError,
  EmailSent,
  isPermanentEmailFailure,
  sendEmail,
} from "../../functions/notify-user/email.ts";
import type { ConsumerDefinition } from "../../shared/consumer.ts";
import { getDeadLetter } from "../../shared/db/queries/get-dead-letter.ts";
import { stepKey } from "../../shared/envelope/step-key.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import { installFaultHook } from "../../shared/fault-points.ts";
import type { FakeProvider } from "../../testing/index.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  effectsOf,
  invoke,
  sqsRecord,
} from "../support/consumer-harness.ts";

const CONSUMER = "award-points";

const Charge = z.object({ id: z.string(), amount: z.number().int() });

let bed: ConsumerTestBed;
let provider: FakeProvider;
beforeAll(async () => {
  bed = await consumerTestBed();
  provider = bed.emailProvider;
});
afterAll(async () => {
  await bed?.close();
});
afterEach(() => installFaultHook(undefined));

/** POST /v1/charges under `key`, given up after `timeoutMs`; the answer, or an EmailProviderError-shaped refusal. */
async function charge(amount: number, key: string, signal: AbortSignal, timeoutMs: number): Promise<unknown> {
  const response = await fetch(`${provider.url}/v1/charges`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": key },
    body: JSON.stringify({ amount, currency: "eur", customer: "cus_steps" }),
    signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]),
  });
  const body = (await response.json()) as { error?: { type?: string; code?: string; message?: string } };
  if (!response.ok) {
    throw new EmailProviderError(
      response.status,
      body.error?.type,
      body.error?.code,
      body.error?.message ?? "",
    );
  }
  return body;
}

type Seen = { steps: unknown; attempt: number }[];

/** award-points with two steps, a charge and an email; the work awards the charged amount. */
function chargingAndEmailing(
  seen: Seen,
  options: { failWork?: () => unknown; chargeTimeoutMs?: number } = {},
): ConsumerDefinition<
  typeof awardPointsPayload,
  Record<never, never>,
  { charge: z.output<typeof Charge>; email: z.output<typeof EmailSent> }
> {
  return {
    name: CONSUMER,
    payload: awardPointsPayload,
    steps: async (job) => {
      const permanent = { permanent: isPermanentEmailFailure };
      const charged = await job.step(
        "charge",
        Charge,
        (key, { signal }) => charge(job.payload.points, key, signal, options.chargeTimeoutMs ?? 5000),
        permanent,
      );
      const message = { to: "buyer@example.com", subject: `Receipt ${charged.id}`, text: "Thank you." };
      const email = await job.step(
        "email",
        EmailSent,
        (key, { signal }) => sendEmail(provider.url, message, key, signal),
        permanent,
      );
      return { charge: charged, email };
    },
    work: async (job, tx) => {
      seen.push({ steps: job.steps, attempt: job.attempt });
      const failure = options.failWork?.();
      if (failure) throw failure;
      await awardPoints(tx, {
        jobId: job.jobId,
        tenantId: job.tenantId,
        userId: job.payload.user_id,
        points: job.steps.charge.amount,
      });
    },
  };
}

/** The provider's effects and the outcomes of the requests made under `jobId`'s step `step`. */
function atProvider(jobId: string, step: "charge" | "email") {
  const key = stepKey(CONSUMER, jobId, step);
  return {
    effects: provider.ledger().filter((e) => e.key === key).length,
    requests: provider
      .requests()
      .filter((r) => r.key === key)
      .map((r) => r.outcome),
  };
}

/** The id of the effect `jobId`'s step `step` had at the provider. */
function effectId(jobId: string, step: "charge" | "email"): string | undefined {
  return provider.ledger().find((e) => e.key === stepKey(CONSUMER, jobId, step))?.id;
}

function again(record: SQSRecord, receiveCount: number): SQSRecord {
  return sqsRecord(record.body, { messageId: record.messageId, receiveCount });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("steps against the fake provider", () => {
  it("call each endpoint once, under the step's key; a retry of the job reuses what was recorded", async () => {
    const seen: Seen = [];
    let failOnce = true;
    const handler = bed.consumer(
      chargingAndEmailing(seen, {
        failWork: () => {
          if (!failOnce) return undefined;
          failOnce = false;
          return new Error("database hiccup");
        },
      }),
    );
    const first = sqsRecord(JSON.stringify(award("fp-1", 12, "u-fp-1")));
    expect(await invoke(handler, [first])).toEqual([first.messageId]);
    expect(await invoke(handler, [again(first, 2)])).toEqual([]);
    expect(atProvider("fp-1", "charge")).toEqual({ effects: 1, requests: ["acted"] });
    expect(atProvider("fp-1", "email")).toEqual({ effects: 1, requests: ["acted"] });
    const [charged] = provider.ledger().filter((e) => e.key === stepKey(CONSUMER, "fp-1", "charge"));
    expect(seen.map((s) => s.attempt)).toEqual([1, 2]);
    expect(seen[1]?.steps).toEqual({
      charge: { id: charged?.id, amount: 12 },
      email: { id: expect.stringMatching(/^em_/), object: "email", status: "sent" },
    });
    expect(seen[1]?.steps).toEqual(seen[0]?.steps);
    expect(await effectsOf(bed.db, "fp-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
  });

  it("repeat a call whose checkpoint a crash prevented, with the same key: the provider charges once", async () => {
    const handler = bed.consumer(chargingAndEmailing([]));
    installFaultHook((point) => {
      if (point === "step:after-call") throw new Error("the container died here");
    });
    const first = sqsRecord(JSON.stringify(award("fp-crash", 4, "u-fp-c")));
    expect(await invoke(handler, [first])).toEqual([first.messageId]);
    installFaultHook(undefined);
    expect(await invoke(handler, [again(first, 2)])).toEqual([]);
    expect(atProvider("fp-crash", "charge")).toEqual({ effects: 1, requests: ["acted", "replayed"] });
    expect(atProvider("fp-crash", "email")).toEqual({ effects: 1, requests: ["acted"] });
    expect(await effectsOf(bed.db, "fp-crash")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
  });

  it("retry a call given up before its late answer: 409 while the first is in flight, then the first's answer", async () => {
    provider.fault({ path: "/v1/charges", mode: "late", delayMs: 800 });
    const handler = bed.consumer(chargingAndEmailing([], { chargeTimeoutMs: 200 }));
    const first = sqsRecord(JSON.stringify(award("fp-late", 6, "u-fp-l")));
    expect(await invoke(handler, [first])).toEqual([first.messageId]); // gave up waiting
    expect(await invoke(handler, [again(first, 2)])).toEqual([first.messageId]); // 409: still in flight
    await sleep(800);
    expect(await invoke(handler, [again(first, 3)])).toEqual([]);
    expect(atProvider("fp-late", "charge")).toEqual({
      effects: 1,
      requests: ["late", "refused", "replayed"],
    });
    expect(atProvider("fp-late", "email")).toEqual({ effects: 1, requests: ["acted"] });
    expect(await effectsOf(bed.db, "fp-late")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
  });

  it("leave a dead letter showing both steps after a permanent failure, and a replay that calls nothing", async () => {
    let refuse = true;
    const handler = bed.consumer(
      chargingAndEmailing([], {
        failWork: () => (refuse ? new PermanentJobError("account closed") : undefined),
      }),
    );
    const record = sqsRecord(JSON.stringify(award("fp-dl", 9, "u-fp-dl")));
    expect(await invoke(handler, [record])).toEqual([]);
    const { rows } = await bed.db.withClient((c) =>
      c.query<{ id: string }>("SELECT id FROM core.dead_letters WHERE job_id = 'fp-dl'"),
    );
    const letter = await asOps((c) => getDeadLetter(c, rows[0]?.id as string));
    expect(letter?.error_kind).toBe("hard");
    expect(letter?.steps.map((s) => [s.name, s.key, (s.result as { id: string }).id])).toEqual([
      ["charge", stepKey(CONSUMER, "fp-dl", "charge"), effectId("fp-dl", "charge")],
      ["email", stepKey(CONSUMER, "fp-dl", "email"), effectId("fp-dl", "email")],
    ]);
    const requestsBefore = provider.requests().length;
    refuse = false;
    expect(await invoke(handler, [sqsRecord(record.body)])).toEqual([]);
    expect(provider.requests().length).toBe(requestsBefore);
    expect(atProvider("fp-dl", "charge").effects).toBe(1);
    expect(atProvider("fp-dl", "email").effects).toBe(1);
    expect(await effectsOf(bed.db, "fp-dl")).toMatchObject({ ledger: 1, fences: 1 });
  });

  it("dead-letter the job at once when the provider refuses the charge (402), sending no email", async () => {
    provider.fault({ path: "/v1/charges", mode: "fail", status: 402 });
    const handler = bed.consumer(chargingAndEmailing([]));
    expect(await invoke(handler, [sqsRecord(JSON.stringify(award("fp-declined", 2, "u-fp-d")))])).toEqual([]);
    const { rows } = await bed.db.withClient((c) =>
      c.query(
        "SELECT error_kind, last_error->>'class' AS class FROM core.dead_letters WHERE job_id = 'fp-declined'",
      ),
    );
    expect(rows).toEqual([{ error_kind: "hard", class: "PermanentStepError" }]);
    expect(atProvider("fp-declined", "charge")).toEqual({ effects: 0, requests: ["failed"] });
    expect(atProvider("fp-declined", "email")).toEqual({ effects: 0, requests: [] });
  });
});

describe("notify-user against the fake provider", () => {
  it("sends one email when the consumer dies between the provider's answer and the checkpoint", async () => {
    await bed.consumerRole("notify-user");
    const handler = bed.consumer(notifyUserConsumer);
    installFaultHook((point) => {
      if (point === "step:after-call") throw new Error("the container died here");
    });
    const body = JSON.stringify({
      job_id: "fp-notify-crash",
      tenant_id: "t_steps",
      payload: { user_id: "u-fp-n", kind: "points-awarded", points: 3 },
    });
    const first = sqsRecord(body);
    expect(await invoke(handler, [first])).toEqual([first.messageId]);
    installFaultHook(undefined);
    expect(await invoke(handler, [again(first, 2)])).toEqual([]);
    const key = stepKey("notify-user", "fp-notify-crash", "email");
    const emails = provider.ledger().filter((e) => e.key === key);
    expect(
      provider
        .requests()
        .filter((r) => r.key === key)
        .map((r) => r.outcome),
    ).toEqual(["acted", "replayed"]);
    expect(emails).toHaveLength(1);
    const { rows } = await bed.db.withClient((c) =>
      c.query("SELECT provider_message_id FROM notify_user.notifications WHERE job_id = 'fp-notify-crash'"),
    );
    expect(rows).toEqual([{ provider_message_id: emails[0]?.id }]);
  });
});

async function asOps<T>(fn: (c: pg.ClientBase) => Promise<T>): Promise<T> {
  return bed.db.withClient(async (c) => {
    await c.query("SET ROLE jobfence_ops");
    try {
      return await fn(c);
    } finally {
      await c.query("RESET ROLE");
    }
  });
}
