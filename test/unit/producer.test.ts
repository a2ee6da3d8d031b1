import { createHash } from "node:crypto";
import fc from "fast-check";
import { describe, expect, expectTypeOf, it } from "vitest";
import { z } from "zod";
import { parseSendArgs, SEND_DEFAULT_TENANT } from "../../local/send.ts";
import { envelopeSchema, JOB_ID_MAX_LENGTH } from "../../shared/envelope/envelope.ts";
import { jobFingerprint } from "../../shared/envelope/fingerprint.ts";
import { JobfenceError } from "../../shared/errors/jobfence-error.ts";
import {
  INVALID_JOB_REASON,
  InvalidJobError,
  JobIdDerivationError,
  SendRefusedError,
} from "../../shared/errors/sending.ts";
import {
  fifoDeduplicationId,
  HASHED_TOKEN_PREFIX,
  messageGroupId,
  replayDeduplicationId,
  sqsToken,
} from "../../shared/producer/fifo-ids.ts";
import { type JobEnvelope, jobEnvelope } from "../../shared/producer/job-envelope.ts";
import { DERIVED_JOB_ID_MAX_LENGTH, deriveJobId } from "../../shared/producer/job-id.ts";
import { type JobToSend, jobMessages } from "../../shared/producer/job-message.ts";
import { backoffMs, DEFAULT_SEND_RETRY } from "../../shared/producer/send-policy.ts";

const SQS_TOKEN = /^[\x21-\x7e]{1,128}$/;

const payloadSchema = z.object({ user_id: z.string().min(1), points: z.number().int().positive() });
const definition = { name: "award-points", payload: payloadSchema };

function envelope(jobId: string, extra: Partial<JobEnvelope> = {}): JobEnvelope {
  return { job_id: jobId, tenant_id: "t_1", payload: { user_id: "u", points: 1 }, ...extra };
}

function refusal(run: () => unknown): SendRefusedError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(SendRefusedError);
    expect(error).toBeInstanceOf(JobfenceError);
    return error as SendRefusedError;
  }
  throw new Error("expected a SendRefusedError");
}

