/** `npm run release` refuses a tree it cannot release, each problem named. */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { releaseProblems } from "../../scripts/release-checks.ts";

const CHANGELOG = "# Changelog\n\n## Unreleased\n\n## 0.2.0 — later\n\n## 0.1.0 — first release\n";

describe("releaseProblems", () => {
  it("accepts a clean tree whose version has an entry and no tag", () => {
    expect(releaseProblems("0.2.0", CHANGELOG, "", ["v0.1.0"])).toEqual([]);
  });

  it("refuses a dirty tree, a version without an entry, a tagged version and a version that is not one", () => {
    expect(releaseProblems("0.3.0", CHANGELOG, " M package.json", ["v0.3.0"])).toEqual([
      expect.stringMatching(/working tree has changes/),
      expect.stringMatching(/no "## 0\.3\.0" entry/),
      expect.stringMatching(/tag v0\.3\.0 exists/),
    ]);
    expect(releaseProblems("1.0", CHANGELOG, "", [])).toEqual([
      expect.stringMatching(/not a semantic version/),
      expect.stringMatching(/no "## 1\.0" entry/),
    ]);
    // "## 0.1.0" must not match an entry for 0.1.01 or a version that merely starts the same.
    expect(releaseProblems("0.1.01", CHANGELOG, "", [])).toEqual([
      expect.stringMatching(/no "## 0\.1\.01" entry/),
    ]);
  });

  it("finds the repository's own version in its CHANGELOG", () => {
    const { version } = JSON.parse(readFileSync("package.json", "utf8")) as { version: string };
    expect(releaseProblems(version, readFileSync("CHANGELOG.md", "utf8"), "", [])).toEqual([]);
  });
});
