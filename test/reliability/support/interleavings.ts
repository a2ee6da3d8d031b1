/**
 * Interleavings of the real code: fast-check's scheduler (`fc.scheduler`) decides the order in
 * which the real harness, replay, bulk worker, cleanup, drain and relays reach the database and
 * SQS, while every statement runs for real against PostgreSQL.
 *
 * The scheduler is injected at the I/O edges, not in the code under test: each actor gets its own
 * pool (and SQS client) whose `query` (and `send`) first waits for a task the scheduler releases
 * (`s.schedule` of a resolved promise: the START of the call is the scheduled step; fast-check's
 * `scheduleFunction` would schedule the call's answer, with the call already sent), then runs the
 * call unchanged. Between two steps the driver waits until the system is quiet: every call started
 * has answered, or is waiting in PostgreSQL for a row lock another actor holds (seen in
 * `pg_blocking_pids`). A lock wait therefore stays pending in the server while the scheduler
 * releases other actors' steps, and resolves when its holder commits or rolls back, as in
 * production. Because each decision is taken only once the system is quiet, the tasks on offer at
 * each decision, and so the whole run, are a function of the scheduler's seed: a failing run
 * replays from the seed and path fast-check prints.
 */
import type { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import type { SQSClient } from "@aws-sdk/client-sqs";
import fc from "fast-check";
import pg from "pg";
import { createPool, type PoolOptions } from "../../../shared/db/pool.ts";
import { byTier } from "../../support/tier.ts";

/** How one actor's run ended. */
export type ActorResult =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly error: unknown };

/** What the driver needs of the scheduler (fast-check's `Scheduler`). */
type Scheduler = fc.Scheduler<unknown>;

interface InFlight {
  readonly actor: string;
  readonly what: string;
  /** The backend running the statement; undefined for a call that is not a PostgreSQL statement. */
  readonly pid: number | undefined;
}

interface Waiter {
  readonly ready: () => boolean;
  readonly resolve: (ready: boolean) => void;
}

/** A step limit per run: far above what any property needs, it turns a livelock into a failure. */
const MAX_STEPS = 5_000;
/** How long the driver waits for a call that is neither answered nor blocked before it looks again. */
const POLL_MS = 2;
/** A run with nothing scheduled, nothing answering and actors still running is stuck after this. */
const STUCK_MS = 15_000;

/** Runs actors under a scheduler, with pools and clients whose calls are its steps. */
export class Interleaver {
  #scheduler: Scheduler | null = null;
  readonly #inFlight = new Map<number, InFlight>();
  #nextCall = 0;
  #wake: (() => void) | null = null;
  readonly #waiters: Waiter[] = [];
  readonly #pools: pg.Pool[] = [];
  readonly #sent = new Map<string, number>();
  readonly #admin: pg.Client;
  /** Each call's start, in the order the scheduler released them (the run's trace). */
  readonly trace: string[] = [];

  private constructor(admin: pg.Client) {
    this.#admin = admin;
  }

  /** An interleaver whose quiet checks read `pg_stat_activity` as `adminUrl` (a superuser). */
  static async create(adminUrl: string): Promise<Interleaver> {
    const admin = new pg.Client({ connectionString: adminUrl, application_name: "jobfence:interleaver" });
    await admin.connect();
    return new Interleaver(admin);
  }

