/**
 * The tiers and projects of the suite (vitest.config.ts): how a file is classified from its imports,
 * what the full tier holds, and how sizes follow the tier.
 */
import { readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  classifyTestFiles,
  DATABASE_MODULE,
  FULL_TIER_FILES,
  importedSpecifiers,
  reachedModules,
} from "../support/test-files.ts";
import { STACK_MODULE, startOrder, startsTheStack } from "../support/test-order.ts";
import { byTier, TEST_TIERS, testTierFrom } from "../support/tier.ts";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
/** This file calls byTier to test it, not to size anything. */
const THIS_FILE = "test/unit/test-tiers.test.ts";
const classified = classifyTestFiles(ROOT);

describe("what a file imports", () => {
  it("counts static, re-exported, side-effect and literal dynamic imports, not type-only ones", () => {
    const source = [
      'import { a } from "./a.ts";',
      'import type { B } from "./b.ts";',
      "import {\n  type C,\n  c,\n} from './c.ts';",
      'import "./d.ts";',
      'export { e } from "./e.ts";',
      'export type { F } from "./f.ts";',
      'const g = await import("./g.ts");',
      "const h = await import(modulePath);",
      "const text = \"import { x } from './not-at-line-start.ts'\";",
    ].join("\n");
    expect(importedSpecifiers(source).sort()).toEqual(["./a.ts", "./c.ts", "./d.ts", "./e.ts", "./g.ts"]);
  });

  it("follows helpers: a file reaches the database through the harness it imports", () => {
    expect(reachedModules(ROOT, "test/integration/consumer.test.ts").has(DATABASE_MODULE)).toBe(true);
    expect(reachedModules(ROOT, "test/unit/retry-policy.test.ts").has(DATABASE_MODULE)).toBe(false);
  });
});

