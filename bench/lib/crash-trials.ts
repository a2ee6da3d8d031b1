/**
 * The parent's side of a crash matrix (bench/lib/crash-protocol.ts is the child's): run a child to
 * its SIGKILL, one invocation at a time; redeliver the batch it died in, as SQS would, until every
 * record is acked or a bound is reached; run trials a few at a time; and classify what each job's
 * effect count says: 1 = applied once, 0 = lost, 2+ = doubled.
 *
 * Every redelivery waits the function timeout plus a margin after the invocation began (SQS's
 * visibility timeout is longer than the function timeout, and a store's in-progress record expires
 * with the invocation's remaining time), and the same again before each further delivery.
 */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { SQSRecord } from "aws-lambda";
import { CRASH_ENV, CRASH_MARK, type CrashMark, READY_MARK } from "./crash-protocol.ts";

/** Beyond the function timeout, before a delivery after a crash or a failure. */
export const REDELIVERY_MARGIN_MS = 500;

/** Runs tasks one at a time, in the order they ask. */
export type Turn = <T>(task: () => Promise<T>) => Promise<T>;

export function oneAtATime(): Turn {
  let last: Promise<unknown> = Promise.resolve();
  return (task) => {
    const run = last.then(task);
    last = run.catch(() => {});
    return run;
  };
}

/**
 * Runs the child `script` with `config` to its kill; throws unless it died by SIGKILL after writing
 * its mark (`what` names the trial in that error). The child starts and does its init alongside
 * others, then waits for `turn` to invoke: one invocation at a time, so another child's start-up
 * (seconds of CPU on a small machine) does not stretch it past its function timeout.
 */
export async function runCrashChild(
  script: string,
  config: unknown,
  what: string,
  turn: Turn,
): Promise<CrashMark> {
  const child = spawn(process.execPath, [script], {
    env: { ...process.env, [CRASH_ENV]: JSON.stringify(config) },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  const closed = new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (c, s) => resolve([c, s]));
  });
  const ready = new Promise<void>((resolve) => {
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      if (stdout.includes(READY_MARK)) resolve();
    });
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  // A child that died before its turn cannot take the "go"; its exit is reported below.
  child.stdin.on("error", () => {});
  const [code, signal] = await Promise.race([
    closed,
    ready.then(() =>
      turn(() => {
        child.stdin.end("go\n");
        return closed;
      }),
    ),
  ]);
  const line = stdout.split("\n").find((l) => l.startsWith(CRASH_MARK));
  if (signal !== "SIGKILL" || !line) {
    throw new Error(
      `crash child (${what}) ended with ${signal ?? `exit ${code}`}, not at its point:\n${stdout}${stderr}`,
    );
  }
  return JSON.parse(line.slice(CRASH_MARK.length)) as CrashMark;
}

/** The same message delivered again: same id and body, a new receipt handle, one more receive. */
export function redelivery(record: SQSRecord, receiveCount: number): SQSRecord {
  return {
    ...record,
    receiptHandle: `rh-${randomUUID()}`,
    attributes: { ...record.attributes, ApproximateReceiveCount: String(receiveCount) },
  };
}

/**
 * Delivers `records` again after a crash at `mark`, and again the ones reported failed, at most
 * `redeliveries` times; `invoke` is a fresh container's invocation and answers the message ids it
 * failed. Returns the records still not acked.
 */
export async function redeliverUntilAcked(
  records: readonly SQSRecord[],
  invoke: (records: SQSRecord[]) => Promise<ReadonlySet<string>>,
  o: { readonly mark: CrashMark; readonly timeoutMs: number; readonly redeliveries: number },
): Promise<SQSRecord[]> {
  await sleep(Math.max(0, o.mark.invokedAt + o.timeoutMs + REDELIVERY_MARGIN_MS - Date.now()));
  let pending = [...records];
  for (let delivery = 2; delivery <= o.redeliveries + 1 && pending.length > 0; delivery++) {
    if (delivery > 2) await sleep(o.timeoutMs + REDELIVERY_MARGIN_MS);
    const failed = await invoke(pending.map((record) => redelivery(record, delivery)));
    pending = pending.filter((record) => failed.has(record.messageId));
  }
  return pending;
}

/** Runs `run` over `trials`, `parallel` at a time, in order of start. */
export async function runTrials<T>(
  trials: readonly T[],
  parallel: number,
  run: (trial: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(parallel, trials.length) }, async () => {
      for (let i = next++; i < trials.length; i = next++) await run(trials[i] as T, i);
    }),
  );
}

/** How many jobs had their effect applied once, twice or more, or not at all. */
export interface EffectCount {
  readonly jobs: number;
  readonly once: number;
  readonly doubled: number;
  readonly lost: number;
}

/**
 * Classifies `jobIds` by how many times each one's effect was applied (`applied`: job id → count;
 * a job it does not name was applied 0 times, a count of a job outside `jobIds` is ignored).
 */
export function classifyEffects(
  jobIds: readonly string[],
  applied: ReadonlyMap<string, number>,
): EffectCount {
  const counts = [...new Set(jobIds)].map((jobId) => applied.get(jobId) ?? 0);
  return {
    jobs: counts.length,
    once: counts.filter((n) => n === 1).length,
    doubled: counts.filter((n) => n > 1).length,
    lost: counts.filter((n) => n === 0).length,
  };
}

/** The kill moves through a batch of `size` from trial to trial: the first record, the last, between. */
export function killedRecord(trial: number, trials: number, size: number): number {
  return trials === 1 ? 1 + Math.floor(size / 2) : 1 + Math.round((trial * (size - 1)) / (trials - 1));
}