describe("FIFO ids", () => {
  const fp = jobFingerprint("t_42", { points: 5 });
  const fp64 = fp.toString("base64url");

  it("shows a job id or tenant that fits SQS's alphabet as it is", () => {
    expect(fp64).toHaveLength(22);
    expect(fifoDeduplicationId("award:order-8812", fp)).toBe(`award:order-8812:${fp64}`);
    const punctuation = `!"#$%&'()*+,-./:;<=>?@[\\]^_\`{|}~`;
    expect(fifoDeduplicationId(punctuation, fp)).toBe(`${punctuation}:${fp64}`);
    expect(fifoDeduplicationId("x".repeat(105), fp)).toBe(`${"x".repeat(105)}:${fp64}`);
    expect(fifoDeduplicationId("x".repeat(105), fp)).toHaveLength(128);
    expect(fifoDeduplicationId("x".repeat(106), fp)).toMatch(/^sha256:[A-Za-z0-9_-]{43}$/);
    expect(messageGroupId("t_42")).toBe("t_42");
    expect(messageGroupId("t_42", "user-7")).toBe("user-7");
  });

  it("hashes one that does not fit: too long, a space, non-ASCII, empty, or the hash prefix", () => {
    for (const value of ["x".repeat(129), "a b", "café", "", "\ud800", `${HASHED_TOKEN_PREFIX}abc`]) {
      const token = sqsToken(value);
      expect(token.startsWith(HASHED_TOKEN_PREFIX)).toBe(true);
      expect(token).toMatch(SQS_TOKEN);
      expect(token).toBe(sqsToken(value)); // stable
    }
    expect(sqsToken("x".repeat(129))).not.toBe(sqsToken("x".repeat(130)));
    expect(sqsToken("\ud800")).not.toBe(sqsToken("\udc00")); // lone surrogates stay apart
    expect(sqsToken("\ud800")).not.toBe(sqsToken("\ufffd"));
  });

  it("deduplicates a job by its job id and fingerprint: same job, same id; another job under it, another id", () => {
    const other = jobFingerprint("t_42", { points: 6 });
    for (const jobId of ["order-1", "x".repeat(200), "a b", "café", `${HASHED_TOKEN_PREFIX}x`]) {
      expect(fifoDeduplicationId(jobId, fp)).toBe(
        fifoDeduplicationId(jobId, jobFingerprint("t_42", { points: 5 })),
      );
      expect(fifoDeduplicationId(jobId, other)).not.toBe(fifoDeduplicationId(jobId, fp));
      expect(fifoDeduplicationId(jobId, fp)).toMatch(SQS_TOKEN);
    }
    // The tenant is part of the fingerprint: the same payload for another tenant is another job.
    expect(fifoDeduplicationId("order-1", jobFingerprint("t_43", { points: 5 }))).not.toBe(
      fifoDeduplicationId("order-1", fp),
    );
    expect(() => fifoDeduplicationId("order-1", fp.subarray(0, 8))).toThrow(RangeError);
  });

  it("never gives two (job id, fingerprint) pairs one id, nor a job's id to a replay", () => {
    const print = fc.uint8Array({ minLength: 16, maxLength: 16 }).map((b) => Buffer.from(b));
    const jobId = fc.oneof(
      fc.string({ unit: "binary", maxLength: 130 }),
      fc.stringMatching(/^[!-~]{1,110}$/),
    );
    fc.assert(
      fc.property(
        jobId,
        print,
        jobId,
        print,
        fc.uuid(),
        fc.base64String({ minLength: 16, maxLength: 16 }),
        (a, fa, b, fb, deadLetter, nonce) => {
          const id = fifoDeduplicationId(a, fa);
          expect(id).toMatch(SQS_TOKEN);
          if (a !== b || !fa.equals(fb)) expect(fifoDeduplicationId(b, fb)).not.toBe(id);
          expect(replayDeduplicationId(deadLetter, nonce)).not.toBe(id);
          expect(replayDeduplicationId(deadLetter, nonce)).toMatch(SQS_TOKEN);
          // Two attempts of one replay are two messages to SQS (a retry after a lost answer is sent).
          expect(replayDeduplicationId(deadLetter, `${nonce}x`)).not.toBe(
            replayDeduplicationId(deadLetter, nonce),
          );
        },
      ),
    );
  });

  it("is always a valid token, and distinct values never share one", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 300 }), fc.string({ maxLength: 300 }), (a, b) => {
        expect(sqsToken(a)).toMatch(SQS_TOKEN);
        if (a !== b) expect(sqsToken(a)).not.toBe(sqsToken(b));
      }),
    );
  });
});

