/**
 * Steps (docs/consumers.md "Steps"): a job's calls outside the database, each checkpointed in
 * core.job_steps before the fence transaction, against real PostgreSQL as the consumer's own role.
 * The provider here is a stand-in that deduplicates by idempotency key as payment gateways do and
 * counts calls and effects; test/integration/fake-provider-steps.test.ts runs the same calls over
 * HTTP against the local stack's fake provider.
 *
 * The scenarios of issue 33: a retry reuses the recorded result; a crash between the call and its
 * checkpoint repeats the call with the same key; a replay reuses; a job without steps pays nothing;
 * a permanent failure after a step leaves a dead letter that shows the step.
 */

import middy from "@middy/core";
import type { SQSRecord } from "aws-lambda";
import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { awardPoints } from "../../functions/award-points/award.ts";
import { awardPointsPayload } from "../../functions/award-points/consumer.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { type ConsumerDefinition, type HostedConsumer, prepareConsumer } from "../../shared/consumer.ts";
import { createPool } from "../../shared/db/pool.ts";
import { getDeadLetter } from "../../shared/db/queries/get-dead-letter.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { stepKey } from "../../shared/envelope/step-key.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import { installFaultHook } from "../../shared/fault-points.ts";
import { runFenceCleanup } from "../../shared/fence/cleanup.ts";
import {
  fenceTransaction,
  recordDeadLetter,
  runSteps,
  runWork,
  sqsRecords,
  validateJob,
} from "../../shared/middy/index.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  effectsOf,
  invoke,
  sqsRecord,
} from "../support/consumer-harness.ts";

const CONSUMER = "award-points";

/** A stand-in payment gateway: a key seen again answers what it answered the first time. */
class Gateway {
  readonly calls: { key: string | undefined; amount: number }[] = [];
  readonly #answers = new Map<string, { id: string; amount: number }>();
  effects = 0;
  /** Make the next `n` calls fail before acting, with `error`. */
  failNext: { n: number; error: unknown } = { n: 0, error: undefined };

  async charge(amount: number, key?: string): Promise<{ id: string; amount: number; extra: string }> {
    this.calls.push({ key, amount });
    if (this.failNext.n > 0) {
      this.failNext.n--;
      throw this.failNext.error;
    }
    const seen = key === undefined ? undefined : this.#answers.get(key);
    if (seen) return { ...seen, extra: "replayed" };
    this.effects++;
    const answer = { id: `ch_${this.effects}`, amount };
    if (key !== undefined) this.#answers.set(key, answer);
    return { ...answer, extra: "fresh" };
  }
}

const Charge = z.object({ id: z.string(), amount: z.number().int() });

let bed: ConsumerTestBed;
beforeAll(async () => {
  bed = await consumerTestBed();
});
afterAll(async () => {
  await bed?.close();
});
afterEach(() => installFaultHook(undefined));

type Seen = { steps: unknown; attempt: number }[];

