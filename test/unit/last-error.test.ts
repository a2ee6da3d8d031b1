import { describe, expect, it } from "vitest";
import { PermanentJobError, RetriesExhaustedError } from "../../shared/errors/job.ts";
import { describeError, LAST_ERROR_LIMITS } from "../../shared/errors/last-error.ts";

/** Like node-postgres: instances are named plain "error". */
class DatabaseError extends Error {
  override name = "error";
}

class UnnamedSubclassError extends Error {}

function errorWithStack(message: string, stack: string | undefined): Error {
  const error = new Error(message);
  error.stack = stack;
  return error;
}

describe("LAST_ERROR_LIMITS", () => {
  it("bounds the message to 2000 characters and the stack to 20 lines and 8000 characters", () => {
    expect(LAST_ERROR_LIMITS).toEqual({ message: 2000, stackLines: 20, stack: 8000, bytes: 12_288 });
  });
});

describe("describeError: the class", () => {
  it.each<[string, Error, string]>([
    ["a plain Error", new Error("x"), "Error"],
    ["a built-in subclass", new TypeError("x"), "TypeError"],
    ["a jobfence error", new PermanentJobError("x"), "PermanentJobError"],
    ["a subclass that keeps the name Error", new UnnamedSubclassError("x"), "UnnamedSubclassError"],
    ["an error named plain 'error' (node-postgres)", new DatabaseError("x"), "DatabaseError"],
    ["an Error given a custom name", Object.assign(new Error("x"), { name: "TimeoutError" }), "TimeoutError"],
  ])("of %s is %s", (_label, error, expected) => {
    expect(describeError(error).class).toBe(expected);
  });

  it("falls back to Error when neither the name nor the constructor names a class", () => {
    const error = Object.assign(new Error("x"), { name: "" });
    Object.defineProperty(error, "constructor", { value: undefined });
    expect(describeError(error).class).toBe("Error");
  });
});

describe("describeError: the message", () => {
  it("is the error's message", () => {
    expect(describeError(new Error("connection refused")).message).toBe("connection refused");
  });

  it("is kept whole at exactly the limit", () => {
    const message = "m".repeat(LAST_ERROR_LIMITS.message);
    expect(describeError(new Error(message)).message).toBe(message);
  });

  it("is cut to the limit with an ellipsis beyond it", () => {
    const described = describeError(new Error("m".repeat(LAST_ERROR_LIMITS.message * 3)));
    expect(described.message).toHaveLength(LAST_ERROR_LIMITS.message);
    expect(described.message).toBe(`${"m".repeat(LAST_ERROR_LIMITS.message - 1)}…`);
  });

  it("escapes U+0000 to the six characters \\u0000 (jsonb cannot hold it)", () => {
    const described = describeError(new Error("bad\u0000byte"));
    expect(described.message).toBe("bad\\u0000byte");
    expect(described.message.includes("\u0000")).toBe(false);
  });

  it("replaces a lone surrogate with U+FFFD", () => {
    expect(describeError(new Error("half \ud800 pair")).message).toBe("half \ufffd pair");
  });

  it("keeps non-ASCII text and valid surrogate pairs", () => {
    expect(describeError(new Error("naïve 🎉 Ω")).message).toBe("naïve 🎉 Ω");
  });

  it("appends a string code in brackets", () => {
    const error = Object.assign(new DatabaseError("duplicate key value"), { code: "23505" });
    expect(describeError(error)).toMatchObject({
      class: "DatabaseError",
      message: "duplicate key value [23505]",
    });
  });

  it.each<[string, unknown]>([
    ["a numeric code", 23505],
    ["a code longer than 16 characters", "X".repeat(17)],
    ["an object code", { sqlState: "23505" }],
  ])("ignores %s", (_label, code) => {
    const error = Object.assign(new Error("failed"), { code });
    expect(describeError(error).message).toBe("failed");
  });

  it("appends a code of exactly 16 characters", () => {
    const code = "C".repeat(16);
    const error = Object.assign(new Error("failed"), { code });
    expect(describeError(error).message).toBe(`failed [${code}]`);
  });
});