  /** Ends the pools made here and the admin connection. */
  async close(): Promise<void> {
    await Promise.all(this.#pools.map((p) => p.end()));
    await this.#admin.end();
  }

  /**
   * A pool for `actor` (jobfence's createPool, so its session settings are production's): every
   * statement any of its clients runs starts as a scheduled step during a run, and runs directly
   * outside one. Give it connections enough that a checkout never waits for another's release.
   */
  pool(actor: string, options: PoolOptions): pg.Pool {
    const pool = createPool({ max: 4, ...options, applicationName: `jobfence:interleave:${actor}` });
    this.#pools.push(pool);
    pool.on("connect", (client) => this.#wrapClient(actor, client));
    const connect = pool.connect.bind(pool) as (...args: unknown[]) => unknown;
    // A checkout may open a connection: I/O the driver must see answered before it decides.
    (pool as { connect: unknown }).connect = (...args: unknown[]) => {
      const callback = typeof args[0] === "function" ? (args[0] as (...a: unknown[]) => void) : undefined;
      if (!callback) return this.#track(actor, "connect", undefined, connect() as Promise<unknown>);
      let done!: () => void;
      void this.#track(actor, "connect", undefined, new Promise<void>((resolve) => (done = resolve)));
      return connect((...a: unknown[]) => {
        done();
        callback(...a);
      });
    };
    return pool;
  }

  /** `base` for `actor`: each `send` starts as a scheduled step; sends are counted per queue. */
  sqs(actor: string, base: SQSClient): SQSClient {
    const wrapped = Object.create(base) as SQSClient;
    const send = base.send.bind(base) as (...args: unknown[]) => Promise<unknown>;
    (wrapped as { send: unknown }).send = async (...args: unknown[]) => {
      const command = args[0] as { constructor: { name: string }; input: Record<string, unknown> };
      const name = command.constructor.name.replace(/Command$/, "");
      const queue = String(command.input.QueueUrl ?? "");
      await this.#gate(actor, `sqs ${name} ${queue.slice(queue.lastIndexOf("/") + 1)}`);
      const answer = (await this.#track(actor, name, undefined, send(...args))) as {
        Successful?: unknown[];
        MessageId?: string;
      };
      if (name === "SendMessage" || name === "SendMessageBatch") {
        const count = name === "SendMessage" ? 1 : (answer.Successful?.length ?? 0);
        this.#sent.set(queue, (this.#sent.get(queue) ?? 0) + count);
      }
      return answer;
    };
    return wrapped;
  }

  /** `base` for `actor`, its calls tracked (not scheduled): the alerts a dead letter publishes. */
  eventBridge(actor: string, base: EventBridgeClient): EventBridgeClient {
    const wrapped = Object.create(base) as EventBridgeClient;
    const send = base.send.bind(base) as (...args: unknown[]) => Promise<unknown>;
    (wrapped as { send: unknown }).send = (...args: unknown[]) =>
      this.#track(actor, "eventbridge", undefined, send(...args));
    return wrapped;
  }

  /** Messages sent to `queueUrl` through the clients made here, since the interleaver was made. */
  sentTo(queueUrl: string): number {
    return this.#sent.get(queueUrl) ?? 0;
  }

  /**
   * Resolves true once `ready()` holds (checked whenever the system is quiet), or false when it
   * does not while nothing else can happen any more (every other actor done or waiting too).
   * For an actor that acts on what another produced: a replayed message, a follow-up.
   */
  when(ready: () => boolean): Promise<boolean> {
    if (!this.#scheduler || ready()) return Promise.resolve(ready());
    return new Promise((resolve) => this.#waiters.push({ ready, resolve }));
  }

  /**
   * Runs every actor at once under `s` and returns how each ended. Steps are released one at a
   * time, each once the system is quiet (see the module comment).
   */
  async run(
    s: Scheduler,
    actors: Record<string, () => Promise<unknown>>,
  ): Promise<Record<string, ActorResult>> {
    this.trace.length = 0;
    this.#scheduler = s;
    const results: Record<string, ActorResult> = {};
    let running = 0;
    const all = Object.entries(actors).map(([name, act]) => {
      running++;
      return Promise.resolve()
        .then(act)
        .then(
          (value) => {
            results[name] = { ok: true, value };
          },
          (error: unknown) => {
            results[name] = { ok: false, error };
          },
        )
        .finally(() => {
          running--;
          this.#notify();
        });
    });
    let failure: unknown;
    try {
      for (let steps = 0; ; ) {
        await this.#quiet();
        if (s.count() > 0) {
          if (++steps > MAX_STEPS) throw new Error(`more than ${MAX_STEPS} steps: a livelock?`);
          await s.waitOne();
          continue;
        }
        if (running === 0 && this.#inFlight.size === 0) break;
        // Nothing to release: wake a waiter whose condition holds, else give every waiter up.
        if (this.#releaseWaiters(this.#inFlight.size === 0)) continue;
        if (!(await this.#progress(STUCK_MS))) {
          throw new Error(
            `stuck: nothing scheduled, actors still running, and these calls did not answer in ${STUCK_MS} ms: ${JSON.stringify([...this.#inFlight.values()])}`,
          );
        }
      }
    } catch (error) {
      failure = error;
    } finally {
      this.#scheduler = null;
      // Whatever is still held (a failed run) goes now, unscheduled, so no actor hangs.
      for (const w of this.#waiters.splice(0)) w.resolve(w.ready());
      while (s.count() > 0) await s.waitOne();
    }
    await Promise.all(all);
    if (failure !== undefined) throw failure;
    return results;
  }

  /** The start of a call by `actor`: a scheduled step during a run, nothing outside one. */
  #gate(actor: string, what: string): Promise<void> {
    const s = this.#scheduler;
    if (!s) return Promise.resolve();
    const label = `${actor}: ${what}`;
    const released = s.schedule(Promise.resolve(), label).then(() => {
      this.trace.push(label);
    });
    this.#notify();
    return released;
  }

  #track<T>(actor: string, what: string, pid: number | undefined, call: Promise<T>): Promise<T> {
    const id = ++this.#nextCall;
    this.#inFlight.set(id, { actor, what, pid });
    const settled = () => {
      this.#inFlight.delete(id);
      this.#notify();
    };
    call.then(settled, settled);
    return call;
  }

  #wrapClient(actor: string, client: pg.PoolClient): void {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (...args: unknown[]) => {
      const last = args.at(-1);
      const callback = typeof last === "function" ? (last as (e: unknown, r?: unknown) => void) : undefined;
      const params = callback ? args.slice(0, -1) : args;
      const text = typeof params[0] === "string" ? params[0] : String((params[0] as { text?: string }).text);
      const what = text.replace(/\s+/g, " ").trim().slice(0, 60);
      // A Submittable (the guard sends the work's statements as pg.Query objects): its call returns
      // it, not a promise; the step is answered when it ends, as pg's events say.
      const submittable = params[0] as { submit?: unknown; once?: (event: string, f: () => void) => void };
      const sent = () => {
        if (typeof submittable?.submit !== "function" || typeof submittable.once !== "function")
          return query(...params) as Promise<unknown>;
        const ended = new Promise<unknown>((resolve) => {
          submittable.once?.("end", () => resolve(undefined));
          submittable.once?.("error", () => resolve(undefined));
          // With a callback, pg reports an error to it alone (no event).
          const withCallback = submittable as { callback?: (...a: unknown[]) => unknown };
          const callback = withCallback.callback;
          if (typeof callback === "function")
            withCallback.callback = (...a: unknown[]) => {
              resolve(undefined);
              return callback(...a);
            };
        });
        query(...params);
        return ended;
      };
      const answer = this.#gate(actor, what).then(() =>
        this.#track(actor, what, (client as { processID?: number }).processID, sent()),
      );
      if (!callback) return answer;
      answer.then(
        (result) => callback(undefined, result),
        (error) => callback(error),
      );
      return undefined;
    };
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }

  /** Resolves true when something happens (a call answers, a task is scheduled, an actor ends), false after `ms`. */
  #progress(ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#wake = null;
        resolve(false);
      }, ms);
      this.#wake = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });
  }

