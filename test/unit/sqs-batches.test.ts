/**
 * SQS's SendMessageBatch rules (shared/sqs/batches.ts): packing by count and size, and a message's
 * size as SQS counts it. The producer and the replay sender both pack with these.
 */
import type { SendMessageBatchRequestEntry } from "@aws-sdk/client-sqs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type BatchLimits, messageSize, packBatches, SQS_SEND_LIMITS } from "../../shared/sqs/batches.ts";

const MiB = 1_048_576;

/** Packs message indexes by their sizes, as sendJobs does: the batches, and the oversize set apart. */
function plan(sizes: readonly number[], limits?: BatchLimits) {
  const packs = packBatches(
    sizes.map((_, index) => index),
    (index) => sizes[index] as number,
    limits,
  );
  return {
    batches: packs.flatMap((p) => (p.kind === "batch" ? [p.items] : [])),
    oversize: packs.flatMap((p) => (p.kind === "oversize" ? [p.item] : [])),
  };
}

describe("SQS_SEND_LIMITS", () => {
  it("is SQS's: 10 entries, 1 MiB a batch and 1 MiB a message", () => {
    expect(SQS_SEND_LIMITS).toEqual({ entries: 10, batchBytes: MiB, messageBytes: MiB });
    expect(Object.isFrozen(SQS_SEND_LIMITS)).toBe(true);
  });
});

describe("packBatches", () => {
  it("cuts by count: at most 10 entries a batch, in input order", () => {
    const packed = plan(Array.from({ length: 25 }, () => 100));
    expect(packed.batches.map((b) => b.length)).toEqual([10, 10, 5]);
    expect(packed.batches.flat()).toEqual(Array.from({ length: 25 }, (_, i) => i));
    expect(packed.oversize).toEqual([]);
  });

  it("cuts by size: a batch's total never exceeds 1 MiB, and a batch that is exactly 1 MiB is kept", () => {
    const quarter = MiB / 4;
    expect(plan([quarter, quarter, quarter, quarter, 1, quarter]).batches).toEqual([
      [0, 1, 2, 3],
      [4, 5],
    ]);
    expect(plan([MiB - 10, 11]).batches).toEqual([[0], [1]]);
    expect(plan([MiB - 10, 10]).batches).toEqual([[0, 1]]);
  });

  it("ten 300 KiB messages make four batches, not one", () => {
    const packs = packBatches(
      Array.from({ length: 10 }, () => 300 * 1024),
      (size) => size,
    );
    expect(packs.map((p) => (p.kind === "batch" ? p.items.length : 0))).toEqual([3, 3, 3, 1]);
  });

  it("sets apart a message over the single limit, and the others are still packed", () => {
    const packed = plan([10, MiB + 1, MiB, 10]);
    expect(packed.oversize).toEqual([1]);
    expect(packed.batches).toEqual([[0], [2], [3]]);
  });

  it("puts an oversize message in a pack of its own, without closing the batch being filled", () => {
    expect(packBatches([10, MiB + 1, 10], (size) => size)).toEqual([
      { kind: "oversize", item: MiB + 1 },
      { kind: "batch", items: [10, 10] },
    ]);
  });

  it("keeps to a lowered message limit (a queue's MaximumMessageSize)", () => {
    const packed = plan([1000, 1025, 1024], { ...SQS_SEND_LIMITS, messageBytes: 1024 });
    expect(packed.oversize).toEqual([1]);
    expect(packed.batches).toEqual([[0, 2]]);
  });

  it("packs each message once, batches in input order, within every limit", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: MiB + 250_000 }), { maxLength: 60 }), (sizes) => {
        const packs = packBatches(
          sizes.map((size, i) => ({ i, size })),
          (item) => item.size,
        );
        const flat = packs.flatMap((p) => (p.kind === "oversize" ? [p.item] : p.items));
        expect(flat.map((x) => x.i).sort((a, b) => a - b)).toEqual(sizes.map((_, i) => i));
        for (const pack of packs) {
          if (pack.kind === "oversize") {
            expect(pack.item.size).toBeGreaterThan(MiB);
            continue;
          }
          expect(pack.items.length).toBeGreaterThan(0);
          expect(pack.items.length).toBeLessThanOrEqual(10);
          expect(pack.items.reduce((sum, x) => sum + x.size, 0)).toBeLessThanOrEqual(MiB);
        }
        // Batches are in order: each batch's items come after the previous batch's.
        const batchOrder = packs.filter((p) => p.kind === "batch").flatMap((p) => p.items.map((x) => x.i));
        expect(batchOrder).toEqual([...batchOrder].sort((a, b) => a - b));
      }),
    );
  });
});

describe("messageSize", () => {
  it("counts the body's UTF-8 bytes and every attribute's name, type and value", () => {
    expect(messageSize({ MessageBody: "é" })).toBe(2);
    expect(
      messageSize({
        MessageBody: "abc",
        MessageAttributes: {
          trace: { DataType: "String", StringValue: "xyz" },
          blob: { DataType: "Binary", BinaryValue: new Uint8Array([1, 2]) },
        },
      }),
    ).toBe(3 + (5 + 6 + 3) + (4 + 6 + 2));
    expect(
      messageSize({
        MessageBody: "é€",
        MessageAttributes: {
          trace: { DataType: "String", StringValue: "abc" },
          blob: { DataType: "Binary", BinaryValue: new Uint8Array(7) },
        },
      }),
    ).toBe(2 + 3 + (5 + 6 + 3) + (4 + 6 + 7));
  });

  it("counts only the body and the message attributes of a full entry", () => {
    const entry: Omit<SendMessageBatchRequestEntry, "Id"> = {
      MessageBody: "abc",
      MessageGroupId: "g".repeat(128),
      MessageDeduplicationId: "d".repeat(128),
      DelaySeconds: 5,
    };
    expect(messageSize(entry)).toBe(3);
  });
});
