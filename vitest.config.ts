/**
 * Three projects, by what a file needs (read from its imports, test/support/test-files.ts):
 *
 * - `database`: files that reach the run's PostgreSQL. Only this project starts one (global-setup.ts),
 *   and only these files run again when CI points the suite at a second server (`npm run test:db`).
 * - `cdk`: files that synthesize CDK stacks and need no database. One warm process per worker runs
 *   them all: importing aws-cdk-lib and its first synthesis cost seconds a process.
 * - `standalone`: the rest, also in warm processes (one per worker).
 *
 * JOBFENCE_TEST_TIER (test/support/tier.ts) picks the tier: `npm test` is the everyday tier,
 * `npm run test:full` adds the full tier's files and runs every size at its full value.
 */
import { availableParallelism, tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";
import { BaseSequencer, type TestSpecification } from "vitest/node";
import { classifyTestFiles, type TestFileKind } from "./test/support/test-files.ts";
import { startOrder, startsTheStack } from "./test/support/test-order.ts";
import { TEST_TIER } from "./test/support/tier.ts";

/**
 * Connections a database file holds at its peak: the consumer suite's two files (AC1's twelve
 * concurrent handlers, their pools and listeners) reach about 40 each.
 */
const PEAK_CONNECTIONS_PER_FILE = 40;
/**
 * The server's max_connections: 300 as the suite starts its own (local/postgres.ts, and the
 * container's command), PostgreSQL's default 100 for a server given by DATABASE_URL.
 */
const SERVER_CONNECTIONS = process.env.DATABASE_URL ? 100 : 300;
/**
 * Test files at once. Most of a file's time is spent waiting (on PostgreSQL, child processes, the
 * SQS emulator, deadlines), so one more than the cores keeps them busy, as far as the server's
 * connections allow (2 on a default server). vitest's default, the cores minus one, ran the suite
 * one file at a time on two cores, using a third of them.
 */
const MAX_WORKERS = Math.min(
  availableParallelism() + 1,
  Math.max(1, Math.floor(SERVER_CONNECTIONS / PEAK_CONNECTIONS_PER_FILE)),
);

/**
 * Node keeps the code it compiles for each module in this directory (NODE_COMPILE_CACHE), for the
 * run's workers and every process they start (the crash matrix's children, `npm start`, the CLIs),
 * which inherit it: a run starts a few hundred processes that load the same modules (aws-cdk-lib,
 * the AWS SDK, pg), and each compiles them in about two thirds of the processor time with it. Kept
 * between runs; one given by the environment is used instead.
 */
process.env.NODE_COMPILE_CACHE ??= join(tmpdir(), "jobfence-node-compile-cache");

const root = fileURLToPath(new URL(".", import.meta.url));
const files = [...classifyTestFiles(root)].filter(([, kind]) => TEST_TIER !== "everyday" || !kind.full);
const filesWhere = (test: (kind: TestFileKind) => boolean) =>
  files.filter(([, kind]) => test(kind)).map(([file]) => file);

/**
 * vitest's order (longest first by the last run, largest first without one), with the cdk files
 * first and the files that start the local stack next: test/support/test-order.ts.
 */
export class StartOrderSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    return startOrder(await super.sort(files), (spec) => ({
      cdk: spec.project.name === "cdk",
      stack: startsTheStack(root, relative(root, spec.moduleId).split("\\").join("/")),
    }));
  }
}

export default defineConfig({
  test: {
    globalSetup: ["test/support/run-setup.ts"],
    sequence: { sequencer: StartOrderSequencer },
    pool: "forks",
    maxWorkers: MAX_WORKERS,
    testTimeout: 30_000,
    hookTimeout: 120_000,
    // Powertools writes EMF and JSON logs to stdout; tests that check them enable them explicitly.
    // POWERTOOLS_LOG_LEVEL=DEBUG npm test … shows them while debugging.
    env: {
      POWERTOOLS_METRICS_DISABLED: process.env.POWERTOOLS_METRICS_DISABLED ?? "true",
      POWERTOOLS_LOG_LEVEL: process.env.POWERTOOLS_LOG_LEVEL ?? "SILENT",
    },
    projects: [
      {
        extends: true,
        test: {
          name: "database",
          include: filesWhere((kind) => kind.database),
          globalSetup: ["test/support/global-setup.ts"],
          // Warm processes, as the other projects: each file makes its own database, servers and
          // pools and ends them, and the modules a file imports keep nothing another file reads
          // (an entry point's module, which builds its handler from the environment on import, is
          // imported by one file only: test-tiers.test.ts checks). Importing the library, the AWS
          // SDK and pg afresh for each of about ninety files cost about 80 s of processor time a run.
          isolate: false,
        },
      },
      {
        extends: true,
        test: { name: "cdk", include: filesWhere((kind) => !kind.database && kind.cdk), isolate: false },
      },
      {
        extends: true,
        // Warm processes too: these files' modules keep no state between files (a test that changes
        // the environment or a global puts it back), and importing them afresh for each of about
        // fifty files cost more processor time than running their tests.
        test: {
          name: "standalone",
          include: filesWhere((kind) => !kind.database && !kind.cdk),
          isolate: false,
        },
      },
    ],
  },
});
