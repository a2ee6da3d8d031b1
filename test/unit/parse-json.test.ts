/**
 * Reading JSON correctly on a runtime whose JSON.parse misreads escaped keys (Node 24 and 26,
 * nodejs/node#63785): parseJson, the strict parser behind it, the envelope read through it, and
 * the start-up probe and report. The reproductions fail with a plain JSON.parse on Node 24, which
 * is what the suite runs on.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { parseJsonExact } from "../../shared/db/exact-json.ts";
import { parseMessage } from "../../shared/envelope/envelope.ts";
import { jobFingerprint } from "../../shared/envelope/fingerprint.ts";
import { reportJsonRuntime } from "../../shared/envelope/json-runtime-report.ts";
import {
  hasEscapedKey,
  parseJson,
  parseJsonStrict,
  runtimeMisreadsJsonKeys,
} from "../../shared/envelope/parse-json.ts";
import { METRIC } from "../../shared/metrics/names.ts";
import { jobEnvelope } from "../../shared/producer/job-envelope.ts";

/** A key made fresh for each use, so no earlier parse in the process has left its shape. */
let fresh = 0;
const freshKey = () => `parse-json-test-${++fresh}`;

/** Keys from a few characters that collide under the misread: backslash, quote, slash, `B`… */
const collidingKey = fc.string({
  unit: fc.constantFrom("\\", '"', "/", "B", "u", "0", "a", "\n", "\u0000", "\ud800", "é"),
  maxLength: 3,
});
/** JSON values whose keys are mostly colliding ones, shallow and small. */
const collidingJson = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.oneof(fc.constant(null), fc.boolean(), fc.integer(), fc.string({ maxLength: 3 })),
    fc.array(tie("value"), { maxLength: 3 }),
    fc.dictionary(fc.oneof(collidingKey, fc.string({ maxLength: 3 })), tie("value"), { maxKeys: 4 }),
  ),
})).value;

/**
 * JSON text of `value` with each string character written as a `\u` escape when `escape` says so
 * (as a producer that escapes all non-ASCII does, Python's json.dumps by default). Recursive: for
 * the small values of these tests.
 */
function escapedText(value: unknown, escapes: (char: number) => boolean): string {
  if (typeof value === "string") {
    let out = '"';
    for (let i = 0; i < value.length; i++) {
      const char = value.charCodeAt(i);
      const forced = char < 0x20 || char === 0x22 || char === 0x5c || (char >= 0xd800 && char <= 0xdfff);
      if (forced || escapes(char)) out += `\\u${char.toString(16).padStart(4, "0")}`;
      else out += value[i];
    }
    return `${out}"`;
  }
  if (Array.isArray(value)) return `[${value.map((v) => escapedText(v, escapes)).join(",")}]`;
  if (typeof value === "object" && value !== null) {
    return `{${Object.entries(value)
      .map(([k, v]) => `${escapedText(k, escapes)}:${escapedText(v, escapes)}`)
      .join(",")}}`;
  }
  return JSON.stringify(value);
}

/** The same value, as JSON.stringify writes it (keys in order): JSON.stringify has no such bug. */
const same = (actual: unknown, expected: unknown) =>
  expect(JSON.stringify(actual)).toBe(JSON.stringify(expected));

describe("parseJson: the reproduction", () => {
  it("reads an escaped key after an earlier object with a similar escaped key", () => {
    JSON.parse('{"x":0,"\\\\":0}');
    expect(Object.keys(parseJson('{"x":0,"\\"":0}') as object)).toEqual(["x", '"']);
    JSON.parse('{"y":0,"\\\\":0}');
    expect(Object.keys(parseJson('{"y":0,"\\u0042":0}') as object)).toEqual(["y", "B"]);
    JSON.parse('{"z":0,"\\\\":0}');
    expect(Object.keys(parseJson('{"z":0,"\\/":0}') as object)).toEqual(["z", "/"]);
    JSON.parse('{"w":0,"a\\\\":0}');
    expect(Object.keys(parseJson('{"w":0,"a\\u0062":0}') as object)).toEqual(["w", "ab"]);
  });

  it("keeps numbers exact on the strict path as on the fast one", () => {
    JSON.parse('{"e":0,"\\\\":0}');
    const text = '{"e":0,"\\"":12345678901234567890,"d":1.0,"n":-0}';
    const read = parseJsonExact(text) as Record<string, unknown>;
    expect(Object.keys(read)).toEqual(["e", '"', "d", "n"]);
    expect(JSON.stringify(read)).toBe('{"e":0,"\\"":12345678901234567890,"d":1.0,"n":-0}');
    expect(JSON.stringify(parseJsonExact('{"k":12345678901234567890,"d":1.0}'))).toBe(
      '{"k":12345678901234567890,"d":1.0}',
    );
  });
});

