import { createHash } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { FINGERPRINT_BYTES, fingerprintHex, jobFingerprint } from "../../shared/envelope/fingerprint.ts";
import { CanonicalJsonError } from "../../shared/errors/job.ts";

const TENANT = "t_42";

/** Fingerprints of the payloads JSON.parse reads from `texts`, as hex for readable failures. */
function fingerprintsOf(tenantId: string, ...texts: string[]): (string | null)[] {
  return texts.map((text) => fingerprintHex(jobFingerprint(tenantId, JSON.parse(text))));
}

describe("FINGERPRINT_BYTES", () => {
  it("is 16: the first 128 bits of SHA-256", () => {
    expect(FINGERPRINT_BYTES).toBe(16);
  });
});

describe("jobFingerprint", () => {
  it("is the first 16 bytes of SHA-256 over the canonical JSON of tenant and payload", () => {
    const fingerprint = jobFingerprint(TENANT, { amount: 5 });
    expect(Buffer.isBuffer(fingerprint)).toBe(true);
    expect(fingerprint).toHaveLength(FINGERPRINT_BYTES);
    const canonical = '{"payload":{"amount":5},"tenant_id":"t_42"}';
    expect(fingerprint).toEqual(createHash("sha256").update(canonical).digest().subarray(0, 16));
  });

  it("is pinned: changing how it is computed would make every stored fingerprint disagree", () => {
    expect(fingerprintHex(jobFingerprint(TENANT, { amount: 5 }))).toBe("38ab5c4a9b7436e86507b4dbd5a4e4d1");
  });

  it("does not depend on key order or whitespace", () => {
    const [first, ...rest] = fingerprintsOf(
      TENANT,
      '{"a":1,"b":[1,{"c":"x","d":null}]}',
      '{"b":[1,{"d":null,"c":"x"}],"a":1}',
      ' {\n\t"b" : [ 1 , { "d" : null , "c" : "x" } ] ,\r\n "a" : 1 } ',
    );
    for (const other of rest) expect(other).toBe(first);
  });

  it("does not depend on how a number is spelled", () => {
    const [first, ...rest] = fingerprintsOf(
      TENANT,
      '{"a":1}',
      '{"a":1.0}',
      '{"a":1e0}',
      '{"a":10E-1}',
      '{"a":1.000}',
    );
    for (const other of rest) expect(other).toBe(first);
  });

  it("keeps shuffled and re-indented copies of any payload together", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), fc.string({ maxLength: 8 }), (payload, tenantId) => {
        const respelled = JSON.parse(JSON.stringify(payload, null, 2));
        expect(jobFingerprint(tenantId, respelled)).toEqual(jobFingerprint(tenantId, payload));
      }),
    );
  });

  it("differs for a different tenant", () => {
    expect(jobFingerprint("t_1", { amount: 5 })).not.toEqual(jobFingerprint("t_2", { amount: 5 }));
  });

  it.each([
    ['{"amount":5}', '{"amount":6}'],
    ['{"amount":5}', '{"amount":"5"}'],
    ['{"amount":5}', '{"amount":5,"note":null}'],
    ["{}", "[]"],
    ["[1,2]", "[2,1]"],
    ["null", '"null"'],
    ['""', "null"],
  ])("differs for payloads %s and %s", (a, b) => {
    const [first, second] = fingerprintsOf(TENANT, a, b);
    expect(first).not.toBe(second);
  });

  it("cannot confuse tenant and payload", () => {
    expect(jobFingerprint("a", "b")).not.toEqual(jobFingerprint("b", "a"));
  });

  it("keeps lone surrogates apart from each other and from U+FFFD (the canonical form escapes them)", () => {
    const fingerprints = ["\ud800", "\udc00", "\ufffd", "\ud800\udc00"].map((payload) =>
      fingerprintHex(jobFingerprint(TENANT, payload)),
    );
    expect(new Set(fingerprints).size).toBe(fingerprints.length);
  });

  it("compares integers beyond 2^53 as IEEE doubles, as RFC 8785 does: carry such digits as strings", () => {
    const [asNumbers, asNumbersToo] = fingerprintsOf(
      TENANT,
      '{"n":9007199254740993}',
      '{"n":9007199254740992}',
    );
    expect(asNumbers).toBe(asNumbersToo);
    const [asStrings, asStringsToo] = fingerprintsOf(
      TENANT,
      '{"n":"9007199254740993"}',
      '{"n":"9007199254740992"}',
    );
    expect(asStrings).not.toBe(asStringsToo);
  });

  it.each<[string, unknown, string]>([
    ["a bigint", { items: [1, 2n] }, "$.payload.items[1] is a bigint"],
    ["a Date", { at: new Date(0) }, "$.payload.at is an instance of Date"],
    ["NaN", Number.NaN, "$.payload is NaN"],
    ["undefined", undefined, "$.payload is undefined"],
  ])("refuses a payload holding %s, naming its path", (_label, payload, expected) => {
    let thrown: unknown;
    try {
      jobFingerprint(TENANT, payload);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(CanonicalJsonError);
    expect((thrown as CanonicalJsonError).message.startsWith(expected), String(thrown)).toBe(true);
  });
});

describe("fingerprintHex", () => {
  it("is 32 lowercase hex digits for a fingerprint", () => {
    const fingerprint = jobFingerprint(TENANT, { amount: 5 });
    expect(fingerprintHex(fingerprint)).toMatch(/^[0-9a-f]{32}$/);
    expect(fingerprintHex(fingerprint)).toBe(fingerprint.toString("hex"));
  });

  it("is null when there is no fingerprint", () => {
    expect(fingerprintHex(null)).toBeNull();
    expect(fingerprintHex(undefined)).toBeNull();
  });
});