describe("deriveJobId", () => {
  it("is stable: a fixed vector, the documented hash of the canonical JSON of [namespace, ...keys]", () => {
    expect(deriveJobId("orders", "a", 1)).toBe("orders:DvtiGCF2yHmQ165qZi9xh0OyHbCNou0RGEXfpaZmj8E");
    const documented = createHash("sha256").update('["orders","a",1]', "utf8").digest("base64url");
    expect(deriveJobId("orders", "a", 1)).toBe(`orders:${documented}`);
    expect(deriveJobId("award-points", "order-8812")).toBe(deriveJobId("award-points", "order-8812"));
  });

  it("separates keys: concatenation, types, order, count and namespace all change the id", () => {
    const ids = [
      deriveJobId("ns", "a", "bc"),
      deriveJobId("ns", "ab", "c"),
      deriveJobId("ns", "abc"),
      deriveJobId("ns", "a,bc"),
      deriveJobId("ns", '"a","bc"'),
      deriveJobId("ns", "bc", "a"),
      deriveJobId("ns", "1"),
      deriveJobId("ns", 1),
      deriveJobId("ns", "a", "bc", ""),
      deriveJobId("ns2", "a", "bc"),
      deriveJobId("ns", "\ud800"),
      deriveJobId("ns", "\ufffd"),
    ];
    expect(new Set(ids).size).toBe(ids.length);
    // Equal numbers are one key, as RFC 8785 writes them.
    expect(deriveJobId("ns", 1)).toBe(deriveJobId("ns", 1.0));
    expect(deriveJobId("ns", 0)).toBe(deriveJobId("ns", -0));
  });

  it("separates any two different key lists", () => {
    const keys = fc.array(fc.oneof(fc.string({ maxLength: 5 }), fc.integer({ min: -3, max: 3 })), {
      minLength: 1,
      maxLength: 4,
    });
    fc.assert(
      fc.property(keys, keys, (a, b) => {
        const same =
          a.length === b.length && a.every((k, i) => Object.is(k, b[i]) || (k === 0 && b[i] === 0));
        if (!same) expect(deriveJobId("ns", ...a)).not.toBe(deriveJobId("ns", ...b));
      }),
    );
  });

  it("stays within the envelope's job_id limit and SQS's deduplication id, whatever the keys", () => {
    const id = deriveJobId("n".repeat(64), "k".repeat(100_000), Number.MAX_VALUE);
    expect(id.length).toBe(DERIVED_JOB_ID_MAX_LENGTH);
    expect(DERIVED_JOB_ID_MAX_LENGTH).toBeLessThanOrEqual(JOB_ID_MAX_LENGTH);
    expect(envelopeSchema.shape.job_id.safeParse(id).success).toBe(true);
    // On FIFO queues its deduplication id shows it as it is when its namespace has at most 61 characters.
    const fp = jobFingerprint("t", {});
    expect(fifoDeduplicationId(id, fp)).toMatch(SQS_TOKEN);
    const short = deriveJobId("n".repeat(61), "k");
    expect(fifoDeduplicationId(short, fp)).toBe(`${short}:${fp.toString("base64url")}`);
  });

  it("refuses a namespace or key it cannot derive a stable, unambiguous id from", () => {
    for (const namespace of ["", "a:b", "a b", "-a", "n".repeat(65), "é"]) {
      expect(() => deriveJobId(namespace, "k")).toThrow(JobIdDerivationError);
    }
    expect(() => deriveJobId("ns")).toThrow(/at least one key/);
    for (const key of [Number.NaN, Number.POSITIVE_INFINITY, 1n, undefined, null, {}] as unknown[]) {
      expect(() => deriveJobId("ns", key as string)).toThrow(JobIdDerivationError);
    }
  });
});

