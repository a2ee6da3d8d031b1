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
import { InvokeStore, InvokeStoreBase } from "@aws/lambda-invoke-store";
import type { Context } from "aws-lambda";
import { MANAGED_INSTANCE_ENV } from "../shared/invocation/concurrency.ts";

/** Runs invocations each in a context of its own. */
export interface InvocationStore {
  /** Runs `invoke` inside a fresh per-invocation context carrying `context`'s request id. */
  run<T>(context: Context, invoke: () => Promise<T>): Promise<T>;
  /** Ends this holder's claim on the process's concurrency setting (the last one restores it). */
  release(): void;
}

/** Holders of the concurrency setting, and what the variable was before the first of them. */
let holders = 0;
let before: string | undefined;

/**
 * The process's multi-concurrency invoke store, for `concurrency` invocations at once: made (or
 * taken, when the process already has one) before `AWS_LAMBDA_MAX_CONCURRENCY` is set, since
 * Powertools refuses to log with the variable set and no store published. A variable the
 * environment set already is left as it is.
 */
export async function concurrentInvocations(concurrency: number): Promise<InvocationStore> {
  const store = await InvokeStore.getInstanceAsync(true);
  refuseSharedStore(store);
  if (holders++ === 0) {
    before = process.env[MANAGED_INSTANCE_ENV.maxConcurrency];
    if (before === undefined) process.env[MANAGED_INSTANCE_ENV.maxConcurrency] = String(concurrency);
  }
  let released = false;
  return {
    run: (context, invoke) =>
      // No trace id: nothing is traced by X-Ray locally, so the context carries the request id only.
      store.run({ [InvokeStoreBase.PROTECTED_KEYS.REQUEST_ID]: context.awsRequestId }, invoke),
    release() {
      if (released) return;
      released = true;
      if (--holders === 0 && before === undefined) delete process.env[MANAGED_INSTANCE_ENV.maxConcurrency];
    },
  };
}

/**
 * A store made earlier for one invocation at a time keeps a single context for the whole process:
 * running concurrent invocations on it would mix them exactly as having none does.
 */
function refuseSharedStore(store: InvokeStoreBase): void {
  const probe = Symbol("jobfence.invoke-store.probe");
  store.run({ [probe]: true }, () => {});
  if (store.get(probe) !== undefined) {
    throw new Error(
      "this process's Lambda invoke store keeps one context for every invocation (it was made for one " +
        "invocation at a time); concurrent invocations cannot be kept apart in it",
    );
  }
}
