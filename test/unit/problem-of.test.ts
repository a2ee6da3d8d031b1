/**
 * How errors become problems: what a client can fix is 4xx, what asks for the same request again is
 * 503 with Retry-After, and only our own faults are 500.
 */
import { describe, expect, it } from "vitest";
import { problemOf } from "../../shared/http/problem-details.ts";

const pgError = (code: string) => Object.assign(new Error(`database said ${code}`), { code });

describe("problemOf", () => {
  it.each([
    ["55P03", "lock timeout"],
    ["57014", "statement timeout"],
    ["40001", "serialization failure"],
    ["40P01", "deadlock"],
    ["08006", "connection failure"],
    ["53300", "too many connections"],
    ["57P01", "admin shutdown"],
  ])("%s (%s) asks for the request again: 503 with Retry-After", (code) => {
    const problem = problemOf(pgError(code));
    expect(problem.status).toBe(503);
    expect(problem.headers["retry-after"]).toBe("5");
  });

  it("a data exception or a CHECK is the client's: 400", () => {
    expect(problemOf(pgError("22P02")).status).toBe(400);
    expect(problemOf(pgError("23514")).status).toBe(400);
  });

  it("anything else is ours: 500", () => {
    expect(problemOf(pgError("XX000")).status).toBe(500);
    expect(problemOf(new TypeError("undefined is not a function")).status).toBe(500);
  });
});
