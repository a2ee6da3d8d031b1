import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { JOB_ID_MAX_LENGTH, type ParsedMessage, parseMessage } from "../../shared/envelope/envelope.ts";
import { POISON_REASON, PoisonMessageError, type PoisonReason } from "../../shared/errors/job.ts";

const MESSAGE_ID = "5fea7756-0ea4-451a-a703-a558b933e274";

const payloadSchema = z.object({ amount: z.number().int().positive() });

function body(fields: Record<string, unknown>): string {
  return JSON.stringify(fields);
}

const validFields = {
  job_id: "award:order-8812",
  tenant_id: "t_42",
  correlation_id: "req-7f3a",
  payload: { amount: 5 },
};

/** The poison outcome of `parsed`, failing the test when the message parsed. */
function poisonOf<P>(parsed: ParsedMessage<P>, reason: PoisonReason) {
  if (parsed.ok) throw new Error(`expected poison (${reason}), got a job`);
  expect(parsed.error).toBeInstanceOf(PoisonMessageError);
  expect(parsed.error.name).toBe("PoisonMessageError");
  expect(parsed.error.reason).toBe(reason);
  return parsed;
}

describe("parseMessage: a valid envelope", () => {
  it("is a job with its job id, tenant, correlation id and parsed payload", () => {
    const parsed = parseMessage(body(validFields), payloadSchema, MESSAGE_ID);
    expect(parsed).toEqual({
      ok: true,
      job: { jobId: "award:order-8812", tenantId: "t_42", correlationId: "req-7f3a", payload: { amount: 5 } },
      identity: { jobId: "award:order-8812", tenantId: "t_42", correlationId: "req-7f3a" },
      envelopePayload: { amount: 5 },
    });
  });

  it("without a correlation_id, correlates by the job id", () => {
    const { correlation_id: _omitted, ...fields } = validFields;
    const parsed = parseMessage(body(fields), payloadSchema, MESSAGE_ID);
    if (!parsed.ok) throw parsed.error;
    expect(parsed.job.correlationId).toBe("award:order-8812");
    expect(parsed.identity.correlationId).toBe("award:order-8812");
  });

  it.each(["", " ", "\t\n"])(
    "a blank correlation_id (%j) counts as absent: correlated by the job id",
    (correlationId) => {
      const parsed = parseMessage(
        body({ ...validFields, correlation_id: correlationId }),
        payloadSchema,
        MESSAGE_ID,
      );
      if (!parsed.ok) throw parsed.error;
      expect(parsed.job.correlationId).toBe("award:order-8812");
      expect(parsed.identity.correlationId).toBe("award:order-8812");
    },
  );

  it("ignores extra top-level keys", () => {
    const parsed = parseMessage(
      body({ ...validFields, producer: "orders-api", version: 3, nested: { a: [1] } }),
      payloadSchema,
      MESSAGE_ID,
    );
    if (!parsed.ok) throw parsed.error;
    expect(parsed.job.jobId).toBe("award:order-8812");
    expect(Object.keys(parsed.job).sort()).toEqual(["correlationId", "jobId", "payload", "tenantId"]);
  });

  it("gives the work the payload schema's output, not the raw payload", () => {
    const schema = z.object({ amount: z.string().transform((s) => Number(s)) });
    const parsed = parseMessage(body({ ...validFields, payload: { amount: "12" } }), schema, MESSAGE_ID);
    if (!parsed.ok) throw parsed.error;
    expect(parsed.job.payload).toEqual({ amount: 12 });
  });

  it("accepts a job id of exactly 255 characters", () => {
    const jobId = "j".repeat(JOB_ID_MAX_LENGTH);
    const parsed = parseMessage(body({ ...validFields, job_id: jobId }), payloadSchema, MESSAGE_ID);
    if (!parsed.ok) throw parsed.error;
    expect(parsed.job.jobId).toBe(jobId);
  });

  it("keeps a job id with non-ASCII characters as sent", () => {
    const jobId = "order:naïve-🎉-Ω";
    const parsed = parseMessage(body({ ...validFields, job_id: jobId }), payloadSchema, MESSAGE_ID);
    if (!parsed.ok) throw parsed.error;
    expect(parsed.job.jobId).toBe(jobId);
  });

  it("accepts any payload value the consumer's schema accepts, including null", () => {
    const parsed = parseMessage(body({ ...validFields, payload: null }), z.null(), MESSAGE_ID);
    expect(parsed.ok).toBe(true);
  });
});

