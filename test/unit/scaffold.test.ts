/**
 * What `npm run new-consumer` refuses, before it writes anything: names the registry could derive
 * no valid identifier from, names whose schema PostgreSQL or jobfence already owns, and a name
 * already registered or sharing another consumer's export name. And where it puts the new entry.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { consumerNameProblem, REPOSITORY_ROOT } from "../../functions/registry.ts";
import { ScaffoldError, scaffoldConsumer } from "../../functions/scaffold.ts";

const REGISTRY = readFileSync(join(REPOSITORY_ROOT, "functions/consumers.ts"), "utf8");
const nothingExists = () => false;
const refusal = (name: string, registry = REGISTRY) => {
  try {
    scaffoldConsumer(name, registry, nothingExists);
  } catch (error) {
    expect(error).toBeInstanceOf(ScaffoldError);
    return (error as Error).message;
  }
  throw new Error(`${name} was not refused`);
};

describe("the scaffold refuses", () => {
  it.each(["a-", "b--c", "-a", "A-b", "1a", "a_b", "x".repeat(64)])(
    "%s: no valid export name, schema or role derives from it",
    (name) => {
      expect(refusal(name)).toMatch(/must be words of lowercase letters and digits joined by single dashes/);
    },
  );

  it("takes a name that is a property of every object for what it is: a name", () => {
    expect(consumerNameProblem("constructor")).toBeUndefined();
    expect(consumerNameProblem("to-string")).toBeUndefined();
  });

  it("core and create: reserved, the registry would clash with the library", () => {
    expect(refusal("core")).toMatch(/reserved: its migration set would be the library's own/);
    expect(refusal("create")).toMatch(/reserved: .*createConsumer/);
  });

  it.each(["pg-x", "public", "information-schema"])("%s: PostgreSQL owns its schema", (name) => {
    expect(refusal(name)).toMatch(/which PostgreSQL or jobfence already uses/);
  });

  it("a consumer already registered, and one that would share another's export name", () => {
    expect(refusal("award-points")).toBe(
      "consumer award-points is already registered in functions/consumers.ts",
    );
    const withAB1 = scaffoldConsumer("a-b-1", REGISTRY, nothingExists).registry;
    expect(refusal("a-b1", withAB1)).toMatch(/already imports a consumer exported as aB1Consumer/);
  });

  it("a folder or test already there", () => {
    expect(() =>
      scaffoldConsumer("record-payment", REGISTRY, (p) => p === "functions/record-payment"),
    ).toThrow(/functions\/record-payment already exists/);
  });
});

describe("the scaffold", () => {
  it("adds the import beside the other consumers' and the entry at the end of the list", () => {
    const { registry, files } = scaffoldConsumer("record-payment", REGISTRY, nothingExists);
    expect(registry).toContain('import { recordPaymentConsumer } from "./record-payment/consumer.ts";');
    const list = registry.slice(registry.indexOf("export const CONSUMERS"));
    expect(list.slice(0, list.indexOf("\n];"))).toMatch(
      /definition: recordPaymentConsumer,[\s\S]*maxConcurrency: 2,\n {2}},$/,
    );
    expect(files.map((f) => f.path)).toEqual([
      "functions/record-payment/consumer.ts",
      "functions/record-payment/handler.ts",
      "functions/record-payment/migrations/0001_record_payment.sql",
      "test/consumers/record-payment.test.ts",
    ]);
  });

  it("grants a long name's tables to the role the database derives, digest and all", () => {
    const name = `settle-${"x".repeat(40)}`;
    const { files } = scaffoldConsumer(name, REGISTRY, nothingExists);
    const migration = files.find((f) => f.path.endsWith(".sql"))?.text ?? "";
    expect(migration).toMatch(/TO jobfence_consumer_settle_x+_[0-9a-f]{12};/);
    expect(consumerNameProblem(name)).toBeUndefined();
  });
});
