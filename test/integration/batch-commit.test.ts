/**
 * What batch-commit mode adds to the shared guarantees (consumer-batch-commit.test.ts runs the
 * whole consumer suite in this mode): a batch commits in one transaction, a failing record is
 * taken out and the batch redone, a failed COMMIT fails the batch, and the fence costs no round
 * trip of its own in either mode.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awardPoints } from "../../functions/award-points/award.ts";
import { awardPointsConsumer, type awardPointsPayload } from "../../functions/award-points/consumer.ts";
import type { CommitMode, ConsumerDefinition } from "../../shared/consumer.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import { MAX_BATCH_REDOS } from "../../shared/fence/batch-transaction.ts";
import type { WorkQueries } from "../../shared/fence/work-transaction.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  effectsOf,
  invoke,
  sqsRecord,
} from "../support/consumer-harness.ts";

let bed: ConsumerTestBed;
beforeAll(async () => {
  bed = await consumerTestBed({ commitMode: "batch" });
  await bed.db.withClient((c) =>
    c.query(`CREATE TABLE public.deferred_check (id int, CONSTRAINT deferred_unique UNIQUE (id) DEFERRABLE INITIALLY DEFERRED);
             GRANT INSERT ON public.deferred_check TO jobfence_consumer_award_points;`),
  );
});
afterAll(async () => {
  await bed?.close();
});

type AwardDefinition = ConsumerDefinition<typeof awardPointsPayload>;

/** award-points whose work runs `before` first and counts its runs per job. */
function counted(
  before: (jobId: string, tx: Parameters<AwardDefinition["work"]>[1]) => Promise<void> = async () => {},
): { definition: AwardDefinition; runs: Map<string, number> } {
  const runs = new Map<string, number>();
  return {
    runs,
    definition: {
      ...awardPointsConsumer,
      work: async (job, tx) => {
        runs.set(job.jobId, (runs.get(job.jobId) ?? 0) + 1);
        await before(job.jobId, tx);
        await awardPointsConsumer.work(job, tx);
      },
    },
  };
}

const records = (prefix: string, count: number) =>
  Array.from({ length: count }, (_, i) =>
    sqsRecord(JSON.stringify(award(`${prefix}-${i}`, 1, `u-${prefix}`)), { messageId: `${prefix}-m${i}` }),
  );

/** The distinct transactions (xmin) that wrote the fences of `jobIds`. */
async function fenceTransactions(jobIds: readonly string[]): Promise<number> {
  return bed.db.withClient(async (c) => {
    const { rows } = await c.query<{ n: number }>(
      "SELECT count(DISTINCT xmin::text)::int AS n FROM core.processed_jobs WHERE job_id = ANY ($1)",
      [jobIds],
    );
    return rows[0]?.n ?? 0;
  });
}

/** The error class of the job's dead letter. */
async function deadLetterClass(jobId: string): Promise<string | undefined> {
  return bed.db.withClient(async (c) => {
    const { rows } = await c.query<{ class: string }>(
      "SELECT last_error ->> 'class' AS class FROM core.dead_letters WHERE job_id = $1",
      [jobId],
    );
    return rows[0]?.class;
  });
}

const ids = (prefix: string, count: number, except: readonly number[] = []) =>
  Array.from({ length: count }, (_, i) => i)
    .filter((i) => !except.includes(i))
    .map((i) => `${prefix}-${i}`);