describe("the projects", () => {
  it.each([
    ["test/integration/roles.test.ts", { database: true, cdk: false, full: false }],
    ["test/consumers/conformance.test.ts", { database: true, cdk: true, full: false }],
    ["test/infra/job-consumer.test.ts", { database: false, cdk: true, full: false }],
    ["test/unit/retry-policy.test.ts", { database: false, cdk: false, full: false }],
    // It starts a PostgreSQL of its own: a second server in CI would change nothing for it.
    ["test/e2e/doctor.test.ts", { database: false, cdk: false, full: false }],
    ["test/e2e/new-consumer.test.ts", { database: true, cdk: false, full: true }],
  ])("%s is classified %o", (file, kind) => {
    expect(classified.get(file)).toEqual(kind);
  });

  it("put every test file of the tier in exactly one project", async () => {
    const { default: config } = await import("../../vitest.config.ts");
    const included = (config.test?.projects ?? []).flatMap((project) =>
      typeof project === "object" && "test" in project ? ((project.test?.include ?? []) as string[]) : [],
    );
    const everyday = [...classified].filter(([, kind]) => !kind.full).map(([file]) => file);
    expect(everyday.length).toBeGreaterThan(50);
    expect(included.sort()).toEqual(everyday.sort());
  });

  it("share no entry point's module between two files of one project: each runs in warm processes", () => {
    // An entry point's module builds its handler from the environment when it is imported, and a
    // warm process imports it once: a second file of the same project would get the first's.
    const entryModule = (module: string) => /^functions\/[^/]+\/(reference-)?handler\.ts$/.test(module);
    const importers = new Map<string, string[]>();
    for (const [file, kind] of classified) {
      const project = kind.database ? "database" : kind.cdk ? "cdk" : "standalone";
      for (const module of reachedModules(ROOT, file)) {
        if (!entryModule(module)) continue;
        const key = `${project}: ${module}`;
        importers.set(key, [...(importers.get(key) ?? []), file]);
      }
    }
    expect(importers.size).toBeGreaterThan(0);
    expect([...importers].filter(([, files]) => files.length > 1)).toEqual([]);
  });

  it("hold the full tier's files, each with a reason, and refuse one that is not on disk", () => {
    for (const [file, reason] of Object.entries(FULL_TIER_FILES)) {
      expect(classified.get(file)?.full, file).toBe(true);
      expect(reason.length, file).toBeGreaterThan(30);
    }
    expect(() => classifyTestFiles(join(ROOT, "shared"))).toThrow(
      /FULL_TIER_FILES names files that do not exist/,
    );
  });

  it("size by tier only files that reach the database: CI runs the full tier over those alone", () => {
    const sizedModules = new Set(
      [...new Set([...classified.keys()].flatMap((file) => [...reachedModules(ROOT, file)]))].filter(
        (module) =>
          !["test/support/tier.ts", THIS_FILE].includes(module) &&
          /\bbyTier\(/.test(readFileSync(join(ROOT, module), "utf8")),
      ),
    );
    expect(sizedModules.size).toBeGreaterThan(0);
    const sizedWithoutDatabase = [...classified]
      .filter(
        ([file, kind]) => !kind.database && [...reachedModules(ROOT, file)].some((m) => sizedModules.has(m)),
      )
      .map(([file]) => file);
    expect(sizedWithoutDatabase).toEqual([]);
  });
});

describe("the order files start in", () => {
  it("puts the cdk files first, together, then those that start the local stack, each part in the order given", () => {
    const files = [
      { name: "unit-a", cdk: false, stack: false },
      { name: "e2e-a", cdk: false, stack: true },
      { name: "cdk-a", cdk: true, stack: false },
      { name: "unit-b", cdk: false, stack: false },
      { name: "e2e-b", cdk: false, stack: true },
      { name: "cdk-b", cdk: true, stack: false },
    ];
    expect(startOrder(files, (f) => f).map((f) => f.name)).toEqual([
      "cdk-a",
      "cdk-b",
      "e2e-a",
      "e2e-b",
      "unit-a",
      "unit-b",
    ]);
  });

  it("reads which files start the local stack from their imports: the end-to-end files and the soak", () => {
    const stack = [...classified.keys()].filter((file) => startsTheStack(ROOT, file));
    expect(stack).toEqual(
      expect.arrayContaining([
        "test/e2e/local-stack.test.ts",
        "test/e2e/local-stack-edges.test.ts",
        "test/e2e/doctor.test.ts",
        "test/reliability/soak.test.ts",
      ]),
    );
    for (const file of stack) expect(reachedModules(ROOT, file).has(STACK_MODULE), file).toBe(true);
    expect(startsTheStack(ROOT, "test/integration/attempts.test.ts")).toBe(false);
  });

  it("is the config's: without durations, the standalone project's stack files start before the database project's files", async () => {
    const { default: config, StartOrderSequencer } = await import("../../vitest.config.ts");
    expect(config.test?.sequence?.sequencer).toBe(StartOrderSequencer);
    const spec = (file: string, project: string) => ({
      moduleId: join(ROOT, file),
      project: { name: project, config: { isolate: project === "database", sequence: { groupOrder: 0 } } },
    });
    const specs = [
      spec("test/unit/retry-policy.test.ts", "standalone"),
      spec("test/integration/late-claim.test.ts", "database"),
      spec("test/e2e/doctor.test.ts", "standalone"),
      spec("test/infra/job-consumer.test.ts", "cdk"),
      spec("test/integration/attempts.test.ts", "database"),
      spec("test/e2e/local-stack-edges.test.ts", "standalone"),
      spec("test/e2e/local-stack.test.ts", "database"),
    ];
    // A fresh clone: no durations from an earlier run.
    const ctx = { cache: { getTestSpecificationResult: () => undefined } };
    const sorted = await new StartOrderSequencer(ctx as never).sort(specs as never);
    expect(sorted.map((s) => relative(ROOT, s.moduleId))).toEqual([
      "test/infra/job-consumer.test.ts",
      "test/e2e/local-stack.test.ts",
      "test/e2e/local-stack-edges.test.ts",
      "test/e2e/doctor.test.ts",
      "test/integration/attempts.test.ts",
      "test/integration/late-claim.test.ts",
      "test/unit/retry-policy.test.ts",
    ]);
  });
});

describe("sizes by tier", () => {
  it("default upwards: full to everyday, reliability to full", () => {
    expect(TEST_TIERS.map((tier) => byTier({ everyday: 1 }, tier))).toEqual([1, 1, 1]);
    expect(TEST_TIERS.map((tier) => byTier({ everyday: 1, full: 2 }, tier))).toEqual([1, 2, 2]);
    expect(TEST_TIERS.map((tier) => byTier({ everyday: 1, reliability: 3 }, tier))).toEqual([1, 1, 3]);
    expect(TEST_TIERS.map((tier) => byTier({ everyday: 1, full: 2, reliability: 3 }, tier))).toEqual([
      1, 2, 3,
    ]);
  });

  it("read the tier from JOBFENCE_TEST_TIER, everyday when unset, and refuse any other value", () => {
    expect(testTierFrom({})).toBe("everyday");
    expect(testTierFrom({ JOBFENCE_TEST_TIER: "" })).toBe("everyday");
    expect(testTierFrom({ JOBFENCE_TEST_TIER: "full" })).toBe("full");
    expect(() => testTierFrom({ JOBFENCE_TEST_TIER: "Full" })).toThrow(
      /must be one of everyday, full, reliability/,
    );
  });
});