describe("jobEnvelope", () => {
  it("builds the snake_case envelope from a schema or a consumer's definition", () => {
    const fields = { jobId: "j-1", tenantId: "t_1", payload: { user_id: "u", points: 2 } };
    expect(jobEnvelope(payloadSchema, fields)).toEqual({
      job_id: "j-1",
      tenant_id: "t_1",
      payload: { user_id: "u", points: 2 },
    });
    expect(jobEnvelope(definition, { ...fields, correlationId: "req-1" })).toEqual({
      job_id: "j-1",
      tenant_id: "t_1",
      correlation_id: "req-1",
      payload: { user_id: "u", points: 2 },
    });
  });

  it("is typed by the schema's input", () => {
    const built = jobEnvelope(definition, {
      jobId: "j",
      tenantId: "t",
      payload: { user_id: "u", points: 1 },
    });
    expectTypeOf(built.payload).toEqualTypeOf<{ user_id: string; points: number }>();
    expectTypeOf<JobEnvelope<typeof payloadSchema>>().toExtend<z.input<typeof envelopeSchema>>();
    const transformed = z.string().transform((s) => s.length);
    expectTypeOf<JobEnvelope<typeof transformed>["payload"]>().toEqualTypeOf<string>();
    // Checked by the compiler only: never called.
    const _refusedByTheCompiler = () =>
      // @ts-expect-error points must be a number
      jobEnvelope(payloadSchema, { jobId: "j", tenantId: "t", payload: { user_id: "u", points: "1" } });
    expect(typeof _refusedByTheCompiler).toBe("function");
    expect(() =>
      jobEnvelope(payloadSchema, {
        jobId: "j",
        tenantId: "t",
        payload: { user_id: "u", points: "1" as unknown as number },
      }),
    ).toThrow(InvalidJobError);
  });

  it("refuses an envelope the consumer would dead-letter, naming the field", () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ jobId: "" }, /^job_id: /],
      [{ jobId: "   " }, /^job_id: must not be blank/],
      [{ jobId: "j".repeat(256) }, /^job_id: must be at most 255/],
      [{ jobId: "a\u0000b" }, /^job_id: must not contain U\+0000/],
      [{ tenantId: "t".repeat(256) }, /^tenant_id: /],
      [{ correlationId: "c".repeat(256) }, /^correlation_id: /],
    ];
    for (const [override, issue] of cases) {
      try {
        jobEnvelope(payloadSchema, {
          jobId: "j",
          tenantId: "t",
          payload: { user_id: "u", points: 1 },
          ...override,
        } as never);
        throw new Error(`accepted ${JSON.stringify(override)}`);
      } catch (error) {
        expect(error).toBeInstanceOf(InvalidJobError);
        expect((error as InvalidJobError).reason).toBe(INVALID_JOB_REASON.invalidEnvelope);
        expect((error as InvalidJobError).issues[0]).toMatch(issue);
      }
    }
  });

  it("refuses a payload the consumer's schema refuses, with its path", () => {
    try {
      jobEnvelope(definition, { jobId: "j", tenantId: "t", payload: { user_id: "", points: -1 } });
      throw new Error("accepted");
    } catch (error) {
      expect(error).toBeInstanceOf(InvalidJobError);
      const e = error as InvalidJobError;
      expect(e.reason).toBe(INVALID_JOB_REASON.invalidPayload);
      expect(e.issues.map((i) => i.split(":")[0])).toEqual(["payload.user_id", "payload.points"]);
      expect(e.message).toMatch(/^invalid-payload: payload\.user_id/);
    }
  });

  it("checks the payload as it arrives, after JSON: a Date is a string there", () => {
    const when = z.object({ at: z.date() });
    expect(() => jobEnvelope(when, { jobId: "j", tenantId: "t", payload: { at: new Date() } })).toThrow(
      /invalid-payload: payload\.at/,
    );
    const optional = z.object({ note: z.string() });
    expect(() =>
      jobEnvelope(optional, { jobId: "j", tenantId: "t", payload: { note: undefined } as never }),
    ).toThrow(/payload\.note/);
  });

  it("refuses what JSON cannot carry, and a schema that throws", () => {
    const anything = z.unknown();
    try {
      jobEnvelope(anything, { jobId: "j", tenantId: "t", payload: { big: 1n } });
      throw new Error("accepted");
    } catch (error) {
      expect((error as InvalidJobError).reason).toBe(INVALID_JOB_REASON.notJson);
    }
    expect(() => jobEnvelope(anything, { jobId: "j", tenantId: "t", payload: undefined })).toThrow(
      /invalid-envelope: payload: payload is required/,
    );
    const throwing = z.unknown().superRefine(() => {
      throw new Error("boom");
    });
    expect(() => jobEnvelope(throwing, { jobId: "j", tenantId: "t", payload: 1 })).toThrow(
      /schema threw \(boom\)/,
    );
  });
});