describe("batch-commit mode", () => {
  it("commits a whole batch in one transaction: every fence and effect, one xmin", async () => {
    const { definition, runs } = counted();
    expect(await invoke(bed.consumer(definition), records("one", 10))).toEqual([]);
    expect(await fenceTransactions(ids("one", 10))).toBe(1);
    for (const jobId of ids("one", 10)) {
      expect(await effectsOf(bed.db, jobId)).toMatchObject({ ledger: 1, fences: 1 });
      expect(runs.get(jobId)).toBe(1);
    }
  });

  it("the same job twice in one batch applies once and acks both", async () => {
    const handler = bed.consumer(awardPointsConsumer);
    const body = JSON.stringify(award("twice-1", 3, "u-twice"));
    expect(
      await invoke(handler, [sqsRecord(body, { messageId: "tw-a" }), sqsRecord(body, { messageId: "tw-b" })]),
    ).toEqual([]);
    expect(await effectsOf(bed.db, "twice-1")).toMatchObject({ ledger: 1, fences: 1 });
  });

  it("a failing record is taken out and the batch redone: its batch-mates commit together, it retries", async () => {
    const { definition, runs } = counted(async (jobId) => {
      if (jobId === "redo-4") throw new Error("transient trouble");
    });
    expect(await invoke(bed.consumer(definition), records("redo", 8))).toEqual(["redo-m4"]);
    expect(await fenceTransactions(ids("redo", 8, [4]))).toBe(1);
    expect(await effectsOf(bed.db, "redo-4")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
    // Records before the failure ran twice (first attempt rolled back), those after it once.
    expect([0, 1, 2, 3].map((i) => runs.get(`redo-${i}`))).toEqual([2, 2, 2, 2]);
    expect([5, 6, 7].map((i) => runs.get(`redo-${i}`))).toEqual([1, 1, 1]);
  });

  it("a hard failure in a batch is dead-lettered and acked while the rest commits", async () => {
    const { definition } = counted(async (jobId) => {
      if (jobId === "hard-1") throw new PermanentJobError("account closed");
    });
    expect(await invoke(bed.consumer(definition), records("hard", 3))).toEqual([]);
    expect(await effectsOf(bed.db, "hard-1")).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
    expect(await fenceTransactions(["hard-0", "hard-2"])).toBe(1);
  });

  it(`after ${MAX_BATCH_REDOS + 1} failures the rest runs one transaction per record, still exactly once`, async () => {
    const failing = new Set(["many-1", "many-3", "many-5", "many-7"]);
    const { definition, runs } = counted(async (jobId) => {
      if (failing.has(jobId)) throw new Error("fails every time");
    });
    const failures = await invoke(bed.consumer(definition), records("many", 10));
    expect(failures.sort()).toEqual(["many-m1", "many-m3", "many-m5", "many-m7"]);
    const applied = ids("many", 10).filter((id) => !failing.has(id));
    for (const jobId of applied)
      expect(await effectsOf(bed.db, jobId)).toMatchObject({ ledger: 1, fences: 1 });
    // The batch gave up after MAX_BATCH_REDOS + 1 failures: what was left ran in its own transactions.
    expect(await fenceTransactions(applied)).toBeGreaterThan(1);
    // A failing record runs once in the batch attempts and, if left over, once on its own.
    for (const jobId of failing) expect(runs.get(jobId)).toBe(1);
  });

  // Issue 14: a COMMIT that fails names no culprit. Failing the whole batch made every
  // innocent record spend an attempt (and, on the last one, three dead letters where per-record
  // mode writes one); each record is now redone in a transaction of its own, which finds it.
  it("a failed COMMIT is redone one record per transaction: only the culprit fails, the rest apply once", async () => {
    let breakCommit = true;
    const { definition } = counted(async (jobId, tx) => {
      if (breakCommit && jobId === "cf-2")
        await tx.query("INSERT INTO public.deferred_check VALUES (7), (7)");
    });
    const handler = bed.consumer(definition);
    const batch = records("cf", 4);
    expect(await invoke(handler, batch)).toEqual(["cf-m2"]);
    for (const jobId of ["cf-0", "cf-1", "cf-3"]) {
      expect(await effectsOf(bed.db, jobId)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
    }
    expect(await effectsOf(bed.db, "cf-2")).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });
    breakCommit = false;
    expect(await invoke(handler, batch)).toEqual([]);
    expect(await invoke(handler, batch)).toEqual([]);
    for (const jobId of ids("cf", 4))
      expect(await effectsOf(bed.db, jobId)).toMatchObject({ ledger: 1, fences: 1, deadLetters: 0 });
  });

  it("a batch-mate's SET LOCAL search_path fails the COMMIT check: redone per record, only its job fails", async () => {
    // The next record's work would run with it: the check at COMMIT names no culprit, so the batch
    // is redone one record per transaction, where the record that changed it fails on its own.
    const { definition, runs } = counted(async (jobId, tx) => {
      if (jobId === "scope-1") await tx.query("SET LOCAL search_path = pg_catalog");
    });
    expect(await invoke(bed.consumer(definition), records("scope", 4))).toEqual([]);
    const scoped = await effectsOf(bed.db, "scope-1");
    expect(scoped).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
    expect(await deadLetterClass("scope-1")).toBe("TransactionControlError");
    for (const jobId of ["scope-0", "scope-2", "scope-3"]) {
      expect(await effectsOf(bed.db, jobId)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
      expect(runs.get(jobId)).toBe(2);
    }
  });

  it.each([
    ["SET LOCAL DateStyle", "SET LOCAL DateStyle = 'SQL, DMY'"],
    [
      "a temporary table shadowing the table its mates write",
      "CREATE TEMP TABLE batch_seen (job_id text, datestyle text)",
    ],
  ])("a batch-mate's %s does not reach the later works: the batch is redone per record", async (_, sql) => {
    const prefix = sql.startsWith("SET") ? "seen-d" : "seen-t";
    await bed.db.withClient((c) =>
      c.query(
        "CREATE TABLE IF NOT EXISTS public.batch_seen (job_id text, datestyle text); GRANT INSERT, SELECT ON public.batch_seen TO PUBLIC",
      ),
    );
    const { definition } = counted(async (jobId, tx) => {
      if (jobId === `${prefix}-0`) await tx.query(sql);
      // Unqualified, as a work may write its own tables: a temporary table of the name would take it.
      await tx.query("INSERT INTO batch_seen (job_id, datestyle) VALUES ($1, current_setting('DateStyle'))", [
        jobId,
      ]);
    });
    expect(await invoke(bed.consumer(definition), records(prefix, 4))).toEqual([]);
    const { rows } = await bed.db.withClient((c) =>
      c.query<{ job_id: string; datestyle: string }>(
        "SELECT job_id, datestyle FROM public.batch_seen WHERE job_id LIKE $1 ORDER BY job_id",
        [`${prefix}-%`],
      ),
    );
    // Each later record's effect committed once, in the session's own settings.
    const mates = rows.filter((r) => r.job_id !== `${prefix}-0`);
    expect(mates).toEqual([1, 2, 3].map((i) => ({ job_id: `${prefix}-${i}`, datestyle: "ISO, MDY" })));
    for (const i of [1, 2, 3])
      expect(await effectsOf(bed.db, `${prefix}-${i}`)).toMatchObject({ ledger: 1, fences: 1 });
  });

  it.each([
    ["a COMMIT the server refuses", "COMMIT AND NO CHAIN"],
    ["a ROLLBACK", "ROLLBACK AND NO CHAIN"],
  ])(
    "a work that sends %s and swallows the error is the one taken out: its batch-mates commit",
    async (_, sql) => {
      const prefix = sql.startsWith("COMMIT") ? "ends-c" : "ends-r";
      const { definition } = counted(async (jobId, tx) => {
        if (jobId === `${prefix}-1`) await tx.query(sql).catch(() => undefined);
      });
      expect(await invoke(bed.consumer(definition), records(prefix, 4))).toEqual([]);
      expect(await effectsOf(bed.db, `${prefix}-1`)).toEqual({ ledger: 0, fences: 0, deadLetters: 1 });
      expect(await deadLetterClass(`${prefix}-1`)).toBe("TransactionControlError");
      const rest = [0, 2, 3].map((i) => `${prefix}-${i}`);
      for (const jobId of rest)
        expect(await effectsOf(bed.db, jobId)).toMatchObject({ ledger: 1, fences: 1 });
      expect(await fenceTransactions(rest)).toBe(1);
    },
  );

  it("FIFO: a failure holds back the rest of its group, other groups commit in the batch", async () => {
    const { definition, runs } = counted(async (jobId) => {
      if (jobId === "ff-a1") throw new Error("a1 fails");
    });
    const arn = "arn:aws:sqs:eu-west-1:000000000000:award-points.fifo";
    const rec = (job: string, group: string) =>
      sqsRecord(JSON.stringify(award(job, 1, `u-${job}`)), {
        messageId: `m-${job}`,
        groupId: group,
        queueArn: arn,
      });
    const failures = await invoke(bed.consumer(definition), [
      rec("ff-a0", "a"),
      rec("ff-a1", "a"),
      rec("ff-b0", "b"),
      rec("ff-a2", "a"),
      rec("ff-b1", "b"),
    ]);
    expect(failures).toEqual(["m-ff-a1", "m-ff-a2"]);
    expect(runs.get("ff-a2")).toBeUndefined();
    expect(await effectsOf(bed.db, "ff-a2")).toMatchObject({ ledger: 0, fences: 0 });
    expect(await fenceTransactions(["ff-a0", "ff-b0", "ff-b1"])).toBe(1);
  });

  it("two batches sharing jobs in opposite orders neither deadlock nor double-apply", async () => {
    const jobs = Array.from({ length: 20 }, (_, i) => `xo-${String(i).padStart(2, "0")}`);
    const body = (jobId: string) => JSON.stringify(award(jobId, 1, "u-xo"));
    const forward = jobs.map((id, i) => sqsRecord(body(id), { messageId: `xo-f${i}` }));
    const backward = [...jobs].reverse().map((id, i) => sqsRecord(body(id), { messageId: `xo-b${i}` }));
    for (let round = 0; round < 3; round++) {
      const a = bed.consumer(awardPointsConsumer);
      const b = bed.consumer(awardPointsConsumer);
      const [fa, fb] = await Promise.all([invoke(a, forward), invoke(b, backward)]);
      expect([...fa, ...fb]).toEqual([]);
    }
    for (const jobId of jobs) expect(await effectsOf(bed.db, jobId)).toMatchObject({ ledger: 1, fences: 1 });
  });
});

describe("round trips", () => {
  /** Query calls (one round trip each) on the consumer's connections while `records` are handled. */
  async function roundTrips(
    commitMode: CommitMode,
    prefix: string,
    count: number,
    withFollowUp: boolean,
  ): Promise<number> {
    const pool = createPool({ connectionString: bed.db.url, role: consumerRoleName("award-points"), max: 1 });
    let calls = 0;
    const wrapped = new WeakSet<object>();
    pool.on("acquire", (client) => {
      if (wrapped.has(client)) return;
      wrapped.add(client);
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as { query: unknown }).query = (...args: unknown[]) => {
        calls += 1;
        return query(...args);
      };
    });
    // The effect alone (one statement), or the reference work: the effect and its follow-up.
    const definition = withFollowUp
      ? { ...awardPointsConsumer, commitMode }
      : {
          name: awardPointsConsumer.name,
          payload: awardPointsConsumer.payload,
          commitMode,
          work: async (job: Parameters<AwardDefinition["work"]>[0], tx: WorkQueries) =>
            awardPoints(tx, {
              jobId: job.jobId,
              tenantId: job.tenantId,
              userId: job.payload.user_id,
              points: job.payload.points,
            }),
        };
    // The bed ends the pool with the others.
    const handler = bed.consumer(definition, { pool });
    expect(await invoke(handler, records(prefix, count))).toEqual([]);
    return calls;
  }

  it("the fence adds none: per-record = BEGIN+fence, the work's statement, COMMIT, as bare work would", async () => {
    // The effect is one statement, so a bare transaction is BEGIN, work, COMMIT: 3.
    expect(await roundTrips("per-record", "rt-p", 10, false)).toBe(10 * 3);
  });

  it("batch: one BEGIN+fences, one statement per record, one COMMIT", async () => {
    expect(await roundTrips("batch", "rt-b", 10, false)).toBe(1 + 10 + 1);
  });

  it("a follow-up costs one INSERT in the transaction and, after COMMIT, the relay's one DELETE", async () => {
    expect(await roundTrips("per-record", "rt-pf", 10, true)).toBe(10 * (3 + 1 + 1));
    // Batch mode writes the batch's follow-ups in one INSERT and deletes them in one statement.
    expect(await roundTrips("batch", "rt-bf", 10, true)).toBe(1 + 10 + 1 + 1 + 1);
  });
});
