/**
 * The testing kit as a consumer author uses it, on the reference consumer: imports from the kit's
 * public entry and the consumer's own modules only, every outcome one call, every effect asserted
 * through the kit.
 */
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { deploymentMigrationSets } from "../../functions/migrate/sets.ts";
import { type ConsumerDefinition, PermanentJobError, stepKey } from "../../shared/index.ts";
import { type ConsumerTestKit, consumerTestKit, coreMigrationSet } from "../../testing/index.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

type AwardKit = ConsumerTestKit<typeof awardPointsConsumer.payload>;

/** The consumer's effect on one job, read from its own tables. */
async function ledgerOf(kit: AwardKit, jobId: string): Promise<{ points: number }[]> {
  return kit.query<{ points: number }>("SELECT points FROM award_points.ledger WHERE job_id = $1", [jobId]);
}

async function balanceOf(kit: AwardKit, tenantId: string, userId: string): Promise<number | undefined> {
  const rows = await kit.query<{ balance: string }>(
    "SELECT balance FROM award_points.balances WHERE tenant_id = $1 AND user_id = $2",
    [tenantId, userId],
  );
  return rows[0] === undefined ? undefined : Number(rows[0].balance);
}

it("stays out of production bundles: neither the library's entry nor a consumer's reaches it", async () => {
  const { build } = await import("esbuild");
  for (const entry of ["shared/index.ts", "functions/award-points/handler.ts"]) {
    const { metafile } = await build({
      entryPoints: [entry],
      bundle: true,
      write: false,
      metafile: true,
      platform: "node",
      format: "esm",
      packages: "external",
      logLevel: "silent",
    });
    const modules = Object.keys(metafile.inputs);
    const packages = Object.values(metafile.inputs).flatMap((i) => i.imports.map((m) => m.path));
    expect(modules.filter((m) => m.startsWith("testing/") || m.startsWith("local/"))).toEqual([]);
    expect(packages.filter((p) => p === "fauxqs" || p === "vitest")).toEqual([]);
  }
});

describe("a consumer with a step", () => {
  let db: TestDatabase;
  let kit: ConsumerTestKit<typeof awardPointsConsumer.payload>;
  const calls: string[] = [];
  beforeAll(async () => {
    db = await createTestDatabase();
    kit = await consumerTestKit(
      {
        name: awardPointsConsumer.name,
        payload: awardPointsConsumer.payload,
        steps: async (job) => ({
          receipt: await job.step("receipt", z.object({ id: z.string() }), async (key) => {
            calls.push(key);
            return { id: `rc_${calls.length}`, ignored: true };
          }),
        }),
        work: async (job, tx) => {
          await tx.query(
            "INSERT INTO award_points.ledger (job_id, tenant_id, user_id, points) VALUES ($1, $2, $3, 1)",
            [job.jobId, job.tenantId, job.steps.receipt.id],
          );
        },
      },
      { databaseUrl: db.url },
    );
  });
  afterAll(async () => {
    await kit?.close();
    await db?.drop();
  });

  it("reads what a job's steps recorded, with each provider key; a duplicate calls nothing", async () => {
    const job = kit.job({ user_id: "u-steps", points: 1 });
    const delivery = await kit.deliver(job, job);
    expect(delivery.applied).toHaveLength(1);
    expect(calls).toEqual([stepKey("award-points", job.job_id, "receipt")]);
    expect(await kit.steps(job.job_id)).toEqual([
      {
        step: "receipt",
        position: 1,
        key: calls[0],
        result: { id: "rc_1" },
        calledAt: expect.any(Date),
        recordedAt: expect.any(Date),
      },
    ]);
    expect(await kit.steps("never-ran")).toEqual([]);
  });
});

