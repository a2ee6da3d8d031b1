/**
 * The fence transaction written by hand, with no harness: what a consumer's own code would send to
 * get the fence's guarantee, and so the baseline the harness's own cost is measured against.
 *
 *   BEGIN; mark; INSERT fence(s) … RETURNING   -- one message: beginWithFences, the shipped text
 *   the effect                                 -- one statement per job
 *   SELECT core.fence_commit_check(…); COMMIT  -- one message: the check migration 0023's deferred
 *                                                 trigger requires of every COMMIT of a fence
 *
 * No guard on the work's connection and no session resets: those are the harness's.
 */
import type pg from "pg";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import {
  beginWithFences,
  type FenceSet,
  type FencesInserted,
  fenceCommit,
} from "../../shared/db/queries/begin-with-fences.ts";
import { FINGERPRINT_BYTES } from "../../shared/envelope/fingerprint.ts";
import type { BenchJob, TransactionSteps } from "./harness-driver.ts";

/** The consumer every benchmark's effect belongs to. */
export const BENCH_CONSUMER = awardPointsConsumer.name;

/** A fingerprint's worth of bytes: the row the harness writes, without hashing in the client. */
const FINGERPRINT = Buffer.alloc(FINGERPRINT_BYTES, 0xab);
const FENCE_TTL_SECONDS = 7 * 24 * 3600;

/** The fences of `jobs`, as the harness would write them for the bench consumer. */
export function benchFences(jobs: readonly BenchJob[]): FenceSet {
  return {
    consumer: BENCH_CONSUMER,
    ttlSeconds: FENCE_TTL_SECONDS,
    jobs: jobs.map((job) => ({ ...job, fingerprint: FINGERPRINT })),
  };
}

/** BEGIN and the fences of `jobs`, in one message. */
export function beginFenced(client: pg.ClientBase, jobs: readonly BenchJob[]): Promise<FencesInserted> {
  return beginWithFences(client, benchFences(jobs));
}

/** The COMMIT a fence transaction needs: the check and COMMIT in one message. */
export async function commitFenced(client: pg.ClientBase, begun: FencesInserted): Promise<void> {
  if (begun.xid === null) throw new Error("no fence was inserted: nothing to commit");
  await client.query(fenceCommit(begun));
}

/** The steps of a fence transaction by hand, for transactionVariant. */
export const FENCED_STEPS: TransactionSteps<FencesInserted> = { begin: beginFenced, commit: commitFenced };
