/**
 * The per-invocation store, as Lambda's Node.js runtime keeps it on Managed Instances: the
 * runtime sets `AWS_LAMBDA_MAX_CONCURRENCY`, makes the AsyncLocalStorage-based InvokeStore
 * (`@aws/lambda-invoke-store`, published as `globalThis.awslambda.InvokeStore`) and runs each
 * invocation inside its own context holding its request id (and trace id). Powertools' Logger and
 * Metrics keep their per-invocation state there (the Lambda context a log line carries, the
 * metrics and metadata a flush writes) whenever that variable is set and a context is active;
 * without it, concurrent invocations in one process share one copy and each overwrites the others'.
 *
 * The local stack's pollers run several invocations at once in one process, so they run them the
 * same way: {@link concurrentInvocations} while any poller runs, each invocation through
 * {@link InvocationStore.run}.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { InvokeStoreBase } from "@aws/lambda-invoke-store";
import type { Context } from "aws-lambda";
import { MANAGED_INSTANCE_ENV } from "../shared/invocation/concurrency.ts";

/** Runs invocations each in a context of its own. */
export interface InvocationStore {
  /** Runs `invoke` inside a fresh per-invocation context carrying `context`'s request id. */
  run<T>(context: Context, invoke: () => Promise<T>): Promise<T>;
  /** Ends this holder's claim on the process's store and setting (the last one restores both). */
  release(): void;
}

/** A context per invocation, kept by AsyncLocalStorage: what the runtime's multi-concurrency store does. */
class PerInvocationStore extends InvokeStoreBase {
  readonly #contexts = new AsyncLocalStorage<Record<string | symbol, unknown>>();
  getContext() {
    return this.#contexts.getStore();
  }
  hasContext() {
    return this.#contexts.getStore() !== undefined;
  }
  get<T = unknown>(key: string | symbol): T | undefined {
    return this.#contexts.getStore()?.[key] as T | undefined;
  }
  set<T = unknown>(key: string | symbol, value: T): void {
    if (this.isProtectedKey(key)) throw new Error(`cannot change the Lambda context's ${String(key)}`);
    const context = this.#contexts.getStore();
    if (context === undefined) throw new Error("no invocation context is active");
    context[key] = value;
  }
  run<T>(context: Record<string | symbol, unknown>, fn: () => T): T {
    return this.#contexts.run(context, fn);
  }
}

/** While pollers hold it: the store published, and what was there (store, variable) before. */
let held:
  | { holders: number; store: InvokeStoreBase; previousStore: unknown; previousEnv: string | undefined }
  | undefined;

/**
 * The process's per-invocation store, for `concurrency` invocations at once. Published as the
 * runtime publishes it (`globalThis.awslambda.InvokeStore`) before `AWS_LAMBDA_MAX_CONCURRENCY` is
 * set, since Powertools refuses to log with the variable set and no store there. A store already
 * published that keeps a context per invocation is used as it is; one that keeps a single context
 * for the process (the AWS SDK makes one on its first call outside Lambda Managed Instances) is
 * replaced while the pollers run. A variable the environment set already is left as it is.
 */
export function concurrentInvocations(concurrency: number): InvocationStore {
  if (held === undefined) {
    const global = globalThis as { awslambda?: Record<string, unknown> };
    global.awslambda ??= {};
    const awslambda = global.awslambda;
    const previousStore = awslambda.InvokeStore;
    const store = keepsContextPerInvocation(previousStore) ? previousStore : new PerInvocationStore();
    awslambda.InvokeStore = store;
    const previousEnv = process.env[MANAGED_INSTANCE_ENV.maxConcurrency];
    if (previousEnv === undefined) process.env[MANAGED_INSTANCE_ENV.maxConcurrency] = String(concurrency);
    held = { holders: 0, store, previousStore, previousEnv };
  }
  const current = held;
  current.holders++;
  let released = false;
  return {
    // No trace id: nothing is traced by X-Ray locally, so the context carries the request id only.
    run: (context, invoke) =>
      current.store.run({ [InvokeStoreBase.PROTECTED_KEYS.REQUEST_ID]: context.awsRequestId }, invoke),
    release() {
      if (released) return;
      released = true;
      if (--current.holders > 0 || held !== current) return;
      held = undefined;
      if (current.previousEnv === undefined) delete process.env[MANAGED_INSTANCE_ENV.maxConcurrency];
      const awslambda = (globalThis as { awslambda?: Record<string, unknown> }).awslambda;
      if (awslambda) awslambda.InvokeStore = current.previousStore;
    },
  };
}

/**
 * Whether `store` keeps a context per invocation: a store made for one invocation at a time keeps
 * a single context for the whole process, and running concurrent invocations on it would mix them
 * exactly as having none does.
 */
function keepsContextPerInvocation(store: unknown): store is InvokeStoreBase {
  if (!(store instanceof InvokeStoreBase)) return false;
  const probe = Symbol("jobfence.invoke-store.probe");
  store.run({ [probe]: true }, () => {});
  return store.get(probe) === undefined;
}