describe("on a migrated database", () => {
  let db: TestDatabase;
  let kit: AwardKit;
  beforeAll(async () => {
    db = await createTestDatabase();
    kit = await consumerTestKit(awardPointsConsumer, { databaseUrl: db.url });
  });
  afterAll(async () => {
    await kit?.close();
    await db?.drop();
  });

  it("runs in the consumer's own role, on its own queue", () => {
    expect(kit.role).toBe("jobfence_consumer_award_points");
    expect(kit.queue.name).toBe("award-points");
    expect(kit.handler.consumer).toBe("award-points");
  });

  it("applies a job once: its fence, its ledger entry and its balance", async () => {
    const job = kit.job({ user_id: "u-once", points: 25 });
    const delivery = await kit.deliver(job);

    expect(delivery.results).toMatchObject([{ jobId: job.job_id, status: "applied", acked: true }]);
    expect(await kit.fence(job.job_id)).toMatchObject({
      jobId: job.job_id,
      consumer: "award-points",
      tenantId: job.tenant_id,
    });
    expect(await ledgerOf(kit, job.job_id)).toEqual([{ points: 25 }]);
    expect(await balanceOf(kit, job.tenant_id, "u-once")).toBe(25);
    expect(await kit.deadLetters({ jobId: job.job_id })).toEqual([]);
  });

  it("absorbs a duplicate, in the same batch and in a later one", async () => {
    const job = kit.job({ user_id: "u-dup", points: 7 });
    const together = await kit.deliver(job, job);
    expect(together.results.map((r) => r.status)).toEqual(["applied", "duplicate"]);
    const later = await kit.deliver(job);
    expect(later.duplicates.map((r) => r.jobId)).toEqual([job.job_id]);

    expect(await ledgerOf(kit, job.job_id)).toEqual([{ points: 7 }]);
    expect(await balanceOf(kit, job.tenant_id, "u-dup")).toBe(7);
  });

  it("dead-letters a conflict: the same job id with another payload, nothing applied twice", async () => {
    const first = kit.job({ user_id: "u-conflict", points: 5 });
    const other = kit.job({ user_id: "u-conflict", points: 500 }, { jobId: first.job_id });
    const delivery = await kit.deliver(first, other);

    expect(delivery.results.map((r) => [r.status, r.kind])).toEqual([
      ["applied", undefined],
      ["dead-lettered", "conflict"],
    ]);
    expect(await kit.deadLetters({ jobId: first.job_id })).toMatchObject([
      {
        kind: "conflict",
        status: "pending_review",
        envelope: { job_id: first.job_id, payload: { user_id: "u-conflict", points: 500 } },
      },
    ]);
    expect(await ledgerOf(kit, first.job_id)).toEqual([{ points: 5 }]);
    expect(await balanceOf(kit, first.tenant_id, "u-conflict")).toBe(5);
  });

  it("dead-letters a payload the schema refuses as poison, with no retry and no effect", async () => {
    const job = kit.uncheckedJob({ user_id: "u-poison", points: -3 });
    const delivery = await kit.deliver(job);

    expect(delivery.deadLettered).toMatchObject([{ jobId: job.job_id, kind: "poison", acked: true }]);
    const [row] = await kit.deadLetters({ jobId: job.job_id });
    expect(row).toMatchObject({ kind: "poison", status: "pending_review", attempts: 1 });
    expect(row?.error.message).toMatch(/invalid-payload/);
    expect(await kit.fence(job.job_id)).toBeUndefined();
    expect(await ledgerOf(kit, job.job_id)).toEqual([]);
  });

  it("dead-letters a body that is not JSON as poison, filed under the message's stand-in id", async () => {
    const delivery = await kit.deliver("{ this is not json");
    const [result] = delivery.results;

    expect(result).toMatchObject({ status: "dead-lettered", kind: "poison", acked: true });
    const rows = await kit.deadLetters({ jobId: result?.jobId as string });
    expect(rows).toMatchObject([{ kind: "poison", tenantId: null, envelope: null }]);
    expect(rows[0]?.error.message).toMatch(/unparseable-body/);
  });

  it("dead-letters a PermanentJobError as hard at once, and rolls its work back", async () => {
    const job = kit.failing(
      kit.job({ user_id: "u-closed", points: 9 }),
      new PermanentJobError("the account is closed"),
    );
    const delivery = await kit.deliver(job);

    expect(delivery.deadLettered).toMatchObject([{ jobId: job.job_id, kind: "hard" }]);
    expect(await kit.deadLetters({ jobId: job.job_id })).toMatchObject([
      { kind: "hard", status: "pending_review", attempts: 1, error: { message: "the account is closed" } },
    ]);
    expect(await kit.fence(job.job_id)).toBeUndefined();
    expect(await ledgerOf(kit, job.job_id)).toEqual([]);
    expect(
      kit.alerts.filter((a) => (a.detail as { job_id?: string } | undefined)?.job_id === job.job_id),
    ).toHaveLength(1);
  });

  it("retries a transient failure, and applies the job on its next delivery", async () => {
    const job = kit.failing(kit.job({ user_id: "u-flaky", points: 4 }), new Error("the partner timed out"), {
      times: 1,
    });
    const first = await kit.deliver(job);
    expect(first.retried).toMatchObject([{ jobId: job.job_id, acked: false, receiveCount: 1 }]);
    expect(await kit.fence(job.job_id)).toBeUndefined();

    const second = await kit.redeliver();
    expect(second.results).toMatchObject([{ jobId: job.job_id, status: "applied", receiveCount: 2 }]);
    expect(await ledgerOf(kit, job.job_id)).toEqual([{ points: 4 }]);
    expect((await kit.redeliver()).results).toEqual([]);
  });

  it("mixes every outcome in one batch, each message reported on its own", async () => {
    const applied = kit.job({ user_id: "u-mix", points: 1 });
    const delivery = await kit.deliver(
      applied,
      applied,
      kit.job({ user_id: "u-mix", points: 2 }, { jobId: applied.job_id }),
      kit.uncheckedJob({ user_id: "" }),
      "not json at all",
    );
    expect(delivery.results.map((r) => r.status)).toEqual([
      "applied",
      "duplicate",
      "dead-lettered",
      "dead-lettered",
      "dead-lettered",
    ]);
    expect(delivery.deadLettered.map((r) => r.kind)).toEqual(["conflict", "poison", "poison"]);
    expect(delivery.invocations).toBe(1);
    expect(delivery.unacked).toEqual([]);
  });
});

