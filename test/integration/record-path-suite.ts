/**
 * The record path's classes of loss and folding (one suite, run in both commit modes by
 * consumer.test.ts and consumer-batch-commit.test.ts), against real PostgreSQL as the consumer
 * role, the SQS emulator and the EventBridge sink:
 *
 * - a body the harness accepts and PostgreSQL refuses can never make its dead letter unwritable;
 * - replay sends exactly the bytes received, whatever they look like;
 * - one job id carrying two different jobs is a conflict, never a silent duplicate;
 * - each distinct failed body of a job gets its own dead letter, and replay tells them apart;
 * - the work cannot end the transaction it is given or change it for a batch-mate, and what it
 *   changes of its session does not reach the next job on the connection.
 */
import type { Message } from "@aws-sdk/client-sqs";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { awardPointsConsumer, type awardPointsPayload } from "../../functions/award-points/consumer.ts";
import type { CommitMode, ConsumerDefinition, HostedConsumer } from "../../shared/consumer.ts";
import { createPool } from "../../shared/db/pool.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { replayDeadLetter } from "../../shared/dead-letters/replay.ts";
import { replayMessage } from "../../shared/dead-letters/replay-message.ts";
import { messageIdStandIn } from "../../shared/envelope/envelope.ts";
import { jobFingerprint } from "../../shared/envelope/fingerprint.ts";
import { ReplayConflictError } from "../../shared/errors/dead-letter.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  invoke,
  sqsRecord,
} from "../support/consumer-harness.ts";
import { receiveAll } from "../support/sqs.ts";

/** A dead letter as these tests read it. */
interface Row {
  id: string;
  job_id: string;
  error_kind: string;
  status: string;
  body_form: string;
  body: string | null;
  body_utf16: Buffer | null;
  payload: unknown;
  job_fingerprint: Buffer | null;
  fence_fingerprint: Buffer | null;
  queue: string;
  message_attributes: Record<string, unknown>;
  last_error: { class: string; message: string };
  tenant_id: string | null;
}

/** `error` with one property redefined (a getter, or a value of the wrong type). */
function withProperty<E extends object>(error: E, key: string, descriptor: PropertyDescriptor): E {
  Object.defineProperty(error, key, { configurable: true, ...descriptor });
  return error;
}

