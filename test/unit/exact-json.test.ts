import { describe, expect, it } from "vitest";
import { parseJsonExact } from "../../shared/db/exact-json.ts";

describe("parseJsonExact", () => {
  it.each([
    ['{"n":12345678901234567890123}', '{"n":12345678901234567890123}'],
    ['{"n":-9007199254740993}', '{"n":-9007199254740993}'],
    ['{"d":0.1000000000000000055511151231257827}', '{"d":0.1000000000000000055511151231257827}'],
    ['{"a":[1, 2.50, 1e400]}', '{"a":[1,2.50,1e400]}'],
    ['{"s":"12345678901234567890123","ok":7,"f":1.5}', '{"s":"12345678901234567890123","ok":7,"f":1.5}'],
  ])("keeps %s digit for digit through JSON.stringify", (text, expected) => {
    expect(JSON.stringify(parseJsonExact(text))).toBe(expected);
  });

  it("leaves numbers JavaScript represents exactly as plain numbers", () => {
    expect(parseJsonExact('{"a":1,"b":-2.5,"c":[0,3]}')).toEqual({ a: 1, b: -2.5, c: [0, 3] });
  });
});