describe("parseMessage: a body that is not JSON", () => {
  it.each(["", "not json", "{", "{'job_id': 'x'}", '{"job_id": "a",}', "\u0000"])(
    "%j is poison (unparseable body) identified by the message id",
    (text) => {
      const parsed = poisonOf(parseMessage(text, payloadSchema, MESSAGE_ID), POISON_REASON.unparseableBody);
      expect(parsed.identity).toEqual({ jobId: MESSAGE_ID, tenantId: null, correlationId: MESSAGE_ID });
    },
  );
});

describe("parseMessage: an invalid envelope", () => {
  it.each(["42", "null", "true", '"award:order-8812"', "[]", JSON.stringify([validFields])])(
    "JSON that is not an object (%s) is poison identified by the message id",
    (text) => {
      const parsed = poisonOf(parseMessage(text, payloadSchema, MESSAGE_ID), POISON_REASON.invalidEnvelope);
      expect(parsed.identity).toEqual({ jobId: MESSAGE_ID, tenantId: null, correlationId: MESSAGE_ID });
    },
  );

  it("without a payload is poison that still reports the job id, tenant and correlation id it has", () => {
    const { payload: _omitted, ...fields } = validFields;
    const parsed = poisonOf(
      parseMessage(body(fields), payloadSchema, MESSAGE_ID),
      POISON_REASON.invalidEnvelope,
    );
    expect(parsed.identity).toEqual({
      jobId: "award:order-8812",
      tenantId: "t_42",
      correlationId: "req-7f3a",
    });
  });

  it.each<[string, unknown]>([
    ["missing", undefined],
    ["empty", ""],
    ["a number", 8812],
    ["null", null],
    ["an object", { id: "x" }],
    ["too long (256 characters)", "j".repeat(JOB_ID_MAX_LENGTH + 1)],
    ["containing U+0000", "award:\u0000order"],
  ])("with a job_id that is %s is poison identified by the message id", (_label, jobId) => {
    const parsed = poisonOf(
      parseMessage(body({ ...validFields, job_id: jobId }), payloadSchema, MESSAGE_ID),
      POISON_REASON.invalidEnvelope,
    );
    expect(parsed.identity).toEqual({ jobId: MESSAGE_ID, tenantId: "t_42", correlationId: "req-7f3a" });
  });

  it.each([" ", "   ", "\t\n"])("a blank job_id (%j) is poison identified by the message id", (jobId) => {
    const parsed = poisonOf(
      parseMessage(body({ ...validFields, job_id: jobId }), payloadSchema, MESSAGE_ID),
      POISON_REASON.invalidEnvelope,
    );
    expect(parsed.identity).toEqual({ jobId: MESSAGE_ID, tenantId: "t_42", correlationId: "req-7f3a" });
  });

  it.each<[string, unknown]>([
    ["a lone high surrogate", "order-\ud800"],
    ["a lone low surrogate", "\udc00order"],
  ])("a job_id holding %s is poison identified by the message id", (_label, jobId) => {
    const parsed = poisonOf(
      parseMessage(body({ ...validFields, job_id: jobId }), payloadSchema, MESSAGE_ID),
      POISON_REASON.invalidEnvelope,
    );
    expect(parsed.identity.jobId).toBe(MESSAGE_ID);
  });

  it("falls back to the message id for the correlation id when neither can be read", () => {
    const parsed = poisonOf(
      parseMessage(body({ tenant_id: "t_42" }), payloadSchema, MESSAGE_ID),
      POISON_REASON.invalidEnvelope,
    );
    expect(parsed.identity).toEqual({ jobId: MESSAGE_ID, tenantId: "t_42", correlationId: MESSAGE_ID });
  });

  it.each<[string, unknown]>([
    ["missing", undefined],
    ["a number", 42],
    ["null", null],
    ["an array", ["t_42"]],
    ["containing U+0000", "t\u000042"],
    ["holding a lone surrogate", "t\udc00"],
  ])("with a tenant_id that is %s is poison with tenant null", (_label, tenantId) => {
    const parsed = poisonOf(
      parseMessage(body({ ...validFields, tenant_id: tenantId }), payloadSchema, MESSAGE_ID),
      POISON_REASON.invalidEnvelope,
    );
    expect(parsed.identity).toEqual({ jobId: "award:order-8812", tenantId: null, correlationId: "req-7f3a" });
  });

  it.each<[string, unknown]>([
    ["a number", 7],
    ["null", null],
    ["containing U+0000", "req\u0000"],
    ["holding a lone surrogate", "req-\ud800"],
  ])("with a correlation_id that is %s is poison correlated by the job id", (_label, correlationId) => {
    const parsed = poisonOf(
      parseMessage(body({ ...validFields, correlation_id: correlationId }), payloadSchema, MESSAGE_ID),
      POISON_REASON.invalidEnvelope,
    );
    expect(parsed.identity).toEqual({
      jobId: "award:order-8812",
      tenantId: "t_42",
      correlationId: "award:order-8812",
    });
  });

  it("with a blank correlation_id and no job id, is correlated by the message id", () => {
    const parsed = poisonOf(
      parseMessage(body({ tenant_id: "t_42", correlation_id: " ", payload: {} }), payloadSchema, MESSAGE_ID),
      POISON_REASON.invalidEnvelope,
    );
    expect(parsed.identity).toEqual({ jobId: MESSAGE_ID, tenantId: "t_42", correlationId: MESSAGE_ID });
  });

  it("says which fields failed in the error's message", () => {
    const parsed = poisonOf(
      parseMessage(body({ job_id: 1, tenant_id: 2, payload: {} }), payloadSchema, MESSAGE_ID),
      POISON_REASON.invalidEnvelope,
    );
    expect(parsed.error.message).toContain("job_id");
    expect(parsed.error.message).toContain("tenant_id");
  });
});

