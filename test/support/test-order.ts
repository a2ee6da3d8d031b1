/**
 * The order test files start in (vitest.config.ts's sequencer). vitest's own order runs a project's
 * files after the previous project's, by name: the standalone project's files started last,
 * among them two that start the local stack of their own (`npm start`, its own PostgreSQL: about
 * a minute together), so a run ended with those two alone on their workers while the others had
 * nothing left to do. A run ends no sooner than its last file started plus that file's time, so
 * the long ones go first:
 *
 * 1. the cdk project's files, together: they synthesize stacks (long, and busy on both cores), and
 *    a worker process is kept for the next file only when that file is of the same project;
 * 2. files that start the local stack as a child process (they reach test/e2e/support.ts), the
 *    longest files of the suite;
 * 3. the rest, the database project's and then the standalone project's (short ones, which fill
 *    the workers at the end).
 *
 * Within each part, files keep the order given (vitest's: longest first by the last run's
 * durations when it has them, largest first otherwise).
 */
import { reachedModules } from "./test-files.ts";

/** The module every file that starts the local stack as a child process reaches. */
export const STACK_MODULE = "test/e2e/support.ts";

/** What the start order needs to know of a file. */
export interface StartKind {
  /** In the cdk project: synthesizes stacks, in worker processes it shares with the other cdk files. */
  readonly cdk: boolean;
  /** Starts the local stack as a child process. */
  readonly stack: boolean;
}

/** Whether `file` (relative to `root`) starts the local stack as a child process. */
export function startsTheStack(root: string, file: string): boolean {
  return reachedModules(root, file).has(STACK_MODULE);
}

/** `files` in the order they start: the cdk files, then the local stack's, then the rest; stable. */
export function startOrder<T>(files: readonly T[], kindOf: (file: T) => StartKind): T[] {
  const part = (file: T) => {
    const kind = kindOf(file);
    return kind.cdk ? 0 : kind.stack ? 1 : 2;
  };
  return files
    .map((file, index) => ({ file, index, part: part(file) }))
    .sort((a, b) => a.part - b.part || a.index - b.index)
    .map(({ file }) => file);
}