describe("jobMessages", () => {
  it("writes each envelope as its body; on FIFO the group is the tenant and the dedup id the job id and fingerprint", () => {
    const jobs: JobToSend[] = [
      { envelope: envelope("a") },
      { envelope: envelope("b", { tenant_id: "t_2" }), groupId: "g-7" },
      {
        envelope: envelope("c".repeat(200)),
        attributes: { trace: { DataType: "String", StringValue: "x" } },
      },
    ];
    expect(jobMessages(jobs, false)).toEqual([
      { MessageBody: JSON.stringify(envelope("a")) },
      { MessageBody: JSON.stringify(envelope("b", { tenant_id: "t_2" })) },
      {
        MessageBody: JSON.stringify(envelope("c".repeat(200))),
        MessageAttributes: { trace: { DataType: "String", StringValue: "x" } },
      },
    ]);
    const fifo = jobMessages(jobs, true);
    const dedup = (job: JobToSend) =>
      fifoDeduplicationId(job.envelope.job_id, jobFingerprint(job.envelope.tenant_id, job.envelope.payload));
    expect(fifo.map((m) => [m.MessageGroupId, m.MessageDeduplicationId])).toEqual([
      ["t_1", dedup(jobs[0] as JobToSend)],
      ["g-7", dedup(jobs[1] as JobToSend)],
      ["t_1", dedup(jobs[2] as JobToSend)],
    ]);
    expect(fifo[0]?.MessageDeduplicationId).toMatch(/^a:[A-Za-z0-9_-]{22}$/);
    expect(fifo[2]?.MessageDeduplicationId).toMatch(/^sha256:/);
  });

  it("refuses the whole call when any job_id is missing, empty or unusable, listing every one", () => {
    const error = refusal(() =>
      jobMessages(
        [
          { envelope: envelope("ok") },
          { envelope: { tenant_id: "t", payload: {} } as unknown as JobEnvelope },
          { envelope: envelope("") },
          { envelope: envelope(" ") },
          { envelope: envelope("x".repeat(256)) },
          {} as JobToSend,
        ],
        false,
      ),
    );
    expect(error.problems).toHaveLength(5);
    expect(error.problems[0]).toMatch(/^jobs\[1\]: job_id: /);
    expect(error.problems[1]).toMatch(/^jobs\[2\]: job_id: /);
    expect(error.problems[2]).toMatch(/^jobs\[3\]: job_id: must not be blank/);
    expect(error.problems[3]).toMatch(/^jobs\[4\]: job_id: must be at most 255/);
    expect(error.problems[4]).toBe("jobs[5]: has no envelope");
    expect(error.message).toMatch(/^nothing was sent:/);
  });

  it("refuses two jobs under one job_id, even identical ones", () => {
    const error = refusal(() =>
      jobMessages(
        [{ envelope: envelope("a") }, { envelope: envelope("b") }, { envelope: envelope("a") }],
        true,
      ),
    );
    expect(error.problems).toEqual([`jobs[2]: job_id "a" is also jobs[0]'s`]);
  });

  it("refuses a job JSON cannot carry, and an empty groupId", () => {
    const error = refusal(() =>
      jobMessages(
        [
          { envelope: envelope("a", { payload: { n: 1n } }) },
          { envelope: envelope("b"), groupId: "" },
          { envelope: envelope("c", { tenant_id: 7 as unknown as string }) },
        ],
        true,
      ),
    );
    expect(error.problems).toHaveLength(3);
    expect(error.problems[0]).toMatch(/^jobs\[0\]: the job cannot be written as JSON/);
    expect(error.problems[1]).toBe("jobs[1]: groupId must be a non-empty string");
    expect(error.problems[2]).toMatch(/^jobs\[2\]: tenant_id: /);
  });
});

describe("send retry policy", () => {
  it("backs off with full jitter, doubling up to the cap", () => {
    const top = () => 0.999_999;
    expect([1, 2, 3, 4, 5, 6].map((a) => backoffMs(a, DEFAULT_SEND_RETRY, top))).toEqual([
      99, 199, 399, 799, 1599, 1999,
    ]);
    expect(backoffMs(3, DEFAULT_SEND_RETRY, () => 0)).toBe(0);
  });
});

describe("parseSendArgs", () => {
  it("reads the consumer, the payload and the options", () => {
    expect(parseSendArgs(["award-points", "{}"])).toEqual({
      consumer: "award-points",
      payloadJson: "{}",
      tenantId: SEND_DEFAULT_TENANT,
      count: 1,
    });
    expect(
      parseSendArgs([
        "award-points",
        '{"a":1}',
        "--job-id",
        "j-1",
        "--tenant",
        "t_9",
        "--correlation-id",
        "req-1",
      ]),
    ).toEqual({
      consumer: "award-points",
      payloadJson: '{"a":1}',
      jobId: "j-1",
      tenantId: "t_9",
      correlationId: "req-1",
      count: 1,
    });
    expect(parseSendArgs(["c", "{}", "--count", "3", "--key", "k"])).toMatchObject({ count: 3, key: "k" });
  });

  it("refuses what it cannot read", () => {
    expect(parseSendArgs([])).toBe("a consumer and a payload are required");
    expect(parseSendArgs(["c"])).toBe("a consumer and a payload are required");
    expect(parseSendArgs(["c", "{}", "extra"])).toMatch(/unexpected argument "extra"/);
    expect(parseSendArgs(["c", "{}", "--bogus"])).toMatch(/--bogus/);
    for (const count of ["0", "-1", "1.5", "x", "10001"])
      expect(parseSendArgs(["c", "{}", `--count=${count}`])).toMatch(/--count must be/);
    expect(parseSendArgs(["c", "{}", "--count", "2", "--job-id", "j"])).toMatch(/--job-id names one job/);
    expect(parseSendArgs(["c", "{}", "--key", "k", "--job-id", "j"])).toMatch(/give one/);
  });
});
