/**
 * What a crash matrix's parent and its victim child say to each other, and the child's side of it
 * (bench/lib/crash-trials.ts is the parent's). The child is configured by JSON in an environment
 * variable, does its init, writes {@link READY_MARK} and waits for "go" on stdin (the parent lets
 * one child invoke at a time); at its point it writes {@link CRASH_MARK} and the {@link CrashMark},
 * synchronously, and SIGKILLs itself: nothing runs after the point (no ROLLBACK, no checkpoint, no
 * ack), which is what a container dying mid-invocation looks like to everything it talks to.
 *
 * Light on purpose: many children load it at once.
 */
import { writeSync } from "node:fs";

/** The variable the child's configuration (JSON) is passed in. */
export const CRASH_ENV = "JOBFENCE_BENCH_CRASH";
/** The line the child writes right before it kills itself: the mark, then JSON {@link CrashMark}. */
export const CRASH_MARK = "crash-child: killing";
/** The line the child writes once its init is done; it then waits for "go" on stdin. */
export const READY_MARK = "crash-child: ready";
/** The exit code of a child whose invocation ended without reaching its point. */
export const NEVER_REACHED_EXIT = 3;

export interface CrashMark {
  readonly where: string;
  /** Date.now() when the invocation began, and at the kill. */
  readonly invokedAt: number;
  readonly killedAt: number;
}

/** The child's configuration, as the parent passed it. */
export function crashConfig<T>(): T {
  const raw = process.env[CRASH_ENV];
  if (!raw) throw new Error(`${CRASH_ENV} is not set: this module runs as a crash matrix's child`);
  return JSON.parse(raw) as T;
}

let invokedAt = 0;

/** Writes the mark (synchronously: SIGKILL leaves no time to flush) and dies at once. */
export function die(where: string): never {
  const mark: CrashMark = { where, invokedAt, killedAt: Date.now() };
  writeSync(1, `${CRASH_MARK}${JSON.stringify(mark)}\n`);
  process.kill(process.pid, "SIGKILL");
  // The signal is delivered on the way out of the kernel; block until then so nothing else runs.
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
  throw new Error("unreachable: SIGKILL did not end the process");
}

/**
 * Says the child is ready and resolves when the parent says "go" (the invocation's clock starts
 * then); a parent that died first leaves nothing to do, so the child exits.
 */
export async function readyThenGo(): Promise<void> {
  writeSync(1, `${READY_MARK}\n`);
  await new Promise<void>((resolve) => {
    const orphaned = () => process.exit(4);
    process.stdin.once("end", orphaned);
    process.stdin.once("data", () => {
      process.stdin.off("end", orphaned);
      resolve();
    });
  });
  invokedAt = Date.now();
}

/**
 * The invocation ended and the point was not reached: says so (with `detail`, what the invocation
 * answered, for the parent's error) and exits {@link NEVER_REACHED_EXIT}.
 */
export function neverReached(detail?: string): never {
  const after = invokedAt === 0 ? "" : ` ${Date.now() - invokedAt} ms into the invocation`;
  writeSync(1, `crash-child: finished without reaching the point${after}${detail ? `: ${detail}` : ""}\n`);
  process.exit(NEVER_REACHED_EXIT);
}
