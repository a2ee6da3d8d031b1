/**
 * The OpenAPI document passes Spectral's `spectral:oas` ruleset without a single result: no error,
 * no warning, not even an info or a hint. `npm run lint` runs the same ruleset through Spectral's
 * command line on docs/openapi.json (.spectral.yaml); this file runs it in-process on what
 * buildOpenApiDocument() gives, so a route added without a description or a tag, or a permission
 * no scheme declares, fails the unit tests before it reaches the committed file.
 */
import { readFileSync } from "node:fs";
// CommonJS packages: Node 24's ESM loader finds these two names in them (it does not find every
// export of every Spectral package: spectral-parsers' `Json`, for one).
import { type RulesetDefinition, Spectral } from "@stoplight/spectral-core";
import { oas } from "@stoplight/spectral-rulesets";
import { describe, expect, it } from "vitest";
import { buildOpenApiDocument } from "../../functions/dead-letters-api/openapi.ts";

const root = new URL("../../", import.meta.url);

/** Spectral's results for `document` under the `spectral:oas` ruleset, as readable lines. */
async function lint(document: object): Promise<string[]> {
  const spectral = new Spectral();
  // The ruleset's own declaration is looser than RulesetDefinition (its rules' `then` is inferred).
  spectral.setRuleset({ extends: [oas as RulesetDefinition] });
  // A plain object is serialised and parsed by Spectral itself, so results carry their paths.
  const results = await spectral.run(document as Record<string, unknown>);
  return results.map(
    (result) => `${result.code} (severity ${result.severity}) at ${result.path.join(".")}: ${result.message}`,
  );
}

describe("the OpenAPI document under Spectral's spectral:oas ruleset", () => {
  it("has no result at all", async () => {
    expect(await lint(buildOpenApiDocument())).toEqual([]);
  });

  it("is the committed file's ruleset, with no rule switched off", () => {
    // Comments aside, the file says only this: fixing the document, not silencing a rule, is how
    // a result goes away.
    const lines = readFileSync(new URL(".spectral.yaml", root), "utf8")
      .split("\n")
      .map((line) => line.trim())
      .filter((line) => line !== "" && !line.startsWith("#"));
    expect(lines).toEqual(['extends: ["spectral:oas"]']);
  });

  it("is run by `npm run lint` (what CI runs) on the committed document, failing on any warning", () => {
    const { scripts } = JSON.parse(readFileSync(new URL("package.json", root), "utf8")) as {
      scripts: Record<string, string>;
    };
    expect(scripts.lint?.split(" && ")).toContain("npm run lint:openapi");
    expect(scripts["lint:openapi"]).toBe(
      "spectral lint --ruleset .spectral.yaml --fail-severity=warn docs/openapi.json",
    );
  });

  it("still finds what it should (a document missing its tags and servers is not clean)", async () => {
    const { servers: _servers, ...withoutServers } = buildOpenApiDocument() as Record<string, unknown>;
    expect((await lint(withoutServers)).join("\n")).toContain("oas3-api-servers");
  });
});
