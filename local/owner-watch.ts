/**
 * Notices when the processes that started the local stack are gone. `npm start` runs the stack as
 * npm → sh → node; npm forwards SIGTERM and SIGINT to the shell only, and the shell dies without
 * passing them on, so a SIGTERM to npm left the stack running, reparented to init. Polling the
 * owners is the one signal-free way to learn of it.
 */
import { readFileSync } from "node:fs";

/** How often the owners are looked at. */
export const OWNER_POLL_MS = 500;

/** A process's parent and state from /proc (Linux); undefined where there is no /proc or no such process. */
function procStat(pid: number): { ppid: number; state: string } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // pid (comm) state ppid …; comm may hold spaces and parentheses.
    const [state = "", ppid = ""] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { ppid: Number(ppid), state };
  } catch {
    return undefined;
  }
}

/** Whether `pid` runs (a zombie, dead but not yet reaped, does not). */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
  return procStat(pid)?.state !== "Z";
}

/**
 * The processes whose end should stop this one: its parent and, when npm ran it (through a shell),
 * npm too, so that npm ending by a signal it does not forward (SIGHUP, SIGKILL) stops the stack.
 */
export function owners(env: NodeJS.ProcessEnv = process.env): number[] {
  const parent = process.ppid;
  const found = [parent];
  if (env.npm_lifecycle_event !== undefined) {
    const grandparent = procStat(parent)?.ppid;
    if (grandparent !== undefined && grandparent > 1) found.push(grandparent);
  }
  return found.filter((pid) => pid > 1);
}

/** Calls `onGone` once, with the pid, when an owner ends or this process is reparented; `stop` ends the watch. */
export function watchOwners(onGone: (pid: number) => void, watched = owners()): { stop(): void } {
  const parent = process.ppid;
  const timer = setInterval(() => {
    const gone = process.ppid !== parent ? parent : watched.find((pid) => !running(pid));
    if (gone === undefined) return;
    clearInterval(timer);
    onGone(gone);
  }, OWNER_POLL_MS);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
