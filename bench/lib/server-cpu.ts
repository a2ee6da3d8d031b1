/**
 * The server's CPU time spent for one pool: the sum of the on-CPU time of the pool's backends, as
 * Linux's scheduler counts it (`/proc/<pid>/schedstat`, nanoseconds, first field), read in this
 * process when the server runs on this machine. Each connection's backend is known by the process
 * id PostgreSQL hands the client at startup (pg's `client.processID`).
 *
 * What it counts: parsing, planning and executing every statement the pool sends, row-level
 * security, triggers, and the backend's own WAL writes and flush at COMMIT. What it does not: the
 * WAL writer, checkpointer and autovacuum, and a backend's time after it exits (the pool keeps its
 * connections open through a benchmark). On a machine shared with other work the figure is still
 * the pool's own: scheduler time is per process, not wall time.
 */
import { readFileSync } from "node:fs";
import type pg from "pg";
import type { PerEffectMeter } from "./harness-driver.ts";

/** A process's on-CPU time in µs, or undefined when it is gone or unreadable. */
function onCpuMicros(pid: number): number | undefined {
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]) / 1000;
  } catch {
    return undefined;
  }
}

/** Whether `pid` on this machine is a PostgreSQL backend (its title starts "postgres: "). */
function isLocalBackend(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").startsWith("postgres: ");
  } catch {
    return false;
  }
}

/**
 * Meters `pool`'s backends from now on (connections it opens later included). Call before the
 * pool's first connection: a connection opened earlier is not seen. It reads µs of CPU the backends
 * have used (a backend that exited keeps its last reading), or NaN when they cannot be read: a
 * server on another machine, or not Linux.
 */
export function meterServerCpu(pool: pg.Pool): PerEffectMeter {
  const last = new Map<number, number>();
  let local = true;
  pool.on("connect", (client) => {
    const pid = (client as unknown as { processID: number | null }).processID;
    if (pid === null || !isLocalBackend(pid)) {
      local = false;
      return;
    }
    last.set(pid, onCpuMicros(pid) ?? 0);
  });
  return {
    perEffect: {},
    read() {
      if (!local || last.size === 0) return Number.NaN;
      let total = 0;
      for (const [pid, before] of last) {
        const now = onCpuMicros(pid) ?? before;
        last.set(pid, now);
        total += now;
      }
      return total;
    },
  };
}
