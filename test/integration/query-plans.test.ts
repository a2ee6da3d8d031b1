/**
 * The API's reads use their indexes: with enough dead letters that a sequential scan would be
 * the planner's last choice, the list (with and without filters) and the replay batch are index
 * scans with no Sort node. A regression here (ordering by the select list's text rendering of
 * created_at) once made the first page a full sort of the table.
 *
 * The plans are those of jobfence_ops, the role the API runs as: row-level security changes what
 * the planner may know (a superuser's plan once hid that every message filter was planned blind
 * for the ops role, at seconds a page).
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { insertOperationItems, lockOperationChunk } from "../../shared/db/queries/bulk-operations.ts";
import { listDeadLetters } from "../../shared/db/queries/list-dead-letters.ts";
import type { Queryable } from "../../shared/db/queryable.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

let db: TestDatabase;
let client: pg.Client;
/** A session as jobfence_ops, which the plans are taken as. */
let ops: pg.Client;
beforeAll(async () => {
  db = await createTestDatabase();
  client = new pg.Client({ connectionString: db.url });
  await client.connect();
  // In two statements with ANALYZE between: the insert triggers' plans (the replay link's lookup by
  // job id, migration 0025) are made for the table as it is when first run, and on an empty table
  // that is a scan of every row, for each of the 50,000 (about 55 s, against 1 s once analyzed).
  const seed = (from: number, to: number) => `
    INSERT INTO core.dead_letters (job_id, consumer, queue, tenant_id, payload, attempts, error_kind, last_error, correlation_id, created_at, body_form, body)
    SELECT 'job-' || n, 'consumer-' || (n % 8), 'queue-' || (n % 3), 't_' || (n % 50), '{}', 1,
           (ARRAY['poison','hard','exhausted','unrecorded'])[1 + n % 4], ('{"class":"E' || (n % 40) || '","message":"failed for order-' || n || ' in ' || (ARRAY['ledger','wallet','points','rates'])[1 + n % 4] || '"}')::jsonb, 'corr-' || n,
           now() - make_interval(secs => n), 'text', '{"n":' || n || '}'
      FROM generate_series(${from}, ${to}) AS n;
    ANALYZE core.dead_letters;`;
  await client.query(seed(1, 1000));
  await client.query(seed(1001, 50000));
  const { rows } = await client.query<{ group: string }>(
    "SELECT encode(error_fingerprint, 'hex') AS group FROM core.dead_letters WHERE error_class = 'E7' LIMIT 1",
  );
  group = rows[0]?.group as string;
  // Two operations' sets over every row, as a busy incident would leave them (on two filters: one
  // running operation per kind and filter, migration 0028).
  for (let i = 0; i < 2; i++) {
    const { rows: ops } = await client.query<{ id: string }>(
      `INSERT INTO core.bulk_operations (kind, filter, reason, rate_per_second, planned, submitted_by)
       VALUES ('discard', jsonb_build_object('correlation_id', 'plans-' || $1::int), 'plans', 10, 50000, 'test')
       RETURNING id`,
      [i],
    );
    operationId = ops[0]?.id as string;
    await insertOperationItems(
      client,
      operationId,
      {},
      {
        createdAt: new Date().toISOString(),
        id: "ffffffff-ffff-4fff-bfff-ffffffffffff",
      },
    );
  }
  await client.query("ANALYZE core.bulk_operation_items");
  ops = new pg.Client({ connectionString: db.url });
  await ops.connect();
  await ops.query("SET ROLE jobfence_ops");
  // 50,000 dead letters through their triggers: a bound of its own, above the default hook timeout,
  // for a busy machine.
}, 240_000);
let operationId: string;
let group: string;
afterAll(async () => {
  await ops?.end();
  await client?.end();
  await db?.drop();
});

/** Runs `query` with a client that EXPLAINs instead of executing; returns the plan's node types. */
async function planOf(query: (db: Queryable) => Promise<unknown>): Promise<string[]> {
  const nodes: string[] = [];
  const explaining: Queryable = {
    query: (async (text: string, values?: unknown[]) => {
      // A query that asks the planner itself (an estimate) is answered, not explained.
      if (/^EXPLAIN\b/.test(text)) return ops.query(text, values);
      const { rows } = await ops.query(`EXPLAIN (FORMAT JSON) ${text}`, values);
      const walk = (node: { "Node Type": string; Plans?: unknown[] }) => {
        nodes.push(node["Node Type"]);
        for (const child of node.Plans ?? []) walk(child as { "Node Type": string });
      };
      walk(rows[0]["QUERY PLAN"][0].Plan);
      return { rows: [], rowCount: 0 };
    }) as Queryable["query"],
  };
  await query(explaining);
  return nodes;
}

describe("query plans", () => {
  it.each([
    ["no filter", {}],
    ["status", { status: "pending_review" as const }],
    ["consumer", { consumer: "consumer-3" }],
    ["queue", { queue: "queue-1" }],
    ["error_kind", { error_kind: "hard" as const }],
    ["tenant_id", { tenant_id: "t_7" }],
    ["error_class", { error_class: "E3" }],
    ["error_class and status", { error_class: "E3", status: "pending_review" as const }],
    ["group", () => ({ group })],
    ["group and status", () => ({ group, status: "pending_review" as const })],
  ])("the list page with %s is an index scan without a sort", async (_, filterOf) => {
    const filter = typeof filterOf === "function" ? filterOf() : filterOf;
    const nodes = await planOf((q) => listDeadLetters(q, filter, 50));
    expect(nodes).not.toContain("Sort");
    expect(nodes).not.toContain("Seq Scan");
    expect(nodes.some((n) => n.startsWith("Index"))).toBe(true);
  });

  it("a deep page after a cursor is an index scan without a sort", async () => {
    const nodes = await planOf((q) =>
      listDeadLetters(q, {}, 50, {
        createdAt: new Date(Date.now() - 20_000_000).toISOString(),
        id: "00000000-0000-4000-8000-000000000000",
      }),
    );
    expect(nodes).not.toContain("Sort");
    expect(nodes).not.toContain("Seq Scan");
  });

  it("a rare message match is a trigram index lookup, not a scan", async () => {
    const nodes = await planOf((q) => listDeadLetters(q, { message: "order-4242 in" }, 50));
    expect(nodes).not.toContain("Seq Scan");
    expect(nodes).toContain("Bitmap Index Scan");
  });

  it("a common message match walks the time index newest first, without a sort", async () => {
    // Every row's message has these words: the first page is the newest 51 rows.
    const nodes = await planOf((q) => listDeadLetters(q, { message: "failed for order" }, 50));
    expect(nodes).not.toContain("Sort");
    expect(nodes).not.toContain("Bitmap Index Scan");
    expect(nodes).toContain("Index Scan");
  });

  it("a bulk operation's chunk walks its set by index, without a sort", async () => {
    const nodes = await planOf((q) => lockOperationChunk(q, operationId, 1000, 100));
    expect(nodes).not.toContain("Sort");
    expect(nodes).not.toContain("Seq Scan");
  });
});