describe("the envelope is read correctly in a warm container", () => {
  const schema = z.record(z.string(), z.number());

  it("a conflicting job under a used job id is not read as its predecessor", () => {
    // The predecessor, read first as a warm container would have read it.
    // (The misread needs a key before the escaped one: a first key is read correctly.)
    const first = parseMessage(
      '{"job_id":"j-1","tenant_id":"t","payload":{"cents":1,"\\\\":1}}',
      schema,
      "m-1",
    );
    const second = parseMessage(
      '{"job_id":"j-1","tenant_id":"t","payload":{"cents":1,"\\"":1}}',
      schema,
      "m-2",
    );
    if (!first.ok || !second.ok) throw new Error("both are valid jobs");
    expect(Object.keys(first.job.payload)).toEqual(["cents", "\\"]);
    expect(Object.keys(second.job.payload)).toEqual(["cents", '"']);
    // The fence tells them apart: different fingerprints, a conflict rather than a duplicate.
    expect(jobFingerprint("t", second.envelopePayload)).not.toEqual(
      jobFingerprint("t", first.envelopePayload),
    );
  });

  it("the producer checks the payload the consumer will read", () => {
    const keys = z.object({ cents: z.number(), '"': z.number() }).strict();
    JSON.parse('{"job_id":0,"tenant_id":0,"payload":{"cents":0,"\\\\":1}}');
    // A strict schema refuses the payload as misread (the key `\\` where `"` was sent).
    const payload = { cents: 1, '"': 1 };
    expect(jobEnvelope(keys, { jobId: "j", tenantId: "t", payload })).toEqual({
      job_id: "j",
      tenant_id: "t",
      payload,
    });
  });
});

describe("parseJson: properties", () => {
  it("reads JSON.stringify's text of any value as that value, after any poisoning parse", () => {
    fc.assert(
      fc.property(collidingJson, collidingJson, (poison, value) => {
        JSON.parse(JSON.stringify(poison));
        same(parseJson(JSON.stringify(value)), value);
        same(parseJsonStrict(JSON.stringify(value)), value);
      }),
      { numRuns: 300 },
    );
  });

  it("reads texts that write characters as \\u escapes, as Python's json.dumps does", () => {
    fc.assert(
      fc.property(collidingJson, collidingJson, fc.integer(), (poison, value, seed) => {
        const escapes = (char: number) => (char * 31 + seed) % 3 === 0 || char > 0x7f;
        JSON.parse(escapedText(poison, escapes));
        const text = escapedText(value, escapes);
        same(parseJson(text), value);
        same(parseJson(text, { exactNumbers: true }), value);
      }),
      { numRuns: 300 },
    );
  });

  it("reads any JSON value as JSON.stringify wrote it, with its key order and own __proto__ keys", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), (value) => {
        same(parseJson(JSON.stringify(value)), value);
        same(parseJsonStrict(JSON.stringify(value, null, 2)), value);
      }),
    );
  });

  it("finds an escaped key exactly where a key is written with a backslash", () => {
    fc.assert(
      fc.property(collidingJson, (value) => {
        const text = JSON.stringify(value);
        const keys: string[] = [];
        const walk = (v: unknown): void => {
          if (Array.isArray(v)) v.forEach(walk);
          else if (typeof v === "object" && v !== null) {
            for (const [k, member] of Object.entries(v)) {
              keys.push(k);
              walk(member);
            }
          }
        };
        walk(value);
        expect(hasEscapedKey(text)).toBe(keys.some((k) => JSON.stringify(k).includes("\\")));
      }),
    );
  });
});