describe("on a FIFO queue, committing per batch, with two attempts", () => {
  let db: TestDatabase;
  let kit: AwardKit;
  beforeAll(async () => {
    db = await createTestDatabase();
    kit = await consumerTestKit(awardPointsConsumer, {
      databaseUrl: db.url,
      fifo: true,
      commitMode: "batch",
      retryPolicy: { maxAttempts: 2, baseSeconds: 1, capSeconds: 1 },
    });
  });
  afterAll(async () => {
    await kit?.close();
    await db?.drop();
  });

  it("runs the same guarantees in one batch transaction", async () => {
    expect(kit.queue.name).toBe("award-points.fifo");
    expect(kit.handler.commitMode).toBe("batch");
    const job = kit.job({ user_id: "u-fifo", points: 2 });
    const conflict = kit.job({ user_id: "u-fifo", points: 3 }, { jobId: job.job_id });
    const delivery = await kit.deliver(job, job, conflict);

    expect(delivery.results.map((r) => [r.status, r.kind])).toEqual([
      ["applied", undefined],
      ["duplicate", undefined],
      ["dead-lettered", "conflict"],
    ]);
    expect(await ledgerOf(kit, job.job_id)).toEqual([{ points: 2 }]);
  });

  it("dead-letters a transient failure as exhausted on its last attempt", async () => {
    const job = kit.failing(kit.job({ user_id: "u-down", points: 1 }), new Error("the partner is down"));
    expect((await kit.deliver(job)).retried).toMatchObject([{ jobId: job.job_id }]);
    const last = await kit.redeliver();

    expect(last.deadLettered).toMatchObject([{ jobId: job.job_id, kind: "exhausted", receiveCount: 2 }]);
    expect(await kit.deadLetters({ jobId: job.job_id })).toMatchObject([
      { kind: "exhausted", attempts: 2, error: { message: "the partner is down" } },
    ]);
    expect(await ledgerOf(kit, job.job_id)).toEqual([]);
  });
});

describe("on a FIFO queue with one message group", () => {
  let db: TestDatabase;
  let kit: AwardKit;
  beforeAll(async () => {
    db = await createTestDatabase();
    kit = await consumerTestKit(awardPointsConsumer, {
      databaseUrl: db.url,
      fifo: true,
      groupOf: () => "one-group",
      retryPolicy: { maxAttempts: 3, baseSeconds: 1, capSeconds: 1 },
    });
  });
  afterAll(async () => {
    await kit?.close();
    await db?.drop();
  });

  it("reports the rest of a group behind a retry as returned, and redelivers the group in order", async () => {
    const first = kit.failing(kit.job({ user_id: "u-group", points: 1 }), new Error("transient"), {
      times: 1,
    });
    const second = kit.job({ user_id: "u-group", points: 2 });
    const delivery = await kit.deliver(first, second);

    expect(delivery.results.map((r) => [r.status, r.acked])).toEqual([
      ["retry", false],
      ["returned", false],
    ]);
    expect(delivery.results[1]?.outcome).toBeUndefined();
    expect(delivery.unacked.map((r) => r.jobId)).toEqual([first.job_id, second.job_id]);

    const again = await kit.redeliver();
    expect(again.results.map((r) => [r.jobId, r.status])).toEqual([
      [first.job_id, "applied"],
      [second.job_id, "applied"],
    ]);
    expect(await ledgerOf(kit, first.job_id)).toEqual([{ points: 1 }]);
    expect(await ledgerOf(kit, second.job_id)).toEqual([{ points: 2 }]);
    expect((await kit.redeliver()).results).toEqual([]);
  });
});