/** Defines the suite for `commitMode`. */
export function recordPathSuite(commitMode: CommitMode): void {
  let bed: ConsumerTestBed;
  let ops: pg.Pool;
  let queueUrl: string;
  let handler: HostedConsumer;

  beforeAll(async () => {
    bed = await consumerTestBed({ commitMode });
    ops = createPool({ connectionString: bed.db.url, role: "jobfence_ops", max: 2 });
    queueUrl = (await bed.queue(`record-path-${commitMode}`)).url;
    handler = bed.consumer(awardPointsConsumer, { queueUrl });
  });
  afterAll(async () => {
    await ops?.end();
    await bed?.close();
  });

  const rowsOf = (jobId: string): Promise<Row[]> =>
    bed.db.withClient(async (c) => {
      const { rows } = await c.query<Row>(
        "SELECT * FROM core.dead_letters WHERE job_id = $1 ORDER BY created_at, id",
        [jobId],
      );
      return rows;
    });
  const fencesOf = (jobId: string) =>
    bed.db.withClient(async (c) => {
      const { rows } = await c.query<{ fingerprint: Buffer | null }>(
        "SELECT uuid_send(fingerprint) AS fingerprint FROM core.processed_jobs WHERE job_id = $1",
        [jobId],
      );
      return rows;
    });
  const ledgerOf = (jobId: string) =>
    bed.db.withClient(async (c) => {
      const { rows } = await c.query<{ points: number }>(
        "SELECT points FROM award_points.ledger WHERE job_id = $1",
        [jobId],
      );
      return rows.map((r) => Number(r.points));
    });
  const storedBody = (row: Row) =>
    row.body_form === "text" ? row.body : row.body_utf16?.toString("utf16le");
  /** Replays `id` and returns the one message it put on the consumer's queue. */
  const replayAndReceive = async (id: string): Promise<Message> => {
    const result = await replayDeadLetter({ pool: ops, sqs: bed.sqs }, id, "record-path-test");
    expect(result.status).toBe("replayed");
    const received = await receiveAll(bed.sqs, queueUrl);
    expect(received).toHaveLength(1);
    return received[0] as Message;
  };
  /** award-points whose work throws what `make` returns. */
  /** A consumer whose work throws `make()`; its first failure is its last attempt. */
  const withFailingWork = (make: () => unknown) =>
    bed.consumer(
      {
        ...awardPointsConsumer,
        retry: {
          maxAttempts: 1,
          rationale: "the first failure decides: these tests are about what it becomes",
        },
        work: async () => {
          throw make();
        },
      },
      { queueUrl },
    );
  /** `n` jobs' worth of SQS records in one batch, as Lambda delivers them. */
  const deliver = (...bodies: string[]) =>
    invoke(
      handler,
      bodies.map((body) => sqsRecord(body)),
    );

  describe("a body PostgreSQL refuses cannot make its dead letter unwritable", () => {
    const job = (id: string, payload: string) =>
      `{"job_id":"${id}","tenant_id":"t_42","correlation_id":"c-${id}","payload":${payload}}`;
    // Each is poison (its payload fails award-points' schema) and carries what PostgreSQL refuses.
    const refused: Array<[string, string, string]> = [
      ["a number above numeric's range", "jsonb-big", '{"user_id":"u","points":1e200000}'],
      ["a number below numeric's range", "jsonb-small", '{"user_id":"u","points":1e-20000}'],
      [
        "more than 131,072 digits before the point",
        "jsonb-digits",
        `{"user_id":"u","points":${"9".repeat(140_000)}}`,
      ],
      [
        "nesting deeper than the server parses",
        "jsonb-deep",
        `{"user_id":"u","points":-1,"x":${"[".repeat(30_000)}${"]".repeat(30_000)}}`,
      ],
      ["a \\u0000 escape in a key", "jsonb-nul-key", '{"user_id":"u","points":-1,"a\\u0000b":1}'],
      ["an unpaired surrogate escape", "jsonb-surrogate", '{"user_id":"u\\ud800","points":1}'],
      [
        "a number out of range in an unknown envelope field",
        "jsonb-extra",
        '{"user_id":"u","points":-1},"extra":1e999999',
      ],
      [
        "a body of SQS's 1 MiB limit, with a number jsonb refuses",
        "jsonb-mib",
        `{"user_id":"${"u".repeat(1_048_000)}","points":1e999999}`,
      ],
    ];
    for (const [what, jobId, payload] of refused) {
      it(`${what}: acked on its first receive, one poison row, payload NULL, the body exact`, async () => {
        const body = job(jobId, payload);
        expect(await deliver(body)).toEqual([]);
        const rows = await rowsOf(jobId);
        expect(rows).toHaveLength(1);
        const [row] = rows as [Row];
        expect(row.error_kind).toBe("poison");
        expect(row.payload).toBeNull();
        expect(storedBody(row)).toBe(body);
        // A redelivery finds the same row instead of failing again.
        expect(await deliver(body)).toEqual([]);
        expect(await rowsOf(jobId)).toHaveLength(1);
      });
    }
  });

  describe("replay sends exactly the bytes that were received", () => {
    const bodies: Array<[string, string]> = [
      ["the old raw wrapper's shape", '{"raw":"hello"}'],
      ["the wrapper with its nul marker", '{"raw":"a\\\\u0000b","nul":"escaped"}'],
      ["the wrapper with its surrogate marker", '{"raw":"x","surrogates":"replaced"}'],
      ["JSON whose spelling jsonb would change", '{ "job_id" : "spelled", "b":1.0, "a":1e2, "a":3 }'],
      // fauxqs refuses characters beyond U+FFFF (real SQS takes them): the round trip through the
      // emulator stays in the Basic Multilingual Plane; stored-body.test.ts covers the rest.
      ["text that is not JSON", "not json at all \u00fc \u2603 \t\r\n"],
      ["a JSON string", '"just a string"'],
    ];
    for (const [what, body] of bodies) {
      it(`${what}`, async () => {
        const messageId = `exact-${what.replaceAll(" ", "-")}-${commitMode}`;
        expect(await invoke(handler, [sqsRecord(body, { messageId })])).toEqual([]);
        const row = (await bed.db.withClient(
          async (c) =>
            (
              await c.query<Row>(
                "SELECT * FROM core.dead_letters WHERE message_attributes->>'message_id' = $1",
                [messageId],
              )
            ).rows[0],
        )) as Row;
        expect(storedBody(row)).toBe(body);
        expect((await replayAndReceive(row.id)).Body).toBe(body);
      });
    }

    it("a body holding a literal \\u0000 and a real NUL (no SQS accepts it; the replay message is checked)", async () => {
      const body = '{"job_id":"nul-both","tenant_id":"t","payload":"\\u0000"}\u0000 and a lone \ud800';
      const messageId = `nul-both-${commitMode}`;
      expect(await invoke(handler, [sqsRecord(body, { messageId })])).toEqual([]);
      const [row] = (await rowsOf(messageId)) as [Row];
      expect(row.body_form).toBe("utf16");
      expect(replayMessage({ ...row, body: row.body, body_utf16: row.body_utf16 }).MessageBody).toBe(body);
    });
  });

  describe("one job id, two different jobs", () => {
    it("a later message with another payload is a conflict: no effect, a conflict row with both fingerprints, an alert", async () => {
      const first = award("conflict-payload", 10, "u-c1");
      const second = award("conflict-payload", 999, "u-c1");
      expect(await deliver(JSON.stringify(first))).toEqual([]);
      expect(await deliver(JSON.stringify(second))).toEqual([]);
      expect(await ledgerOf("conflict-payload")).toEqual([10]);
      const rows = await rowsOf("conflict-payload");
      expect(rows).toHaveLength(1);
      const [row] = rows as [Row];
      expect(row.error_kind).toBe("conflict");
      expect(row.job_fingerprint?.equals(jobFingerprint("t_42", second.payload))).toBe(true);
      expect(row.fence_fingerprint?.equals(jobFingerprint("t_42", first.payload))).toBe(true);
      expect(row.last_error.class).toBe("JobConflictError");
      const alert = bed.sink.events.find((e) => (e.detail as { id: string }).id === row.id);
      expect(alert?.detail).toMatchObject({
        error_kind: "conflict",
        job_fingerprint: jobFingerprint("t_42", second.payload).toString("hex"),
        fence_fingerprint: jobFingerprint("t_42", first.payload).toString("hex"),
      });
      // The same conflicting message again finds its row.
      expect(await deliver(JSON.stringify(second))).toEqual([]);
      expect(await rowsOf("conflict-payload")).toHaveLength(1);
    });

    it("another tenant under the same job id is a conflict", async () => {
      expect(await deliver(JSON.stringify(award("conflict-tenant", 5, "u", "t_a")))).toEqual([]);
      expect(await deliver(JSON.stringify(award("conflict-tenant", 5, "u", "t_b")))).toEqual([]);
      expect((await rowsOf("conflict-tenant")).map((r) => r.error_kind)).toEqual(["conflict"]);
      expect(await ledgerOf("conflict-tenant")).toEqual([5]);
    });

    it("key order, whitespace, number spelling and correlation_id do not make a conflict: a silent duplicate", async () => {
      const jobId = "same-job-spelled-differently";
      expect(await deliver(JSON.stringify(award(jobId, 10, "u-s")))).toEqual([]);
      const respelled = [
        `{"payload":{"points":10.0,"user_id":"u-s"},"tenant_id":"t_42","job_id":"${jobId}"}`,
        `{ "job_id" : "${jobId}", "tenant_id" : "t_42", "correlation_id": "other", "payload" : { "user_id":"u-s", "points": 1e1 } }`,
        `{"job_id":"${jobId}","tenant_id":"t_42","payload":{"user_id":"u-s","points":10},"extra":"ignored"}`,
      ];
      expect(await deliver(...respelled)).toEqual([]);
      expect(await rowsOf(jobId)).toEqual([]);
      expect(await ledgerOf(jobId)).toEqual([10]);
    });

    it("a conflict inside one batch: the first record applies, the second is a conflict", async () => {
      const jobId = "conflict-in-batch";
      expect(
        await deliver(JSON.stringify(award(jobId, 1, "u-b")), JSON.stringify(award(jobId, 2, "u-b"))),
      ).toEqual([]);
      expect(await ledgerOf(jobId)).toEqual([1]);
      expect((await rowsOf(jobId)).map((r) => r.error_kind)).toEqual(["conflict"]);
    });

    it("a fence written before fingerprints existed counts as the same job", async () => {
      await bed.db.withClient((c) =>
        c.query(
          `INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, expires_at)
           VALUES ('legacy-fence', core.consumer_id('award-points'), 't_42', now() + interval '7 days')`,
        ),
      );
      expect(await deliver(JSON.stringify(award("legacy-fence", 77)))).toEqual([]);
      expect(await rowsOf("legacy-fence")).toEqual([]);
      expect(await ledgerOf("legacy-fence")).toEqual([]);
    });

    it("a consumer's fingerprint narrows the comparison to the fields that define the effect", async () => {
      const narrowed = bed.consumer(
        {
          ...awardPointsConsumer,
          fingerprint: (p: { user_id: string; points: number }) => ({ user: p.user_id, points: p.points }),
        },
        { queueUrl },
      );
      const a = { ...award("narrowed", 3, "u-n"), payload: { user_id: "u-n", points: 3, note: "first" } };
      const b = { ...award("narrowed", 3, "u-n"), payload: { user_id: "u-n", points: 3, note: "second" } };
      const c = award("narrowed", 4, "u-n");
      expect(await invoke(narrowed, [sqsRecord(JSON.stringify(a))])).toEqual([]);
      expect(await invoke(narrowed, [sqsRecord(JSON.stringify(b))])).toEqual([]);
      expect(await rowsOf("narrowed")).toEqual([]);
      expect(await invoke(narrowed, [sqsRecord(JSON.stringify(c))])).toEqual([]);
      expect((await rowsOf("narrowed")).map((r) => r.error_kind)).toEqual(["conflict"]);
    });
  });

  describe("what the work, its schema or the event can throw at the harness", () => {
    it("a payload schema that throws (a deep payload overflowing a recursive schema) is poison; batch-mates apply", async () => {
      const recursive = bed.consumer(
        {
          name: "award-points",
          payload: z.object({ user_id: z.string(), points: z.number(), meta: z.json().optional() }),
          sends: awardPointsConsumer.sends,
          work: async (job, tx) =>
            awardPointsConsumer.work(
              { ...job, payload: { user_id: job.payload.user_id, points: job.payload.points } },
              tx,
            ),
        },
        { queueUrl },
      );
      const deep = `{"job_id":"schema-throws","tenant_id":"t","payload":{"user_id":"u","points":1,"meta":${"[".repeat(20_000)}${"]".repeat(20_000)}}}`;
      const fine = JSON.stringify(award("schema-throws-mate", 4, "u-st"));
      expect(await invoke(recursive, [sqsRecord(deep), sqsRecord(fine)])).toEqual([]);
      const [row] = (await rowsOf("schema-throws")) as [Row];
      expect(row).toMatchObject({ error_kind: "poison", last_error: { class: "PoisonMessageError" } });
      expect(row.last_error.message).toMatch(/schema threw/);
      expect(await ledgerOf("schema-throws-mate")).toEqual([4]);
    });

    // Errors whose properties cannot be read, or are not strings: each must still be described,
    // recorded and acked (on the last attempt, for a transient one).
    const boom = () => {
      throw new Error("boom");
    };
    const unreadable: Array<[string, () => unknown]> = [
      [
        "a message getter that throws",
        () => withProperty(new PermanentJobError("x"), "message", { get: boom }),
      ],
      ["a numeric message", () => withProperty(new PermanentJobError("x"), "message", { value: 42 })],
      ["a numeric name", () => withProperty(new PermanentJobError("x"), "name", { value: 7 })],
      ["an object stack", () => withProperty(new PermanentJobError("x"), "stack", { value: { a: 1 } })],
      ["a code getter that throws", () => withProperty(new PermanentJobError("x"), "code", { get: boom })],
      [
        "a transient error whose message getter throws",
        () => withProperty(new Error("x"), "message", { get: boom }),
      ],
      ["a thrown symbol", () => Symbol("s")],
      ["a thrown object without a prototype", () => Object.create(null)],
      [
        "a thrown Proxy whose prototype cannot be read",
        () =>
          new Proxy(
            {},
            {
              getPrototypeOf: () => {
                throw new Error("no prototype");
              },
            },
          ),
      ],
    ];
    for (const [what, make] of unreadable) {
      it(`the work throws ${what}: one dead letter, acked`, async () => {
        const jobId = `unreadable-${what.replace(/\W+/g, "-")}`;
        const record = sqsRecord(JSON.stringify(award(jobId, 1, "u-ur")));
        expect(await invoke(withFailingWork(make), [record])).toEqual([]);
        const rows = await rowsOf(jobId);
        expect(rows).toHaveLength(1);
        expect(["hard", "exhausted"]).toContain(rows[0]?.error_kind);
      });
    }

    const oddIds: Array<[string, string]> = [
      ["300 characters long", "m".repeat(300)],
      ["holding U+0000", "m-\u0000-1"],
      ["holding a lone surrogate", "m-\ud800-1"],
      ["blank", "   "],
      ["empty", ""],
      ["U+0085", "\u0085"],
    ];
    for (const [what, messageId] of oddIds) {
      it(`a poison body whose SQS message id is ${what}: one dead letter under a usable stand-in, acked`, async () => {
        const body = `not json, message ${JSON.stringify(messageId)} ${commitMode}`;
        expect(await invoke(handler, [sqsRecord(body, { messageId })])).toEqual([]);
        const rows = await bed.db.withClient(
          async (c) => (await c.query<Row>("SELECT * FROM core.dead_letters WHERE body = $1", [body])).rows,
        );
        expect(rows).toHaveLength(1);
        expect((rows[0] as Row).job_id).toBe(messageIdStandIn(messageId));
        // Delivered again: the same row.
        expect(await invoke(handler, [sqsRecord(body, { messageId })])).toEqual([]);
        expect(
          await bed.db.withClient(
            async (c) => (await c.query("SELECT 1 FROM core.dead_letters WHERE body = $1", [body])).rowCount,
          ),
        ).toBe(1);
      });
    }

    it("every conflict dead letter names a fence that exists (FIFO batch: a conflict is final only once its cause commits)", async () => {
      // g1 (group G1) and g2 (group G2) carry one job id with different payloads; g3 follows g2 in
      // G2. The first payload's work succeeds once and then fails for good: in batch mode the batch
      // is redone without it, and g2 must not stay a conflict with a job that never committed.
      let firstCalls = 0;
      const flaky = bed.consumer(
        {
          ...awardPointsConsumer,
          work: async (job, tx) => {
            if (job.payload.points === 1 && ++firstCalls > 1)
              throw new PermanentJobError("refused on its second run");
            await awardPointsConsumer.work(job, tx);
          },
        },
        { queueUrl },
      );
      const fifo = (body: unknown, groupId: string, messageId: string) =>
        sqsRecord(JSON.stringify(body), { groupId, messageId: `${messageId}-${commitMode}` });
      await invoke(flaky, [
        fifo(award("fifo-conflict-a", 1, "u-fc"), "G1", "g1"),
        fifo(award("fifo-conflict-a", 2, "u-fc"), "G2", "g2"),
        fifo(award("fifo-conflict-b", 3, "u-fc"), "G2", "g3"),
        fifo(award("fifo-conflict-c", 5, "u-fc"), "G1", "g4"),
      ]);
      const orphans = await bed.db.withClient(
        async (c) =>
          (
            await c.query(
              `SELECT d.id FROM core.dead_letters d
                WHERE d.error_kind = 'conflict'
                  AND NOT EXISTS (SELECT 1 FROM core.processed_jobs p
                                   WHERE p.job_id = d.job_id AND p.consumer_id = core.consumer_id(d.consumer)
                                     AND uuid_send(p.fingerprint) = d.fence_fingerprint)`,
            )
          ).rows,
      );
      expect(orphans).toEqual([]);
      // Job a is applied once, with one of its two payloads; b follows it in G2.
      expect((await ledgerOf("fifo-conflict-a")).length).toBe(1);
      expect(await ledgerOf("fifo-conflict-b")).toEqual([3]);
    });
  });

  describe("each distinct failed body of a job has its own dead letter", () => {
    it("two different hard failures of one job: two rows; replaying one applies it, the other is then a conflict", async () => {
      const jobId = "two-bodies";
      let refuse = true;
      const failing = bed.consumer(
        {
          ...awardPointsConsumer,
          work: async (job, tx) => {
            if (refuse) throw new PermanentJobError("account closed");
            await awardPointsConsumer.work(job, tx);
          },
        },
        { queueUrl },
      );
      const a = JSON.stringify(award(jobId, 10, "u-two"));
      const b = JSON.stringify(award(jobId, 20, "u-two"));
      const bRespelled = JSON.stringify({ ...award(jobId, 20, "u-two"), correlation_id: "resent" });
      expect(await invoke(failing, [sqsRecord(a), sqsRecord(b), sqsRecord(bRespelled)])).toEqual([]);
      // The same body again (a redelivery) finds its row.
      expect(await invoke(failing, [sqsRecord(a)])).toEqual([]);
      const rows = await rowsOf(jobId);
      expect(rows.map((r) => [r.error_kind, storedBody(r)])).toEqual([
        ["hard", a],
        ["hard", b],
        ["hard", bRespelled],
      ]);

      refuse = false;
      const [rowA, rowB, rowB2] = rows as [Row, Row, Row];
      const replayed = await replayAndReceive(rowB.id);
      expect(await invoke(failing, [sqsRecord(replayed.Body as string)])).toEqual([]);
      expect(await ledgerOf(jobId)).toEqual([20]);
      await expect(replayDeadLetter({ pool: ops, sqs: bed.sqs }, rowA.id, "t")).rejects.toBeInstanceOf(
        ReplayConflictError,
      );
      // Same job (fingerprint) under another correlation id: superseded, nothing sent.
      expect((await replayDeadLetter({ pool: ops, sqs: bed.sqs }, rowB2.id, "t")).status).toBe("superseded");
      expect(await receiveAll(bed.sqs, queueUrl)).toEqual([]);
      expect((await rowsOf(jobId)).map((r) => r.status)).toEqual([
        "pending_review",
        "replayed",
        "superseded",
      ]);
    });
  });

  describe("the work cannot break the transaction it is given", () => {
    const withWork = (
      before: (tx: Parameters<ConsumerDefinition<typeof awardPointsPayload>["work"]>[1]) => Promise<void>,
    ) =>
      bed.consumer(
        {
          ...awardPointsConsumer,
          work: async (job, tx) => {
            await before(tx);
            await awardPointsConsumer.work(job, tx);
          },
        },
        { queueUrl },
      );

    for (const statement of [
      // Refused before they are sent.
      "COMMIT",
      "ROLLBACK",
      "BEGIN",
      "END",
      // Refused by the server (the fence's deferred trigger), or ending the transaction there.
      "/* spelled otherwise */ COMMIT",
      "COMMIT AND CHAIN",
      "ROLLBACK AND NO CHAIN",
      // Refused at COMMIT: batch-mates share the transaction's search_path.
      "SET search_path = public",
    ]) {
      it(`refuses ${JSON.stringify(statement)}: a hard dead letter naming it, no fence, no effect`, async () => {
        const jobId = `tx-control-${statement.replace(/\W+/g, "-")}`;
        const consumer = withWork(async (tx) => {
          await tx.query(statement);
        });
        expect(await invoke(consumer, [sqsRecord(JSON.stringify(award(jobId, 5, "u-tx")))])).toEqual([]);
        expect(await fencesOf(jobId)).toEqual([]);
        expect(await ledgerOf(jobId)).toEqual([]);
        const [row] = (await rowsOf(jobId)) as [Row];
        expect(row.error_kind).toBe("hard");
        expect(row.last_error.class).toBe("TransactionControlError");
        expect(row.last_error.message).toContain(statement.split(" ")[0] as string);
      });
    }

    it("a work that withdraws its own fence commits nothing: the COMMIT check finds the fence missing", async () => {
      const jobId = "tx-withdrawn";
      const consumer = bed.consumer(
        {
          ...awardPointsConsumer,
          // No follow-up: the outbox's own policy would refuse one whose parent fence is gone.
          work: async (job, tx) => {
            await tx.query(
              "INSERT INTO award_points.ledger (job_id, tenant_id, user_id, points) VALUES ($1, $2, $3, $4)",
              [job.jobId, job.tenantId, job.payload.user_id, job.payload.points],
            );
            await tx.query("SELECT core.withdraw_own_fences('award-points', ARRAY[$1])", [job.jobId]);
          },
        },
        { queueUrl },
      );
      expect(await invoke(consumer, [sqsRecord(JSON.stringify(award(jobId, 5, "u-tx")))])).toEqual([]);
      expect(await fencesOf(jobId)).toEqual([]);
      expect(await ledgerOf(jobId)).toEqual([]);
      const [row] = (await rowsOf(jobId)) as [Row];
      expect(row.error_kind).toBe("hard");
      expect(row.last_error.class).toBe("TransactionControlError");
    });

    it("a text of several statements is refused by the server: nothing of it commits, the record retries", async () => {
      const jobId = "tx-several";
      const consumer = withWork(async (tx) => {
        await tx.query(
          "INSERT INTO award_points.ledger (job_id, tenant_id, user_id, points) VALUES ('tx-several-smuggled', 't', 'u', 1); COMMIT",
        );
      });
      const messageId = `m-tx-several-${commitMode}`;
      const body = JSON.stringify(award(jobId, 5, "u-tx"));
      expect(await invoke(consumer, [sqsRecord(body, { messageId })])).toEqual([messageId]);
      expect(await fencesOf(jobId)).toEqual([]);
      expect(await ledgerOf(jobId)).toEqual([]);
      expect(await ledgerOf("tx-several-smuggled")).toEqual([]);
    });

    describe("session state the work changes does not reach the next job on its connection", () => {
      // One connection, so the next job borrows the one the last job used.
      const onOneConnection = (work: ConsumerDefinition<typeof awardPointsPayload>["work"]) =>
        bed.consumer(
          { ...awardPointsConsumer, work },
          {
            queueUrl,
            pool: createPool({
              connectionString: bed.db.url,
              role: consumerRoleName("award-points"),
              max: 1,
            }),
          },
        );
      /** A role a superuser login can make the session's user, member of award-points' role. */
      const SESSION_MEMBER = `jft_session_member_${process.pid}`;
      const SESSION = `
        SELECT pg_backend_pid() AS pid, session_user AS session_user, current_setting('search_path') AS search_path,
               current_setting('TimeZone') AS time_zone, current_user AS "user",
               coalesce(current_setting('x.y', true), '') AS custom,
               (SELECT count(*)::int FROM pg_listening_channels()) AS listening,
               (SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS advisory,
               (SELECT count(*)::int FROM pg_cursors) AS cursors,
               (SELECT count(*)::int FROM pg_class WHERE relnamespace = pg_my_temp_schema()) AS temp_objects`;

      for (const statement of [
        "RESET ALL",
        "SELECT set_config('x.y', '1', false)",
        "CREATE TEMP TABLE effects (id int)",
        "DECLARE kept CURSOR WITH HOLD FOR SELECT 1",
        "UPDATE pg_settings SET setting = 'Asia/Tokyo' WHERE name = 'TimeZone'",
        "LISTEN jobs",
        "SELECT pg_advisory_lock(31)",
        // The follow-up's key check reads its pattern the same whatever the caller's setting.
        "SET standard_conforming_strings = off",
        // A superuser login (as the tests' is) can change the session's user, and put the role back.
        [`SET SESSION AUTHORIZATION ${SESSION_MEMBER}`, "SET ROLE jobfence_consumer_award_points"],
      ]) {
        it(`${JSON.stringify(statement)}: the job applies, the next job finds the session as the first found it`, async () => {
          const seen: unknown[] = [];
          const consumer = onOneConnection(async (job, tx) => {
            seen.push((await tx.query(SESSION)).rows[0]);
            if (job.jobId.endsWith("-first")) for (const each of [statement].flat()) await tx.query(each);
            await awardPointsConsumer.work(job, tx);
          });
          const prefix = `tx-session-${String(statement).replace(/\W+/g, "-")}`;
          if (Array.isArray(statement))
            // Roles are the cluster's: one of this process's own, so files running at once never race on it.
            await bed.db.withClient((c) =>
              c.query(
                `DO $$ BEGIN CREATE ROLE ${SESSION_MEMBER}; EXCEPTION WHEN duplicate_object THEN NULL; END $$; GRANT jobfence_consumer_award_points TO ${SESSION_MEMBER}`,
              ),
            );
          for (const which of ["first", "next"]) {
            const body = JSON.stringify(award(`${prefix}-${which}`, 1, "u-session"));
            expect(await invoke(consumer, [sqsRecord(body)])).toEqual([]);
            expect(await ledgerOf(`${prefix}-${which}`)).toEqual([1]);
          }
          expect(seen).toHaveLength(2);
          expect(seen[1]).toEqual(seen[0]);
        });
      }
    });

    it("work that swallows its own failed statement is the one retried; its batch-mates apply", async () => {
      // Only one job's work swallows its failure; in a batch, the next record must not pay for it.
      const consumer = bed.consumer(
        {
          ...awardPointsConsumer,
          work: async (job, tx) => {
            if (job.jobId === "tx-swallow-bad") await tx.query("SELECT 1/0").catch(() => undefined);
            await awardPointsConsumer.work(job, tx).catch(() => undefined);
          },
        },
        { queueUrl },
      );
      const jobs = ["tx-swallow-bad", "tx-swallow-ok-1", "tx-swallow-ok-2"];
      const records = jobs.map((jobId) =>
        sqsRecord(JSON.stringify(award(jobId, 2, "u-sw")), { messageId: `m-${jobId}-${commitMode}` }),
      );
      expect(await invoke(consumer, records)).toEqual([`m-tx-swallow-bad-${commitMode}`]);
      expect(await ledgerOf("tx-swallow-bad")).toEqual([]);
      expect(await ledgerOf("tx-swallow-ok-1")).toEqual([2]);
      expect(await ledgerOf("tx-swallow-ok-2")).toEqual([2]);
    });

    it("savepoints stay allowed: a failed statement rolled back to a savepoint, then the effect commits", async () => {
      const jobId = "tx-savepoint";
      const consumer = withWork(async (tx) => {
        await tx.query("SAVEPOINT before_probe");
        await tx.query("SELECT 1/0").catch(() => undefined);
        await tx.query("ROLLBACK TO SAVEPOINT before_probe");
        await tx.query("SET LOCAL statement_timeout = '5s'");
      });
      expect(await invoke(consumer, [sqsRecord(JSON.stringify(award(jobId, 6, "u-sp")))])).toEqual([]);
      expect(await ledgerOf(jobId)).toEqual([6]);
      expect(await fencesOf(jobId)).toHaveLength(1);
    });

    it("work that keeps the connection after its promise settles is refused", async () => {
      const jobId = "tx-kept";
      let kept: Parameters<ConsumerDefinition<typeof awardPointsPayload>["work"]>[1] | undefined;
      const consumer = withWork(async (tx) => {
        kept = tx;
      });
      expect(await invoke(consumer, [sqsRecord(JSON.stringify(award(jobId, 1, "u-k")))])).toEqual([]);
      await expect(kept?.query("SELECT 1")).rejects.toThrow(/already ended/);
    });
  });
}