  /** Wakes waiters whose condition holds; with `giveUp`, and none ready, wakes them all with false. */
  #releaseWaiters(giveUp: boolean): boolean {
    const ready = this.#waiters.filter((w) => w.ready());
    const woken = ready.length > 0 || !giveUp ? ready : [...this.#waiters];
    for (const w of woken) {
      this.#waiters.splice(this.#waiters.indexOf(w), 1);
      w.resolve(w.ready());
    }
    return woken.length > 0;
  }

  /**
   * Waits until every call started has answered or is a statement blocked behind another session's
   * lock, with the microtasks they started run out.
   */
  async #quiet(): Promise<void> {
    for (;;) {
      await new Promise((resolve) => setImmediate(resolve));
      if (this.#releaseWaiters(false)) continue;
      if (this.#inFlight.size === 0) {
        // One more turn: an answer's continuation may start the next call.
        await new Promise((resolve) => setImmediate(resolve));
        if (this.#inFlight.size === 0) return;
        continue;
      }
      if (await this.#progress(POLL_MS)) continue;
      const calls = [...this.#inFlight.values()];
      if (calls.some((c) => c.pid === undefined)) continue;
      const pids = [...new Set(calls.map((c) => c.pid as number))];
      const { rows } = await this.#admin.query<{ pid: number }>(
        "SELECT pid FROM pg_stat_activity WHERE pid = ANY($1) AND cardinality(pg_blocking_pids(pid)) > 0",
        [pids],
      );
      if (rows.length === pids.length && this.#inFlight.size === calls.length) return;
    }
  }
}

/**
 * Runs `property` as one fixed corpus (`seed` with `numRuns` runs: the same runs every time) and
 * then `generated` runs from a fresh seed. Either failure throws fast-check's report, which names
 * the seed and path; the message added here says how to replay it.
 */
export async function assertInterleavings<Ts extends [unknown, ...unknown[]]>(
  name: string,
  property: fc.IAsyncPropertyWithHooks<Ts>,
  runs: { readonly seed: number; readonly pinned: number; readonly generated: number },
): Promise<void> {
  const replay = process.env.JOBFENCE_INTERLEAVE_SEED;
  const path = process.env.JOBFENCE_INTERLEAVE_PATH;
  const corpora =
    replay !== undefined
      ? [{ seed: Number(replay), numRuns: 1, ...(path ? { path } : {}) }]
      : [
          { seed: runs.seed, numRuns: runs.pinned },
          ...(runs.generated > 0
            ? [{ seed: Date.now() ^ (Math.random() * 0x7fffffff), numRuns: runs.generated }]
            : []),
        ];
  for (const corpus of corpora) {
    const details = await fc.check(property, { ...corpus, endOnFailure: false, verbose: 1 });
    if (details.failed) {
      const how =
        `replay: JOBFENCE_INTERLEAVE_SEED=${details.seed} JOBFENCE_INTERLEAVE_PATH=${details.counterexamplePath} ` +
        `npm test -- ${name}`;
      const error =
        details.errorInstance instanceof Error
          ? details.errorInstance.message
          : String(details.errorInstance);
      throw new Error(`${fc.defaultReportMessage(details)}\nThe failure: ${error.slice(0, 6000)}\n${how}`);
    }
  }
}

/** Runs of a property: few in `npm test` and `npm run test:full`, many in `npm run test:reliability`. */
export function interleavingRuns(
  seed: number,
  bounded: { readonly pinned: number; readonly generated: number },
  full: { readonly pinned: number; readonly generated: number },
): { readonly seed: number; readonly pinned: number; readonly generated: number } {
  return { seed, ...byTier({ everyday: bounded, reliability: full }) };
}