describe("when the record budget runs out", () => {
  const payload = z.object({ n: z.number() });
  const slow = {
    name: "slow-one",
    payload,
    work: async (_job, tx) => {
      await tx.query("SELECT pg_sleep(2.2)");
    },
  } satisfies ConsumerDefinition<typeof payload>;
  let db: TestDatabase;
  let kit: ConsumerTestKit<typeof payload>;
  beforeAll(async () => {
    db = await createTestDatabase();
    kit = await consumerTestKit(slow, {
      databaseUrl: db.url,
      configure: {
        functionTimeoutSeconds: 4,
        lockTimeoutMs: 500,
        returnReserveMs: 500,
        recordBudgetMs: 2000,
      },
    });
  });
  afterAll(async () => {
    await kit?.close();
    await db?.drop();
  });

  it("reports the records the invocation did not start as returned, and redelivers them", async () => {
    const jobs = [kit.job({ n: 1 }), kit.job({ n: 2 }), kit.job({ n: 3 })];
    const delivery = await kit.deliver(...jobs);

    expect(delivery.invocations).toBe(1);
    expect(delivery.results.map((r) => [r.status, r.acked])).toEqual([
      ["applied", true],
      ["returned", false],
      ["returned", false],
    ]);

    const second = await kit.redeliver();
    expect(second.results.map((r) => [r.jobId, r.status])).toEqual([
      [jobs[1]?.job_id, "applied"],
      [jobs[2]?.job_id, "returned"],
    ]);
    const third = await kit.redeliver();
    expect(third.results.map((r) => [r.jobId, r.status])).toEqual([[jobs[2]?.job_id, "applied"]]);
    // Returned unrun, they spent no attempt: nothing was recorded against them.
    expect(await kit.deadLetters()).toEqual([]);
    expect(await kit.redeliver()).toMatchObject({ results: [], invocations: 0 });
  }, 60_000);
});

describe("on an empty database, given the migrations", () => {
  let db: TestDatabase;
  let kit: AwardKit;
  beforeAll(async () => {
    db = await createTestDatabase({ empty: true });
    // What an author outside this repository passes: the core set and the consumer's own.
    const own = deploymentMigrationSets().find((s) => s.consumer === "award-points");
    if (!own) throw new Error("the deployment has no award-points migration set");
    kit = await consumerTestKit(awardPointsConsumer, {
      databaseUrl: db.url,
      migrations: [coreMigrationSet(), own],
    });
  });
  afterAll(async () => {
    await kit?.close();
    await db?.drop();
  });

  it("applies them itself, and the consumer runs on what they created", async () => {
    const applied = await kit.query<{ set: string; n: number }>(
      `SELECT migration_set AS set, count(*)::int AS n FROM core.schema_migrations
        GROUP BY migration_set ORDER BY migration_set`,
    );
    const own = deploymentMigrationSets().find((s) => s.consumer === "award-points");
    expect(applied).toEqual([
      { set: "award-points", n: own?.migrations.length },
      { set: "core", n: coreMigrationSet().migrations.length },
    ]);

    const job = kit.job({ user_id: "u-fresh", points: 3 }, { tenantId: "t-fresh" });
    expect((await kit.deliver(job, job)).results.map((r) => r.status)).toEqual(["applied", "duplicate"]);
    expect(await balanceOf(kit, "t-fresh", "u-fresh")).toBe(3);
  });

  it("leaves the consumer's schema as the committed description has it", async () => {
    // The schema snapshot test owns (and refreshes) the file; this only reads it.
    const committed = readFileSync(
      new URL("../../functions/award-points/schema.txt", import.meta.url),
      "utf8",
    );
    expect(await kit.schema()).toBe(committed);
  });
});
