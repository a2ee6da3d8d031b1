/**
 * Regressions for bugs found by the property tests of the pure modules; each case failed before
 * its fix.
 */
import { describe, expect, it } from "vitest";
import { envelopeSchema } from "../../shared/envelope/envelope.ts";
import { describeError, LAST_ERROR_LIMITS } from "../../shared/errors/last-error.ts";
import { queueUrlFromArn } from "../../shared/sqs/queue-url.ts";

const bytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value), "utf8");

describe("describeError", () => {
  it("cuts a message without leaving half of a surrogate pair", () => {
    const { message, stack } = describeError(new Error(`${"a".repeat(1998)}${"😀".repeat(5)}`));
    expect(message.isWellFormed()).toBe(true);
    expect(stack?.isWellFormed() ?? true).toBe(true);
    expect(describeError(`${"b".repeat(1999)}😀`).message.isWellFormed()).toBe(true);
  });

  it.each([
    ["CJK characters (3 bytes each)", "一".repeat(10_000)],
    ["quotes (escaped to 2 bytes)", '"'.repeat(10_000)],
    ["control characters (escaped to 6 bytes)", "\u0001".repeat(10_000)],
  ])("keeps the serialised error within the byte budget for %s", (_, text) => {
    const error = new Error(text);
    error.stack = `Error: ${text}\n${`    at f (${text.slice(0, 300)})\n`.repeat(19)}`;
    const described = describeError(error);
    expect(bytes(described)).toBeLessThanOrEqual(LAST_ERROR_LIMITS.bytes);
    expect(described.message.length).toBeGreaterThan(0);
  });

  it("keeps a code suffix within the message bound", () => {
    const error = Object.assign(new Error("m".repeat(5000)), { code: "ECONNRESET" });
    const { message } = describeError(error);
    expect(message.length).toBeLessThanOrEqual(LAST_ERROR_LIMITS.message);
    expect(message.endsWith(" [ECONNRESET]")).toBe(true);
  });
});

describe("queueUrlFromArn", () => {
  it.each(["arn:aws:sqs:::q", "arn:aws:sqs:eu-west-1::q", "arn:aws:sqs::123:q", "arn::sqs:eu-west-1:123:q"])(
    "refuses %s, which lacks a part",
    (arn) => {
      expect(() => queueUrlFromArn(arn)).toThrow();
    },
  );
});

describe("envelope job_id length", () => {
  const envelope = (jobId: string) => ({ job_id: jobId, tenant_id: "t", payload: {} });
  it("counts characters as the database does (code points), not UTF-16 units", () => {
    expect(envelopeSchema.safeParse(envelope("😀".repeat(255))).success).toBe(true);
    expect(envelopeSchema.safeParse(envelope("😀".repeat(256))).success).toBe(false);
  });
});
