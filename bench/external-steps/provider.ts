/**
 * The fake payment provider the benchmark charges through, from one place: the vendored stand-in
 * until jobfence/testing's `startFakeProvider` reaches this branch.
 */
export {
  type FakeProvider,
  type LedgerEntry,
  type RequestEntry,
  startFakeProvider,
} from "./vendored-fake-provider.ts";