/** award-points with a charge step: the work awards the charged amount and records what it saw. */
function charging(
  gateway: Gateway,
  seen: Seen,
  options: { failWork?: (attempt: number) => unknown; permanent?: (e: unknown) => boolean } = {},
): ConsumerDefinition<typeof awardPointsPayload, Record<never, never>, { charge: z.output<typeof Charge> }> {
  return {
    name: CONSUMER,
    payload: awardPointsPayload,
    steps: async (job) => ({
      charge: await job.step(
        "charge",
        Charge,
        (key) => gateway.charge(job.payload.points, key),
        options.permanent ? { permanent: options.permanent } : {},
      ),
    }),
    work: async (job, tx) => {
      seen.push({ steps: job.steps, attempt: job.attempt });
      const failure = options.failWork?.(job.attempt);
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

async function stepRows(jobId: string) {
  return bed.db.withClient(
    async (c) =>
      (
        await c.query(
          "SELECT step, position, result::text AS result, expires_at > called_at AS lives, recorded_at IS NOT NULL AS recorded FROM core.job_steps WHERE job_id = $1 AND step <> '_job' ORDER BY position",
          [jobId],
        )
      ).rows,
  );
}

function again(record: SQSRecord, receiveCount: number): SQSRecord {
  return sqsRecord(record.body, { messageId: record.messageId, receiveCount });
}

describe("a step's call, its checkpoint and the work", () => {
  it("calls once with the key derived from (consumer, job id, step), records the result, and gives it to the work", async () => {
    const gateway = new Gateway();
    const seen: Seen = [];
    const handler = bed.consumer(charging(gateway, seen));
    expect(await invoke(handler, [sqsRecord(JSON.stringify(award("st-1", 7, "u-st-1")))])).toEqual([]);
    expect(gateway.calls).toEqual([{ key: stepKey(CONSUMER, "st-1", "charge"), amount: 7 }]);
    expect(seen).toEqual([{ steps: { charge: { id: "ch_1", amount: 7 } }, attempt: 1 }]);
    // The schema's output is what is recorded: the answer's other fields are not.
    expect(await stepRows("st-1")).toEqual([
      { step: "charge", position: 1, result: '{"id":"ch_1","amount":7}', lives: true, recorded: true },
    ]);
    expect(await effectsOf(bed.db, "st-1")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    // The job itself was claimed first, for this body: its `_job` row, position 0, never a result.
    const claim = await bed.db.withClient(
      async (c) =>
        (
          await c.query(
            "SELECT position, result, fingerprint IS NOT NULL AS body FROM core.job_steps WHERE job_id = 'st-1' AND step = '_job'",
          )
        ).rows,
    );
    expect(claim).toEqual([{ position: 0, result: null, body: true }]);
  });

  it("a retry reuses the recorded result: the provider is not called again", async () => {
    const gateway = new Gateway();
    const seen: Seen = [];
    const handler = bed.consumer(
      charging(gateway, seen, {
        failWork: (attempt) => (attempt === 1 ? new Error("database hiccup") : undefined),
      }),
    );
    const first = sqsRecord(JSON.stringify(award("st-retry", 3, "u-st-r")));
    expect(await invoke(handler, [first])).toEqual([first.messageId]);
    expect(await invoke(handler, [again(first, 2)])).toEqual([]);
    expect(gateway.calls).toHaveLength(1);
    expect(seen.map((s) => s.steps)).toEqual([
      { charge: { id: "ch_1", amount: 3 } },
      { charge: { id: "ch_1", amount: 3 } },
    ]);
    expect(seen.map((s) => s.attempt)).toEqual([1, 2]);
    expect(await effectsOf(bed.db, "st-retry")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
  });

  it("a crash between the call and its checkpoint repeats the call with the same key, and the provider acts once", async () => {
    const gateway = new Gateway();
    const seen: Seen = [];
    const handler = bed.consumer(charging(gateway, seen));
    installFaultHook((point) => {
      if (point === "step:after-call") throw new Error("the container died here");
    });
    const first = sqsRecord(JSON.stringify(award("st-crash", 4, "u-st-c")));
    expect(await invoke(handler, [first])).toEqual([first.messageId]);
    // Claimed before the call, its answer never recorded.
    expect(await stepRows("st-crash")).toEqual([
      { step: "charge", position: 1, result: null, lives: true, recorded: false },
    ]);
    installFaultHook(undefined);
    expect(await invoke(handler, [again(first, 2)])).toEqual([]);
    const key = stepKey(CONSUMER, "st-crash", "charge");
    expect(gateway.calls).toEqual([
      { key, amount: 4 },
      { key, amount: 4 },
    ]);
    expect(gateway.effects).toBe(1);
    expect(seen.map((s) => s.steps)).toEqual([{ charge: { id: "ch_1", amount: 4 } }]);
    expect(await effectsOf(bed.db, "st-crash")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
  });

  it("a crash after the checkpoint, or after the commit, calls no more", async () => {
    // (A hook that throws inside the open fence transaction is no crash: the connection would live
    // on holding the fence's lock. The real SIGKILL matrix is bench/external-steps.)
    for (const point of ["step:after-checkpoint", "fence:after-commit"] as const) {
      const gateway = new Gateway();
      const handler = bed.consumer(charging(gateway, []));
      const jobId = `st-${point.replace(":", "-")}`;
      installFaultHook((at) => {
        if (at === point) throw new Error("the container died here");
      });
      const first = sqsRecord(JSON.stringify(award(jobId, 2, `u-${jobId}`)));
      await invoke(handler, [first]);
      installFaultHook(undefined);
      expect(await invoke(handler, [again(first, 2)]), point).toEqual([]);
      expect(gateway.calls, point).toHaveLength(1);
      expect(await effectsOf(bed.db, jobId), point).toMatchObject({ ledger: 1, fences: 1 });
    }
  });

  it("a duplicate of an applied job runs no step: its fence is found first", async () => {
    const gateway = new Gateway();
    const handler = bed.consumer(charging(gateway, []));
    const body = JSON.stringify(award("st-dup", 2, "u-st-d"));
    expect(await invoke(handler, [sqsRecord(body)])).toEqual([]);
    // The checkpoint gone (as if by hand): the fence alone keeps the duplicate from calling.
    await bed.db.withClient((c) => c.query("DELETE FROM core.job_steps WHERE job_id = 'st-dup'"));
    expect(await invoke(handler, [sqsRecord(body)])).toEqual([]);
    expect(gateway.calls).toHaveLength(1);
    expect(await effectsOf(bed.db, "st-dup")).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
  });

  it("concurrent deliveries of one job record one result, and every work that runs sees it", async () => {
    const gateway = new Gateway();
    const seen: Seen = [];
    const handlers = Array.from({ length: 4 }, () => bed.consumer(charging(gateway, seen)));
    const body = JSON.stringify(award("st-race", 5, "u-st-race"));
    const failed = await Promise.all(handlers.map((h) => invoke(h, [sqsRecord(body)])));
    // A delivery may be held behind the winner's fence (retried later); none is applied twice.
    expect(gateway.effects).toBe(1);
    expect(new Set(gateway.calls.map((c) => c.key))).toEqual(
      new Set([stepKey(CONSUMER, "st-race", "charge")]),
    );
    expect(new Set(seen.map((s) => JSON.stringify(s.steps)))).toEqual(
      new Set(['{"charge":{"id":"ch_1","amount":5}}']),
    );
    expect(await stepRows("st-race")).toHaveLength(1);
    expect(await effectsOf(bed.db, "st-race")).toMatchObject({ ledger: 1, fences: 1 });
    expect(failed.flat().length).toBeLessThan(4);
  });
});

describe("failures", () => {
  it("a permanent failure after a step: a dead letter that shows the step, and a replay that reuses it", async () => {
    const gateway = new Gateway();
    const seen: Seen = [];
    let refuse = true;
    const handler = bed.consumer(
      charging(gateway, seen, {
        failWork: () => (refuse ? new PermanentJobError("the invoice is closed") : undefined),
      }),
    );
    const record = sqsRecord(JSON.stringify(award("st-dl", 9, "u-st-dl")));
    expect(await invoke(handler, [record])).toEqual([]);
    const { id } = await deadLetterOf("st-dl");
    const letter = await asOps((c) => getDeadLetter(c, id));
    expect(letter?.error_kind).toBe("hard");
    expect(letter?.steps).toEqual([
      {
        name: "charge",
        position: 1,
        key: stepKey(CONSUMER, "st-dl", "charge"),
        called_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/),
        recorded_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/),
        fingerprint: expect.stringMatching(/^[0-9a-f]{32}$/),
        result: { id: "ch_1", amount: 9 },
      },
    ]);
    expect(letter?.job_fingerprint).toBe(letter?.steps[0]?.fingerprint);
    // A pending dead letter holds its steps past their expiry: the cleanup leaves them.
    await bed.db.withClient((c) =>
      c.query(
        "UPDATE core.job_steps SET called_at = now() - interval '2 days', recorded_at = CASE WHEN result IS NULL THEN NULL ELSE now() - interval '2 days' END, expires_at = now() - interval '1 day' WHERE job_id = 'st-dl'",
      ),
    );
    await cleanup();
    expect(await stepRows("st-dl")).toHaveLength(1);
    // The author fixed the cause; the replay (the same body, the same job id) gets the recorded charge.
    refuse = false;
    expect(await invoke(handler, [sqsRecord(record.body)])).toEqual([]);
    expect(gateway.calls).toHaveLength(1);
    expect(seen.at(-1)?.steps).toEqual({ charge: { id: "ch_1", amount: 9 } });
    expect(await effectsOf(bed.db, "st-dl")).toMatchObject({ ledger: 1, fences: 1 });
  });

  it("a step's failure is retried with the same key; a failure its `permanent` setting names dead-letters at once", async () => {
    const gateway = new Gateway();
    const handler = bed.consumer(
      charging(gateway, [], { permanent: (e) => e instanceof Error && e.message.startsWith("402") }),
    );
    gateway.failNext = { n: 1, error: new Error("503 try later") };
    const first = sqsRecord(JSON.stringify(award("st-transient", 1, "u-st-t")));
    expect(await invoke(handler, [first])).toEqual([first.messageId]);
    expect(await invoke(handler, [again(first, 2)])).toEqual([]);
    expect(gateway.calls.map((c) => c.key)).toEqual([
      stepKey(CONSUMER, "st-transient", "charge"),
      stepKey(CONSUMER, "st-transient", "charge"),
    ]);

    gateway.failNext = { n: 1, error: new Error("402 card declined") };
    expect(await invoke(handler, [sqsRecord(JSON.stringify(award("st-declined", 1, "u-st-t")))])).toEqual([]);
    const letter = await deadLetterOf("st-declined");
    expect(letter).toMatchObject({ error_kind: "hard", error_class: "PermanentStepError" });
    // Called and refused: the claim stays, with no result (the dead letter shows it so).
    expect(await stepRows("st-declined")).toEqual([
      { step: "charge", position: 1, result: null, lives: true, recorded: false },
    ]);
  });

  it("an answer its schema refuses, a bad step name or a name used twice: a hard dead letter naming the step", async () => {
    const cases: [
      string,
      ConsumerDefinition<typeof awardPointsPayload, Record<never, never>, unknown>["steps"],
      RegExp,
    ][] = [
      [
        "st-schema",
        (job) => job.step("charge", Charge, async () => ({ id: 42 })),
        /step "charge" \(key jf1_[A-Za-z0-9_-]{40}\): its schema refused the answer/,
      ],
      [
        "st-name",
        (job) => job.step("Charge!", Charge, async () => ({ id: "x", amount: 1 })),
        /step name "Charge!" must be/,
      ],
      [
        "st-twice",
        async (job) => {
          await job.step("charge", Charge, async () => ({ id: "x", amount: 1 }));
          return job.step("charge", Charge, async () => ({ id: "y", amount: 1 }));
        },
        /step "charge" ran twice in one job/,
      ],
      [
        "st-date",
        (job) => job.step("when", z.date(), async () => new Date()),
        /does not give its own result back unchanged/,
      ],
    ];
    for (const [jobId, steps, message] of cases) {
      const handler = bed.consumer({
        name: CONSUMER,
        payload: awardPointsPayload,
        steps,
        work: async () => {},
      });
      expect(await invoke(handler, [sqsRecord(JSON.stringify(award(jobId, 1, "u-st-bad")))]), jobId).toEqual(
        [],
      );
      const letter = await deadLetterOf(jobId);
      expect(letter.error_kind, jobId).toBe("hard");
      expect(letter.message, jobId).toMatch(message);
    }
  });

  it("a different body under a recorded job's id is a conflict, and calls nothing", async () => {
    const gateway = new Gateway();
    const handler = bed.consumer(
      charging(gateway, [], { failWork: () => new Error("keeps failing, so no fence is written") }),
    );
    const first = sqsRecord(JSON.stringify(award("st-conflict", 1, "u-st-x")));
    expect(await invoke(handler, [first])).toEqual([first.messageId]);
    expect(await invoke(handler, [sqsRecord(JSON.stringify(award("st-conflict", 500, "u-st-x")))])).toEqual(
      [],
    );
    expect(gateway.calls).toHaveLength(1);
    expect(await deadLetterOf("st-conflict")).toMatchObject({
      error_kind: "conflict",
      message: expect.stringMatching(
        /^job "st-conflict" has steps claimed with fingerprint [0-9a-f]{32}; this message carries a different job/,
      ),
    });
  });
});

describe("the claim before each call", () => {
  /** Two steps, `charge` then `capture`, with a gate a test may hold a delivery at before each. */
  function twoSteps(
    gateway: Gateway,
    seen: { messageId: string; points: number; steps: unknown }[],
    gate: (messageId: string, step: string) => Promise<void> = async () => {},
  ): ConsumerDefinition<typeof awardPointsPayload, Record<never, never>, unknown> {
    return {
      name: CONSUMER,
      payload: awardPointsPayload,
      steps: async (job) => {
        await gate(job.messageId, "charge");
        const charge = await job.step("charge", Charge, (key) => gateway.charge(job.payload.points, key));
        await gate(job.messageId, "capture");
        const capture = await job.step("capture", Charge, (key) => gateway.charge(job.payload.points, key));
        return { charge, capture };
      },
      work: async (job, tx) => {
        seen.push({ messageId: job.messageId, points: job.payload.points, steps: job.steps });
        const { charge } = job.steps as { charge: { amount: number } };
        await awardPoints(tx, {
          jobId: job.jobId,
          tenantId: job.tenantId,
          userId: job.payload.user_id,
          points: charge.amount,
        });
      },
    };
  }
  const opened = () => {
    let open!: () => void;
    return { wait: new Promise<void>((r) => (open = r)), open: () => open() };
  };

  it("a delivery that read the job's steps before another recorded and applied them calls nothing more", async () => {
    const gateway = new Gateway();
    const seen: { messageId: string; points: number; steps: unknown }[] = [];
    const gate = opened();
    const body = JSON.stringify(award("st-late-reader", 5, "u-st-lr"));
    const slow = bed.consumer(
      twoSteps(gateway, seen, (id, step) =>
        id === "B" && step === "capture" ? gate.wait : Promise.resolve(),
      ),
    );
    const fast = bed.consumer(twoSteps(gateway, seen));
    const b = invoke(slow, [sqsRecord(body, { messageId: "B" })]);
    await new Promise((r) => setTimeout(r, 300));
    expect(await invoke(fast, [sqsRecord(body, { messageId: "A" })])).toEqual([]);
    gate.open();
    await b;
    expect(
      gateway.calls.filter((c) => c.key === stepKey(CONSUMER, "st-late-reader", "capture")),
    ).toHaveLength(1);
    expect(await effectsOf(bed.db, "st-late-reader")).toMatchObject({ ledger: 1, fences: 1 });
  });

  it("a different body under the job's id after the first died between call and checkpoint: a conflict, nothing called, no result of the first", async () => {
    const gateway = new Gateway();
    const seen: { messageId: string; points: number; steps: unknown }[] = [];
    const handler = bed.consumer(twoSteps(gateway, seen));
    installFaultHook((point) => {
      if (point === "step:after-call") throw new Error("the container died here");
    });
    const x = sqsRecord(JSON.stringify(award("st-other-body", 5, "u-st-ob")), { messageId: "X" });
    expect(await invoke(handler, [x])).toEqual(["X"]);
    installFaultHook(undefined);
    expect(
      await invoke(handler, [
        sqsRecord(JSON.stringify(award("st-other-body", 500, "u-st-ob")), { messageId: "Y" }),
      ]),
    ).toEqual([]);
    expect(gateway.calls.map((c) => c.amount)).toEqual([5]);
    expect(seen).toEqual([]);
    expect(await deadLetterOf("st-other-body")).toMatchObject({ error_kind: "conflict" });
    // The first body goes on, with the same key: the provider answers what it did.
    expect(await invoke(handler, [sqsRecord(x.body, { messageId: "X", receiveCount: 2 })])).toEqual([]);
    expect(gateway.effects).toBe(2);
    expect(seen.map((s) => s.points)).toEqual([5]);
  });

  it("a different body running at the same time never calls: the job is the first claimant's", async () => {
    const gateway = new Gateway();
    const seen: { messageId: string; points: number; steps: unknown }[] = [];
    const gate = opened();
    // Y claims the job, then is held before its first step; X, another body under the same id, comes.
    const y = bed.consumer(twoSteps(gateway, seen, (id) => (id === "Y" ? gate.wait : Promise.resolve())));
    const x = bed.consumer(twoSteps(gateway, seen));
    const pending = invoke(y, [
      sqsRecord(JSON.stringify(award("st-racing-body", 500, "u-st-rb")), { messageId: "Y" }),
    ]);
    await new Promise((r) => setTimeout(r, 300));
    expect(
      await invoke(x, [sqsRecord(JSON.stringify(award("st-racing-body", 5, "u-st-rb")), { messageId: "X" })]),
    ).toEqual([]);
    expect(await deadLetterOf("st-racing-body")).toMatchObject({ error_kind: "conflict" });
    gate.open();
    expect(await pending).toEqual([]);
    expect(gateway.calls.map((c) => c.amount)).toEqual([500, 500]);
    expect(seen.map((s) => s.points)).toEqual([500]);
  });

  it("a different body whose payload chooses other steps, or none, never calls: the job is claimed for the first body", async () => {
    const gateway = new Gateway();
    const seen: { messageId: string; points: number; steps: unknown }[] = [];
    const gate = opened();
    // Small awards call nothing; large ones charge a step named by their amount.
    const byAmount = (
      held: string,
    ): ConsumerDefinition<typeof awardPointsPayload, Record<never, never>, unknown> => ({
      name: CONSUMER,
      payload: awardPointsPayload,
      steps: async (job) => {
        if (job.messageId === held) await gate.wait;
        if (job.payload.points < 100) return {};
        return {
          charge: await job.step(`charge-${job.payload.points}`, Charge, (key) =>
            gateway.charge(job.payload.points, key),
          ),
        };
      },
      work: async (job, tx) => {
        seen.push({ messageId: job.messageId, points: job.payload.points, steps: job.steps });
        await awardPoints(tx, {
          jobId: job.jobId,
          tenantId: job.tenantId,
          userId: job.payload.user_id,
          points: job.payload.points,
        });
      },
    });
    // The first body calls nothing and is applied; the second would charge: it finds the job theirs.
    const handler = bed.consumer(byAmount("none"));
    expect(
      await invoke(handler, [
        sqsRecord(JSON.stringify(award("st-body-none", 5, "u-st-bn")), { messageId: "X" }),
      ]),
    ).toEqual([]);
    expect(
      await invoke(handler, [
        sqsRecord(JSON.stringify(award("st-body-none", 500, "u-st-bn")), { messageId: "Y" }),
      ]),
    ).toEqual([]);
    expect(await deadLetterOf("st-body-none")).toMatchObject({ error_kind: "conflict" });
    // The first body, with no step of its own yet, is held after claiming the job; the second,
    // whose step has another name, comes meanwhile: refused before it calls.
    const slow = bed.consumer(byAmount("X"));
    const pending = invoke(slow, [
      sqsRecord(JSON.stringify(award("st-body-other", 5, "u-st-bo")), { messageId: "X" }),
    ]);
    await new Promise((r) => setTimeout(r, 300));
    expect(
      await invoke(handler, [
        sqsRecord(JSON.stringify(award("st-body-other", 500, "u-st-bo")), { messageId: "Y" }),
      ]),
    ).toEqual([]);
    gate.open();
    expect(await pending).toEqual([]);
    expect(await deadLetterOf("st-body-other")).toMatchObject({ error_kind: "conflict" });
    expect(gateway.calls).toEqual([]);
    expect(seen.map((s) => s.points)).toEqual([5, 5]);
  });

  it("a step called and never recorded is not called again once the provider has forgotten its key", async () => {
    const gateway = new Gateway();
    const handler = bed.consumer(twoSteps(gateway, []));
    installFaultHook((point) => {
      if (point === "step:after-call") throw new Error("the container died here");
    });
    const first = sqsRecord(JSON.stringify(award("st-forgotten", 5, "u-st-f")), { messageId: "F" });
    expect(await invoke(handler, [first])).toEqual(["F"]);
    installFaultHook(undefined);
    // A day later (Stripe keeps a key 24 hours): the claim is older than the key's lifetime.
    await bed.db.withClient((c) =>
      c.query(
        "UPDATE core.job_steps SET called_at = now() - interval '1 day', expires_at = now() + interval '1 day' WHERE job_id = 'st-forgotten'",
      ),
    );
    expect(await invoke(handler, [sqsRecord(first.body, { messageId: "F", receiveCount: 2 })])).toEqual([]);
    expect(gateway.calls).toHaveLength(1);
    const letter = await deadLetterOf("st-forgotten");
    expect(letter).toMatchObject({ error_kind: "hard", error_class: "StepOutcomeUnknownError" });
    expect(letter.message).toContain(stepKey(CONSUMER, "st-forgotten", "charge"));
  });

  it("the 1001st step of a job is refused before it is called", async () => {
    let calls = 0;
    const handler = bed.consumer({
      name: CONSUMER,
      payload: awardPointsPayload,
      steps: async (job) => {
        for (let i = 1; i <= 1001; i++) await job.step(`s${i}`, z.number(), async () => ++calls);
      },
      work: async () => {},
    });
    expect(await invoke(handler, [sqsRecord(JSON.stringify(award("st-many", 1, "u-st-m")))])).toEqual([]);
    expect(calls).toBe(1000);
    expect(await deadLetterOf("st-many")).toMatchObject({
      error_kind: "hard",
      error_class: "StepDefinitionError",
    });
  });
});

describe("a provider that hangs", () => {
  it("each delivery is ended by its deadline (the call's signal aborts) and counts an interruption; then the job is dead-lettered as interrupted and calls no more", async () => {
    const keys: string[] = [];
    let aborted = 0;
    const handler = bed.consumer(
      {
        name: CONSUMER,
        payload: awardPointsPayload,
        steps: (job) =>
          job.step("charge", Charge, (key, { signal }) => {
            keys.push(key);
            return new Promise((_, reject) =>
              signal.addEventListener("abort", () => {
                aborted++;
                reject(signal.reason);
              }),
            );
          }),
        work: async () => {},
      },
      {
        configure: {
          functionTimeoutSeconds: 3,
          recordBudgetMs: 1200,
          returnReserveMs: 1000,
          lockTimeoutMs: 100,
          maxInterruptions: 2,
        },
      },
    );
    const delivery = (n: number) => [
      sqsRecord(JSON.stringify(award("st-hang", 1, "u-st-h")), { messageId: "m-st-hang", receiveCount: n }),
    ];
    for (const n of [1, 2]) {
      const response = await handler({ Records: delivery(n) }, lambdaContext(CONSUMER, 1700));
      expect(response.batchItemFailures).toEqual([{ itemIdentifier: "m-st-hang" }]);
    }
    expect(aborted).toBe(2);
    const ledger = await bed.db.withClient(
      async (c) =>
        (await c.query("SELECT interruptions FROM core.message_attempts WHERE message_id = 'm-st-hang'"))
          .rows,
    );
    expect(ledger).toEqual([{ interruptions: 2 }]);
    const response = await handler({ Records: delivery(3) }, lambdaContext(CONSUMER, 5000));
    expect(response.batchItemFailures).toEqual([]);
    expect(await deadLetterOf("st-hang")).toMatchObject({ error_kind: "interrupted" });
    expect(keys).toEqual([stepKey(CONSUMER, "st-hang", "charge"), stepKey(CONSUMER, "st-hang", "charge")]);
  });
});

describe("what steps cost, and where they are refused", () => {
  /** Query calls on the consumer's connections while one job is handled. */
  async function roundTrips(
    definition: ConsumerDefinition<typeof awardPointsPayload, Record<never, never>, unknown>,
    jobId: string,
  ) {
    const pool = createPool({ connectionString: bed.db.url, role: consumerRoleName(CONSUMER), max: 1 });
    const sql: string[] = [];
    const wrapped = new WeakSet<object>();
    pool.on("acquire", (client) => {
      if (wrapped.has(client)) return;
      wrapped.add(client);
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as { query: unknown }).query = (...args: unknown[]) => {
        const text = args[0];
        sql.push(typeof text === "string" ? text : JSON.stringify(text));
        return query(...args);
      };
    });
    const handler = bed.consumer(definition, { pool });
    expect(await invoke(handler, [sqsRecord(JSON.stringify(award(jobId, 1, "u-st-cost")))])).toEqual([]);
    return sql;
  }
  const work: ConsumerDefinition<typeof awardPointsPayload, Record<never, never>, unknown>["work"] = (
    job,
    tx,
  ) => awardPoints(tx, { jobId: job.jobId, tenantId: job.tenantId, userId: job.payload.user_id, points: 1 });

  it("a job of a consumer without steps pays nothing: BEGIN+fence, its work, COMMIT; no step table touched", async () => {
    const sql = await roundTrips({ name: CONSUMER, payload: awardPointsPayload, work }, "st-free");
    expect(sql).toHaveLength(3);
    expect(sql.filter((s) => /job_steps/.test(s))).toEqual([]);
    expect(await stepRows("st-free")).toEqual([]);
  });

  it("a job with one step pays three round trips more: the find, the claim and the result", async () => {
    const gateway = new Gateway();
    const sql = await roundTrips(
      {
        name: CONSUMER,
        payload: awardPointsPayload,
        steps: async (job) => job.step("charge", Charge, (key) => gateway.charge(1, key)),
        work,
      },
      "st-one",
    );
    expect(sql).toHaveLength(6);
    expect(sql.filter((s) => /job_steps/.test(s))).toHaveLength(3);
  });

  it("steps with commitMode batch are refused at start-up", () => {
    expect(() =>
      prepareConsumer(
        {
          name: CONSUMER,
          payload: awardPointsPayload,
          commitMode: "batch",
          steps: async () => 1,
          work: async () => {},
        },
        {
          pool: new pg.Pool({ connectionString: bed.db.url }),
          config: { databaseUrl: bed.db.url, opsBusName: "b" },
        },
      ),
    ).toThrow(ConfigurationError);
  });
});

describe("a user's own Middy chain", () => {
  function chainOf(
    definition: ConsumerDefinition<typeof awardPointsPayload, Record<never, never>, unknown>,
    withSteps: boolean,
  ): HostedConsumer {
    const pool = createPool({ connectionString: bed.db.url, role: consumerRoleName(CONSUMER), max: 2 });
    bed.pools.push(pool);
    const consumer = prepareConsumer(definition, {
      pool,
      sqs: bed.sqs,
      config: { databaseUrl: bed.db.url, opsBusName: "jobfence-test" },
    });
    let chain = middy(runWork(consumer)).use(recordDeadLetter(consumer)).use(validateJob(consumer));
    if (withSteps) chain = chain.use(runSteps(consumer));
    chain = chain.use(fenceTransaction(consumer));
    return Object.assign(sqsRecords(consumer, chain), {
      consumer: CONSUMER,
      pool,
    }) as unknown as HostedConsumer;
  }

  it("runSteps between validateJob and fenceTransaction runs the steps; a chain without it leaves the record in the queue", async () => {
    const gateway = new Gateway();
    const seen: Seen = [];
    const definition = charging(gateway, seen) as ConsumerDefinition<
      typeof awardPointsPayload,
      Record<never, never>,
      unknown
    >;
    const good = chainOf(definition, true);
    const response = await good(
      { Records: [sqsRecord(JSON.stringify(award("st-middy", 6, "u-st-m")))] },
      lambdaContext(CONSUMER),
    );
    expect(response.batchItemFailures).toEqual([]);
    expect(seen.map((s) => s.steps)).toEqual([{ charge: { id: "ch_1", amount: 6 } }]);

    const missing = chainOf(definition, false);
    const record = sqsRecord(JSON.stringify(award("st-middy-missing", 6, "u-st-m")));
    const refused = await missing({ Records: [record] }, lambdaContext(CONSUMER));
    expect(refused.batchItemFailures).toEqual([{ itemIdentifier: record.messageId }]);
    expect(gateway.calls).toHaveLength(1);
    expect(await effectsOf(bed.db, "st-middy-missing")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
  });
});

describe("housekeeping", () => {
  it("the cleanup deletes a step only when no copy of its job can need it", async () => {
    await bed.db.withClient(async (c) => {
      const insert = (jobId: string) =>
        c.query(
          `INSERT INTO core.job_steps (job_id, consumer_id, step, position, fingerprint, result, called_at, recorded_at, expires_at)
           VALUES ($1, core.consumer_id($2), 'charge', 1, NULL, '{}', now() - interval '2 days', now() - interval '2 days', now() - interval '1 day')`,
          [jobId, CONSUMER],
        );
      for (const jobId of ["hk-free", "hk-fenced", "hk-resolved-long-ago", "hk-resolved-lately"])
        await insert(jobId);
      // The job's own claim, expired, of a job whose step lives on: it stays until the step goes.
      await c.query(
        `INSERT INTO core.job_steps (job_id, consumer_id, step, position, fingerprint, called_at, expires_at)
         VALUES ('hk-claimed', core.consumer_id($1), '_job', 0, '00112233445566778899aabbccddeeff', now() - interval '2 days', now() - interval '1 day'),
                ('hk-claimed', core.consumer_id($1), 'charge', 1, '00112233445566778899aabbccddeeff', now() - interval '1 hour', now() + interval '1 day'),
                ('hk-free', core.consumer_id($1), '_job', 0, '00112233445566778899aabbccddeeff', now() - interval '2 days', now() - interval '1 day')`,
        [CONSUMER],
      );
      await c.query(
        "INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at) VALUES ('hk-fenced', core.consumer_id($1), 't', now() + interval '1 day')",
        [CONSUMER],
      );
      for (const [jobId, resolved] of [
        ["hk-resolved-long-ago", "3 days"],
        ["hk-resolved-lately", "1 hour"],
      ]) {
        await c.query(
          `WITH pending AS (
             INSERT INTO core.dead_letters (job_id, consumer, queue, attempts, error_kind, last_error, correlation_id, body_form, body)
             VALUES ($1, $2, 'q', 1, 'hard', '{"class":"E","message":"m"}', 'c', 'text', '{}') RETURNING id)
           SELECT id FROM pending`,
          [jobId, CONSUMER],
        );
        await c.query(
          "UPDATE core.dead_letters SET status = 'replayed', resolved_at = now() - $2::interval, resolved_by = 'ops' WHERE job_id = $1",
          [jobId, resolved],
        );
      }
    });
    const report = await cleanup();
    expect(report.stepsDeleted).toBeGreaterThanOrEqual(2);
    const left = async () =>
      bed.db.withClient(
        async (c) =>
          (await c.query("SELECT job_id, step FROM core.job_steps WHERE job_id LIKE 'hk-%' ORDER BY 1, 2"))
            .rows,
      );
    // hk-free's claim waits for a later run: its step was deleted in this one.
    expect(await left()).toEqual([
      { job_id: "hk-claimed", step: "_job" },
      { job_id: "hk-claimed", step: "charge" },
      { job_id: "hk-fenced", step: "charge" },
      { job_id: "hk-free", step: "_job" },
      { job_id: "hk-resolved-lately", step: "charge" },
    ]);
    await cleanup();
    expect(await left()).toEqual([
      { job_id: "hk-claimed", step: "_job" },
      { job_id: "hk-claimed", step: "charge" },
      { job_id: "hk-fenced", step: "charge" },
      { job_id: "hk-resolved-lately", step: "charge" },
    ]);
  });
});

async function deadLetterOf(
  jobId: string,
): Promise<{ id: string; error_kind: string; error_class: string; message: string }> {
  return bed.db.withClient(async (c) => {
    const { rows } = await c.query(
      "SELECT id, error_kind, error_class, last_error->>'message' AS message FROM core.dead_letters WHERE job_id = $1 ORDER BY created_at DESC LIMIT 1",
      [jobId],
    );
    expect(rows, `a dead letter of ${jobId}`).toHaveLength(1);
    return rows[0];
  });
}

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

function cleanup() {
  return bed.db.withClient(async (c) => {
    await c.query("SET ROLE jobfence_cleanup");
    try {
      return await runFenceCleanup({ db: c, budgetMs: 5000, pauseMs: 0 });
    } finally {
      await c.query("RESET ROLE");
    }
  });
}