describe("parseMessage: a payload the consumer's schema refuses", () => {
  it.each<[string, unknown]>([
    ["a wrong field type", { amount: "five" }],
    ["a missing field", {}],
    ["a number instead of an object", 5],
    ["null", null],
  ])("with %s is poison (invalid payload) with the envelope's identity", (_label, payload) => {
    const parsed = poisonOf(
      parseMessage(body({ ...validFields, payload }), payloadSchema, MESSAGE_ID),
      POISON_REASON.invalidPayload,
    );
    expect(parsed.identity).toEqual({
      jobId: "award:order-8812",
      tenantId: "t_42",
      correlationId: "req-7f3a",
    });
  });

  it("without a correlation_id, the poison is correlated by the job id", () => {
    const { correlation_id: _omitted, ...fields } = validFields;
    const parsed = poisonOf(
      parseMessage(body({ ...fields, payload: { amount: -1 } }), payloadSchema, MESSAGE_ID),
      POISON_REASON.invalidPayload,
    );
    expect(parsed.identity.correlationId).toBe("award:order-8812");
  });

  it("with a blank correlation_id, the poison is correlated by the job id", () => {
    const parsed = poisonOf(
      parseMessage(body({ ...validFields, correlation_id: "  ", payload: {} }), payloadSchema, MESSAGE_ID),
      POISON_REASON.invalidPayload,
    );
    expect(parsed.identity.correlationId).toBe("award:order-8812");
  });

  it("never throws for a schema that refuses with a custom check", () => {
    const schema = z.object({ amount: z.number() }).refine((p) => p.amount % 2 === 0, "amount must be even");
    const parsed = poisonOf(
      parseMessage(body({ ...validFields, payload: { amount: 3 } }), schema, MESSAGE_ID),
      POISON_REASON.invalidPayload,
    );
    expect(parsed.error.message).toContain("amount must be even");
  });
});