describe("parseJson: fast path and edges", () => {
  it("tells escapes in values from escapes in keys", () => {
    expect(hasEscapedKey('{"a":"\\n","b":1}')).toBe(false);
    expect(hasEscapedKey('{"a":"x\\": 1","b":"\\\\"}')).toBe(false);
    expect(hasEscapedKey('{"a":"\\\\", "b\\n" :1}')).toBe(true);
    expect(hasEscapedKey('{"a":{"\\u0041"\n:1}}')).toBe(true);
    expect(hasEscapedKey('["\\u0041"]')).toBe(false);
    expect(hasEscapedKey('{"a":1}')).toBe(false);
    expect(hasEscapedKey('{"a\\')).toBe(true); // unterminated: the strict parser refuses it
  });

  it("reads bodies nested 20,000 deep with an escaped key, without overflowing the stack", () => {
    const depth = 20_000;
    const text = `${'{"\\u0061":['.repeat(depth)}1${"]}".repeat(depth)}`;
    let node = parseJson(text);
    for (let i = 0; i < depth; i++) node = (node as { a: unknown[] }).a[0];
    expect(node).toBe(1);
    expect(() => parseJson(`${'{"\\u0061":['.repeat(depth)}1${"]}".repeat(depth - 1)}`)).toThrow(SyntaxError);
  });

  it("refuses what JSON.parse refuses, on the strict path too", () => {
    for (const text of [
      '{"\\u0061":1,}',
      '{"\\u0061":01}',
      '{"\\u0061":"\t"}',
      '{"\\x":1}',
      '{"\\u00g1":1}',
      '{"\\u0061":1} x',
      '{"\\u0061" 1}',
      '{"\\u0061":[1,]}',
      '{"\\u0061":tru}',
      '{"\\u0061":-}',
      '{"\\u0061":1',
    ]) {
      expect(() => JSON.parse(text), text).toThrow(SyntaxError);
      expect(() => parseJson(text), text).toThrow(SyntaxError);
    }
  });

  it("reads a body whose text is not a string as JSON.parse would", () => {
    expect(() => parseJson(undefined as unknown as string)).toThrow(SyntaxError);
    expect(parseJson(12 as unknown as string)).toBe(12);
  });
});

describe("the start-up probe and report", () => {
  it("answers as the reproduction does on this runtime", () => {
    const key = freshKey();
    JSON.parse(`{"${key}":0,"\\\\":0}`);
    const misreads = Object.keys(JSON.parse(`{"${key}":0,"\\"":0}`) as object)[1] !== '"';
    expect(runtimeMisreadsJsonKeys()).toBe(misreads);
    // Node 24 and 26 are affected, 20 and 22 are not (as of this writing).
    const major = Number(process.versions.node.split(".")[0]);
    if (major === 20 || major === 22) expect(misreads).toBe(false);
    if (major === 24) expect(misreads).toBe(true);
  });

  it("logs one line naming the runtime and adds the metric", () => {
    const lines: { level: string; message: string; fields: Record<string, unknown> }[] = [];
    const metrics: [string, string, number][] = [];
    const logger = {
      info: (message: string, fields: Record<string, unknown>) =>
        lines.push({ level: "info", message, fields }),
      warn: (message: string, fields: Record<string, unknown>) =>
        lines.push({ level: "warn", message, fields }),
    };
    const misreads = reportJsonRuntime({
      logger: logger as never,
      metrics: {
        addMetric: (name: string, unit: string, value: number) => metrics.push([name, unit, value]),
      } as never,
    });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: misreads ? "warn" : "info",
      fields: { node: process.version, v8: process.versions.v8, json_key_misread: misreads },
    });
    expect(metrics).toEqual([[METRIC.runtimeJsonKeyMisread, "Count", misreads ? 1 : 0]]);
  });
});