describe("describeError: the stack", () => {
  it("is recorded for an Error", () => {
    const error = new Error("boom");
    const described = describeError(error);
    expect(described.stack).toBeDefined();
    expect(described.stack?.split("\n")[0]).toBe("Error: boom");
  });

  it("is left out when the error has none", () => {
    expect(describeError(errorWithStack("boom", undefined))).toEqual({ class: "Error", message: "boom" });
    expect(describeError(errorWithStack("boom", ""))).not.toHaveProperty("stack");
  });

  it("keeps at most LAST_ERROR_LIMITS.stackLines lines", () => {
    const lines = Array.from({ length: 50 }, (_, i) => `    at frame${i} (file.ts:${i}:1)`);
    const described = describeError(errorWithStack("boom", ["Error: boom", ...lines].join("\n")));
    const kept = described.stack?.split("\n") ?? [];
    expect(kept).toHaveLength(LAST_ERROR_LIMITS.stackLines);
    expect(kept[0]).toBe("Error: boom");
    expect(kept.at(-1)).toBe(
      `    at frame${LAST_ERROR_LIMITS.stackLines - 2} (file.ts:${LAST_ERROR_LIMITS.stackLines - 2}:1)`,
    );
  });

  it("keeps a short stack whole", () => {
    const stack = "Error: boom\n    at one (a.ts:1:1)\n    at two (b.ts:2:2)";
    expect(describeError(errorWithStack("boom", stack)).stack).toBe(stack);
  });

  it("is cut to LAST_ERROR_LIMITS.stack characters with an ellipsis", () => {
    const lines = Array.from({ length: 10 }, () => `    at ${"f".repeat(2000)}`);
    const described = describeError(errorWithStack("boom", ["Error: boom", ...lines].join("\n")));
    expect(described.stack).toHaveLength(LAST_ERROR_LIMITS.stack);
    expect(described.stack?.endsWith("…")).toBe(true);
  });

  it("escapes U+0000 and replaces lone surrogates in the stack", () => {
    const described = describeError(errorWithStack("x", "Error: a\u0000b\n    at \udc00 (f.ts:1:1)"));
    expect(described.stack).toBe("Error: a\\u0000b\n    at \ufffd (f.ts:1:1)");
  });
});

describe("describeError: values that are not Errors", () => {
  it.each<[string, unknown, { class: string; message: string }]>([
    ["a string", "disk full", { class: "string", message: "disk full" }],
    ["a number", 42, { class: "number", message: "42" }],
    ["undefined", undefined, { class: "undefined", message: "undefined" }],
    ["null", null, { class: "object", message: "null" }],
    ["an object", { reason: "nope" }, { class: "object", message: "[object Object]" }],
    [
      "an object with its own toString",
      { toString: () => "custom failure" },
      { class: "object", message: "custom failure" },
    ],
    ["a boolean", false, { class: "boolean", message: "false" }],
  ])("describes %s by its type and text, without a stack", (_label, value, expected) => {
    expect(describeError(value)).toEqual(expected);
  });

  it("describes an object that cannot be turned into text as unprintable", () => {
    expect(describeError(Object.create(null))).toEqual({ class: "object", message: "(unprintable)" });
    const hostile = {
      toString() {
        throw new Error("no");
      },
    };
    expect(describeError(hostile)).toEqual({ class: "object", message: "(unprintable)" });
  });

  it("bounds and sanitises a thrown string", () => {
    const described = describeError(`\u0000${"s".repeat(5000)}`);
    expect(described.message).toHaveLength(LAST_ERROR_LIMITS.message);
    expect(described.message.startsWith("\\u0000sss")).toBe(true);
    expect(described.message.endsWith("…")).toBe(true);
  });

  it("describes an error-like object that is not an Error instance by its type", () => {
    const described = describeError({ name: "FakeError", message: "looks like one" });
    expect(described.class).toBe("object");
    expect(described).not.toHaveProperty("stack");
  });
});

describe("describeError: unwrapCause", () => {
  it("describes the cause a wrapper carries", () => {
    const cause = Object.assign(new DatabaseError("could not obtain lock"), { code: "55P03" });
    const described = describeError(new RetriesExhaustedError(5, cause), { unwrapCause: true });
    expect(described).toMatchObject({ class: "DatabaseError", message: "could not obtain lock [55P03]" });
    expect(described.stack?.split("\n")[0]).toBe("error: could not obtain lock");
  });

  it("without the option, describes the wrapper itself", () => {
    const described = describeError(new RetriesExhaustedError(5, new TypeError("inner")));
    expect(described).toMatchObject({ class: "RetriesExhaustedError", message: "gave up after attempt 5" });
  });

  it("describes a cause that is not an Error by its type", () => {
    const described = describeError(new Error("outer", { cause: "socket hang up" }), { unwrapCause: true });
    expect(described).toEqual({ class: "string", message: "socket hang up" });
  });

  it("describes the error itself when it has no cause", () => {
    expect(describeError(new TypeError("alone"), { unwrapCause: true })).toMatchObject({
      class: "TypeError",
      message: "alone",
    });
  });

  it("unwraps one level only", () => {
    const inner = new RangeError("innermost");
    const middle = new TypeError("middle", { cause: inner });
    expect(describeError(new Error("outer", { cause: middle }), { unwrapCause: true })).toMatchObject({
      class: "TypeError",
      message: "middle",
    });
  });

  it("does not unwrap a value that is not an Error", () => {
    expect(describeError({ cause: new Error("x") }, { unwrapCause: true }).class).toBe("object");
  });
});
