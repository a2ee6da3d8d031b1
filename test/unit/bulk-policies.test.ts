/**
 * The pure parts of bulk operations: sealing cursors and tokens, when a plan's token is required,
 * and chunk sizes. Packing sends by count and size is SQS's rule: test/unit/sqs-batches.test.ts.
 */

import { randomBytes } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  chunkPauseSeconds,
  chunkSize,
  MAX_CHUNK_PAUSE_SECONDS,
} from "../../shared/dead-letters/bulk-worker.ts";
import { confirmationRequired, issuePlanToken, readPlanToken } from "../../shared/dead-letters/plan-token.ts";
import { replayDecision } from "../../shared/dead-letters/replay.ts";
import { seal, sealKey, unseal } from "../../shared/dead-letters/seal.ts";
import { InvalidPlanTokenError, PlanExpiredError } from "../../shared/errors/bulk-operation.ts";

describe("the pause after a chunk", () => {
  it("is rows / rate, and never more than the cap whatever rate a row holds (1e-40 once overflowed PostgreSQL's interval)", () => {
    expect(chunkPauseSeconds(10, 10)).toBe(1);
    expect(chunkPauseSeconds(1, 0.01)).toBeCloseTo(100, 9);
    expect(chunkPauseSeconds(0, 1e-40)).toBe(0);
    for (const rate of [1e-40, 1.4e-45, Number.MIN_VALUE, 0, -1, Number.NaN]) {
      expect(chunkPauseSeconds(1, rate)).toBe(MAX_CHUNK_PAUSE_SECONDS);
    }
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 500 }), fc.double({ noNaN: false }), (rows, rate) => {
        const pause = chunkPauseSeconds(rows, rate);
        expect(Number.isFinite(pause) && pause >= 0 && pause <= MAX_CHUNK_PAUSE_SECONDS).toBe(true);
      }),
    );
  });
});

describe("seal", () => {
  const key = sealKey(randomBytes(32));

  it("opens what it sealed, for the same purpose and key only", () => {
    const sealed = seal(key, "p", { a: 1 });
    expect(unseal(key, "p", sealed)).toEqual({ a: 1 });
    expect(unseal(key, "q", sealed)).toBeUndefined();
    expect(unseal(sealKey(randomBytes(32)), "p", sealed)).toBeUndefined();
  });

  it("refuses any edit of a sealed value", () => {
    const sealed = seal(key, "p", { position: "2026-01-01T00:00:00.000000Z", id: "x" });
    fc.assert(
      fc.property(fc.nat({ max: sealed.length - 1 }), fc.constantFrom(..."AZaz09-_."), (at, c) => {
        fc.pre(sealed[at] !== c);
        const edited = `${sealed.slice(0, at)}${c}${sealed.slice(at + 1)}`;
        expect(unseal(key, "p", edited)).toBeUndefined();
      }),
    );
  });

  it("refuses keys shorter than 256 bits", () => {
    expect(() => sealKey("short")).toThrow(/at least 32 bytes/);
  });
});

describe("plan tokens", () => {
  const key = sealKey(randomBytes(32));
  const set = {
    kind: "replay" as const,
    matched: 12,
    checksum: "-42",
    bound: { createdAt: "2026-12-01T00:00:00.000001Z", id: "3f2b1c4d-1a2b-4c3d-9e8f-0123456789ab" },
  };
  const filter = { consumer: "c", error_kind: "hard" };

  it("confirms its set for its kind and filter (key order free) until it expires", () => {
    const now = Date.parse("2026-12-01T10:00:00Z");
    const { token, expiresAt } = issuePlanToken(key, set, filter, now);
    expect(expiresAt).toBe("2026-12-01T10:15:00.000Z");
    expect(readPlanToken(key, token, "replay", { error_kind: "hard", consumer: "c" }, now + 60_000)).toEqual(
      set,
    );
    expect(() => readPlanToken(key, token, "discard", filter, now)).toThrow(InvalidPlanTokenError);
    expect(() => readPlanToken(key, token, "replay", { consumer: "c" }, now)).toThrow(InvalidPlanTokenError);
    expect(() => readPlanToken(key, token, "replay", filter, now + 15 * 60_000)).toThrow(PlanExpiredError);
    expect(() => readPlanToken(sealKey(randomBytes(32)), token, "replay", filter, now)).toThrow(
      InvalidPlanTokenError,
    );
  });

  it("is a new token for every plan, even of the same set in the same second", () => {
    const now = Date.parse("2026-12-01T10:00:00Z");
    const a = issuePlanToken(key, set, filter, now).token;
    const b = issuePlanToken(key, set, filter, now).token;
    expect(a).not.toBe(b);
    expect(readPlanToken(key, a, "replay", filter, now)).toEqual(
      readPlanToken(key, b, "replay", filter, now),
    );
  });

  it("is required above the threshold and for every pending row, whatever the count", () => {
    expect(confirmationRequired(100, 1000, 100)).toBe(false);
    expect(confirmationRequired(101, 1000, 100)).toBe(true);
    expect(confirmationRequired(3, 3, 100)).toBe(true);
    expect(confirmationRequired(1, 1, 100)).toBe(true);
    expect(confirmationRequired(2, 3, 100)).toBe(false);
  });
});

describe("chunkSize", () => {
  it("is about a second of the rate, within the kind's bounds", () => {
    expect(chunkSize("replay", 0.2)).toBe(1);
    expect(chunkSize("replay", 50)).toBe(50);
    expect(chunkSize("replay", 1000)).toBe(100);
    expect(chunkSize("discard", 1000)).toBe(500);
    expect(chunkSize("discard", 7.5)).toBe(8);
  });
});

describe("replayDecision", () => {
  const fp = (n: number) => Buffer.alloc(16, n);
  it("sends without a fence, unless the row names a queue not registered for its consumer", () => {
    expect(replayDecision({ job_fingerprint: fp(1), queue_allowed: true }, undefined)).toBe("send");
    expect(replayDecision({ job_fingerprint: fp(1), queue_allowed: false }, undefined)).toBe("foreign-queue");
  });
  it("supersedes on this job's fence, whatever the queue (nothing is sent)", () => {
    expect(replayDecision({ job_fingerprint: fp(1), queue_allowed: false }, fp(1))).toBe("superseded");
    expect(replayDecision({ job_fingerprint: null, queue_allowed: true }, fp(1))).toBe("superseded");
    expect(replayDecision({ job_fingerprint: fp(1), queue_allowed: true }, null)).toBe("superseded");
  });
  it("is a conflict on another job's fence", () => {
    expect(replayDecision({ job_fingerprint: fp(1), queue_allowed: true }, fp(2))).toBe("conflict");
  });
});