/** Code units of any kind, lone surrogates and U+0000 included. */
const anyUtf16 = fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)) });

/** A field value of an envelope: sometimes well-formed, often not. */
const fieldValue = fc.oneof(
  fc.string(),
  fc.string({ unit: "binary", maxLength: 300 }),
  anyUtf16,
  fc.constantFrom("", " ", "\t", "\u0000", "a\u0000", "\ud800", "x\udfff", "j".repeat(255), "j".repeat(256)),
  fc.integer(),
  fc.boolean(),
  fc.constant(null),
  fc.jsonValue(),
);

const envelopeLike = fc
  .record(
    {
      job_id: fieldValue,
      tenant_id: fieldValue,
      correlation_id: fieldValue,
      payload: fc.oneof(fc.jsonValue(), fc.record({ amount: fc.oneof(fc.integer(), fc.string()) })),
      extra: fc.jsonValue(),
    },
    { requiredKeys: [] },
  )
  .map((fields) => JSON.stringify(fields));

const anyBody = fc.oneof(
  fc.string(),
  fc.string({ unit: "binary" }),
  anyUtf16,
  fc.jsonValue().map((value) => JSON.stringify(value)),
  envelopeLike,
);

describe("parseMessage: properties", () => {
  it("property: never throws; poison is a PoisonMessageError with a storable job id", () => {
    fc.assert(
      fc.property(anyBody, (text) => {
        const parsed = parseMessage(text, payloadSchema, MESSAGE_ID);
        const { identity } = parsed;
        expect(typeof identity.jobId).toBe("string");
        expect(identity.jobId.length).toBeGreaterThan(0);
        expect(identity.jobId.length).toBeLessThanOrEqual(JOB_ID_MAX_LENGTH);
        expect(identity.jobId.includes("\u0000")).toBe(false);
        expect(identity.jobId.isWellFormed()).toBe(true);
        expect(identity.jobId).toMatch(/\S/);
        expect(identity.correlationId).toMatch(/\S/);
        expect(identity.correlationId.includes("\u0000")).toBe(false);
        expect(identity.correlationId.isWellFormed()).toBe(true);
        if (identity.tenantId !== null) {
          expect(identity.tenantId.includes("\u0000")).toBe(false);
          expect(identity.tenantId.isWellFormed()).toBe(true);
        }
        expect(identity.tenantId === null || typeof identity.tenantId === "string").toBe(true);
        if (parsed.ok) {
          expect(parsed.job.jobId).toBe(identity.jobId);
          expect(parsed.job.correlationId).toBe(identity.correlationId);
          expect(payloadSchema.safeParse(parsed.job.payload).success).toBe(true);
        } else {
          expect(parsed.error).toBeInstanceOf(PoisonMessageError);
          expect(Object.values(POISON_REASON)).toContain(parsed.error.reason);
        }
      }),
      { numRuns: 1000 },
    );
  });

  it("property: an envelope with a well-formed job id and tenant and a valid payload is a job", () => {
    const storable = fc
      .string({ unit: "binary", minLength: 1, maxLength: 255 })
      .filter((s) => !s.includes("\u0000") && s.isWellFormed() && s.length <= JOB_ID_MAX_LENGTH);
    const storableId = storable.filter((s) => /\S/.test(s));
    fc.assert(
      fc.property(storableId, storable, fc.integer({ min: 1, max: 1_000_000 }), (jobId, tenantId, amount) => {
        const parsed = parseMessage(
          body({ job_id: jobId, tenant_id: tenantId, payload: { amount } }),
          payloadSchema,
          MESSAGE_ID,
        );
        if (!parsed.ok) throw parsed.error;
        expect(parsed.job).toEqual({ jobId, tenantId, correlationId: jobId, payload: { amount } });
      }),
      { numRuns: 500 },
    );
  });
});
