/**
 * The local end-to-end benchmark's clock on every call: an SDK middleware times each SQS call of
 * the poller's and the harness's client, wrappers time each pool checkout and each query on the
 * pool's connections; the deletes are counted from DeleteMessageBatch results (the poller deletes
 * a record only after the harness committed it). Then, per repetition's window: how long the calls
 * took in sum (per kind and per call), and how long at least one of a kind was in flight.
 */
import { performance } from "node:perf_hooks";
import type {
  DeleteMessageBatchCommandOutput,
  ReceiveMessageCommandOutput,
  SQSClient,
} from "@aws-sdk/client-sqs";
import type pg from "pg";

export type Kind = "sqs" | "db";

/** One timed call. */
interface Call {
  readonly kind: Kind;
  /** SQS command name, or `query` / `checkout`. */
  readonly name: string;
  readonly start: number;
  readonly end: number;
}

/** Every call made through the instrumented clients, and what the deletes counted. */
export class CallLog {
  calls: Call[] = [];
  deleted = 0;
  receives = 0;
  emptyReceives = 0;
  /** Resolved when `deleted` reaches `target`. */
  private waiter: { target: number; resolve: (at: number) => void } | undefined;

  record(kind: Kind, name: string, start: number, end: number): void {
    this.calls.push({ kind, name, start, end });
  }

  countDeleted(count: number, at: number): void {
    this.deleted += count;
    if (this.waiter && this.deleted >= this.waiter.target) {
      this.waiter.resolve(at);
      this.waiter = undefined;
    }
  }

  reset(): void {
    this.calls = [];
    this.deleted = 0;
    this.receives = 0;
    this.emptyReceives = 0;
  }

  /** Resolves with the time the `target`-th deletion completed. */
  whenDeleted(target: number): Promise<number> {
    return new Promise((resolve) => {
      this.waiter = { target, resolve };
    });
  }
}

/** Times every call of `sqs` (initialize step: everything the call does is inside) into `log`. */
export function instrumentSqs(sqs: SQSClient, log: CallLog): void {
  sqs.middlewareStack.add(
    (next, context) => async (args) => {
      const start = performance.now();
      const name = String(context.commandName ?? "unknown").replace(/Command$/, "");
      try {
        const result = await next(args);
        const now = performance.now();
        if (name === "DeleteMessageBatch") {
          log.countDeleted((result.output as DeleteMessageBatchCommandOutput).Successful?.length ?? 0, now);
        } else if (name === "ReceiveMessage") {
          log.receives++;
          if (((result.output as ReceiveMessageCommandOutput).Messages ?? []).length === 0)
            log.emptyReceives++;
        }
        return result;
      } finally {
        log.record("sqs", name, start, performance.now());
      }
    },
    { step: "initialize", name: "jobfenceBenchTiming", priority: "high" },
  );
}

type Callback = (...results: unknown[]) => void;
type AnyQuery = (...args: unknown[]) => unknown;

/** Times every checkout of `pool` and every query on its connections into `log`. */
export function instrumentPool(pool: pg.Pool, log: CallLog): void {
  pool.on("connect", (client) => {
    const query = client.query.bind(client) as AnyQuery;
    (client as unknown as { query: AnyQuery }).query = (...args: unknown[]) => {
      const start = performance.now();
      const done = () => log.record("db", "query", start, performance.now());
      const last = args.at(-1);
      if (typeof last === "function") {
        args[args.length - 1] = (...results: unknown[]) => {
          done();
          (last as Callback)(...results);
        };
        return query(...args);
      }
      const result = query(...args);
      if (result instanceof Promise) return result.finally(done);
      return result; // a Submittable (cursor): not used by the harness
    };
  });
  const connect = pool.connect.bind(pool) as (callback?: Callback) => unknown;
  (pool as unknown as { connect: (callback?: Callback) => unknown }).connect = (callback?: Callback) => {
    const start = performance.now();
    const done = () => log.record("db", "checkout", start, performance.now());
    if (callback) {
      return connect((...results: unknown[]) => {
        done();
        callback(...results);
      });
    }
    return (connect() as Promise<unknown>).finally(done);
  };
}

/** Sum of the calls' time within [from, to], per kind and per `kind:name`. */
export function timeIn(
  calls: readonly Call[],
  from: number,
  to: number,
): Map<string, { ms: number; count: number }> {
  const totals = new Map<string, { ms: number; count: number }>();
  for (const call of calls) {
    const clipped = Math.min(call.end, to) - Math.max(call.start, from);
    if (clipped <= 0) continue;
    for (const key of [call.kind, `${call.kind}:${call.name}`]) {
      const t = totals.get(key) ?? { ms: 0, count: 0 };
      t.ms += clipped;
      t.count += 1;
      totals.set(key, t);
    }
  }
  return totals;
}

/** How long within [from, to] at least one call of `kind` was in flight. */
export function coveredBy(calls: readonly Call[], kind: Kind, from: number, to: number): number {
  const spans = calls
    .filter((c) => c.kind === kind && c.end > from && c.start < to)
    .map((c) => [Math.max(c.start, from), Math.min(c.end, to)] as const)
    .sort((a, b) => a[0] - b[0]);
  let covered = 0;
  let [curStart, curEnd] = [Number.NaN, Number.NaN];
  for (const [s, e] of spans) {
    if (Number.isNaN(curStart) || s > curEnd) {
      if (!Number.isNaN(curStart)) covered += curEnd - curStart;
      [curStart, curEnd] = [s, e];
    } else curEnd = Math.max(curEnd, e);
  }
  if (!Number.isNaN(curStart)) covered += curEnd - curStart;
  return covered;
}
