/**
 * The dead-letter API under generated requests (fast-check): methods, paths under
 * /v1/core/dead-letters, ids, query strings, bodies, content types and Authorization headers,
 * valid tokens included. Every answer must be a status a client can act on (never 5xx), every
 * refusal an RFC 9457 problem whose `status` is the HTTP status, and only a 2xx replay or discard
 * may change a dead letter: exactly the ones its response names.
 */
import fc from "fast-check";
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createLocalIssuer } from "../../local/tokens.ts";
import { encodeCursor, filterFingerprint } from "../../shared/dead-letters/cursor.ts";
import { PERMISSION } from "../../shared/http/auth.ts";
import { BASE, seedDeadLetters } from "../support/api-fixtures.ts";
import { type ApiResponse, type ApiTestBed, apiTestBed } from "../support/api-harness.ts";
import { insertFence } from "../support/fixtures.ts";

/** What the API may answer to anything a client sends. */
const ALLOWED_STATUSES = new Set([200, 400, 401, 403, 404, 405, 409, 415]);
const RUNS = 1100;
/** Pending dead letters kept available, so replays and discards keep finding something to decide. */
const MIN_PENDING = 15;

let bed: ApiTestBed;
/** The migrator's connection that watches the table between requests. */
let watcher: pg.Client;
let queueUrl: string;
/** Ids a generated path may name (by index), refreshed as rows are added. */
let knownIds: string[] = [];
/** Tokens that are well-formed but must be refused. */
let refusedTokens: string[] = [];
let seeded = 0;
let requests = 0;
/** How many responses had each status. */
const statuses = new Map<number, number>();

/** Adds pending dead letters (some of them fenced) to the table and to the ids paths may name. */
async function topUp(): Promise<void> {
  const kinds = ["poison", "hard", "exhausted", "unrecorded"];
  const rows = Array.from({ length: 20 }, () => {
    const i = seeded++;
    return {
      consumer: i % 3 === 0 ? "fuzz-b" : "fuzz-a",
      job_id: `fuzz-${i}`,
      queue: queueUrl,
      tenant_id: i % 4 === 0 ? null : `t-${i % 2}`,
      error_kind: kinds[i % 4] as string,
      correlation_id: i % 5 === 0 ? "corr-fuzz" : `corr-fuzz-${i}`,
    };
  });
  const ids = await seedDeadLetters(bed.db, rows);
  // Some jobs already succeeded elsewhere: their replay resolves as superseded.
  await bed.db.withClient(async (c) => {
    for (const row of rows.filter((_, k) => k % 7 === 0))
      await insertFence(c, row.job_id, { consumer: row.consumer });
  });
  knownIds = [...knownIds, ...ids];
}

beforeAll(async () => {
  bed = await apiTestBed();
  watcher = new pg.Client({ connectionString: bed.db.url });
  await watcher.connect();
  queueUrl = (await bed.queue("fuzz")).url;
  await topUp();
  await topUp();
  const other = await createLocalIssuer();
  const all = Object.values(PERMISSION);
  refusedTokens = [
    await bed.issuer.sign("expired", all, { ttlSeconds: -60 }),
    await other.sign("intruder", all),
    await bed.issuer.sign(" ", all),
  ];
});
afterAll(async () => {
  await watcher?.end();
  await bed?.close();
});

// ---- Generators -------------------------------------------------------------------------------

const hostile = fc.constantFrom(
  "' OR 1=1 --",
  "%",
  "_",
  "\\",
  "; DROP TABLE core.dead_letters;",
  "\u0000",
  "a\u0000b",
  "",
  " ",
  "\ud800",
  "\u{1F600}",
  "fuzz-a",
  "fuzz-b",
  "t-1",
  "corr-fuzz",
  "x".repeat(300),
);
const text = fc.oneof(
  hostile,
  fc.string({ maxLength: 30 }),
  fc.string({ unit: "grapheme", maxLength: 12 }),
  fc.string({ unit: "binary", maxLength: 12 }),
);
const statusValue = fc.constantFrom(
  "pending_review",
  "replayed",
  "discarded",
  "superseded",
  "PENDING_REVIEW",
  "x",
);
const kindValue = fc.constantFrom("poison", "hard", "exhausted", "unrecorded", "fatal");
/** Instants PostgreSQL can represent: years 1970–2200, offsets within ±15:59. */
const instant = fc
  .tuple(
    fc.date({
      min: new Date("1970-01-01T00:00:00Z"),
      max: new Date("2200-01-01T00:00:00Z"),
      noInvalidDate: true,
    }),
    fc.constantFrom("Z", "+00:00", "+02:00", "-05:30", "+15:59", "-15:59"),
  )
  .map(([date, offset]) => date.toISOString().replace("Z", offset));
const timestamp = fc.oneof(
  instant,
  fc.constantFrom("yesterday", "2024-01-01", "2024-01-01T00:00:00", "2024-02-30T00:00:00Z", "1700000000", ""),
);
const limitValue = fc.oneof(
  fc.integer({ min: -3, max: 600 }).map(String),
  fc.constantFrom("abc", "1.5", "1e2", "", " 7 ", "0x10", "Infinity"),
);
const base64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
const cursor = fc.oneof(
  fc.constantFrom("!!!", "abc", "e30", "", "A".repeat(600)),
  fc.string({ maxLength: 40 }),
  fc
    .record({
      v: fc.constantFrom(1, 2),
      t: timestamp,
      i: fc.oneof(fc.uuid(), fc.constant("not-a-uuid")),
      f: fc.oneof(fc.constant(filterFingerprint({ walk: "list" })), fc.stringMatching(/^[0-9a-f]{16}$/)),
    })
    .map(base64url),
  fc.tuple(instant, fc.uuid()).map(([t, i]) => encodeCursor({ createdAt: t, id: i }, {}, "list")),
);

const anyValue = fc.oneof(text, statusValue, kindValue, timestamp, limitValue, cursor);
/** Per query key, values the API accepts (mostly), so requests get past validation often. */
const goodValue: Record<string, fc.Arbitrary<string>> = {
  status: fc.constantFrom("pending_review", "replayed", "discarded", "superseded"),
  consumer: fc.constantFrom("fuzz-a", "fuzz-b", "%", "' OR 1=1 --"),
  queue: fc.constantFrom("fuzz", "%"),
  error_kind: fc.constantFrom("poison", "hard", "exhausted", "unrecorded"),
  tenant_id: fc.constantFrom("t-0", "t-1", "_"),
  job_id: fc.integer({ min: 0, max: 80 }).map((i) => `fuzz-${i}`),
  correlation_id: fc.constantFrom("corr-fuzz", "corr-fuzz-3"),
  created_after: instant,
  created_before: instant,
  limit: fc.integer({ min: 1, max: 60 }).map(String),
  cursor,
};
const queryKey = fc.oneof(
  { weight: 10, arbitrary: fc.constantFrom(...Object.keys(goodValue)) },
  { weight: 1, arbitrary: fc.constantFrom("foo", "Status", "constructor", "offset") },
);
const queryPair = queryKey.chain((key) =>
  fc.tuple(
    fc.constant(key),
    fc.oneof(
      { weight: 3, arbitrary: Object.hasOwn(goodValue, key) ? (goodValue[key] ?? anyValue) : anyValue },
      anyValue,
    ),
  ),
);
const query = fc.oneof(
  { weight: 8, arbitrary: fc.array(queryPair, { maxLength: 3 }) },
  { weight: 1, arbitrary: fc.constantFrom("%zz", "a=%", "&&&", "=x", "limit=%00", "consumer=%ED%A0%80") },
);

const goodFilter = fc.record(
  Object.fromEntries(
    [
      "consumer",
      "error_kind",
      "tenant_id",
      "job_id",
      "correlation_id",
      "created_after",
      "created_before",
    ].map((key) => [key, goodValue[key] ?? text]),
  ),
  { requiredKeys: [] },
);
const anyFilter = fc.record(
  {
    consumer: text,
    queue: text,
    error_kind: fc.oneof(kindValue, text),
    tenant_id: fc.oneof(text, fc.constant(null)),
    job_id: text,
    correlation_id: text,
    created_after: timestamp,
    created_before: timestamp,
    status: statusValue,
    bogus: text,
  },
  { requiredKeys: [] },
);
const bulkBody = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record(
      {
        filter: goodFilter,
        all: fc.boolean(),
        dry_run: fc.boolean(),
        limit: fc.integer({ min: 1, max: 20 }),
      },
      { requiredKeys: ["filter"] },
    ),
  },
  {
    weight: 1,
    arbitrary: fc.record(
      {
        filter: fc.oneof(anyFilter, fc.jsonValue({ maxDepth: 2 })),
        all: fc.oneof(fc.boolean(), fc.constant("true")),
        dry_run: fc.oneof(fc.boolean(), fc.constant("yes")),
        limit: fc.oneof(fc.integer({ min: -2, max: 600 }), fc.double()),
        cursor,
        extra: fc.jsonValue({ maxDepth: 1 }),
      },
      { requiredKeys: [] },
    ),
  },
);
const discardBody = fc.oneof(
  { weight: 3, arbitrary: fc.record({ reason: fc.string({ minLength: 1, maxLength: 40 }) }) },
  {
    weight: 1,
    arbitrary: fc.record(
      {
        reason: fc.oneof(
          text,
          fc.jsonValue({ maxDepth: 1 }),
          fc.constant("r".repeat(2001)),
          fc.constant(" \t "),
        ),
        extra: fc.jsonValue({ maxDepth: 1 }),
      },
      { requiredKeys: [] },
    ),
  },
);
const junkBody = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
  fc.string({ maxLength: 40 }),
  fc.constantFrom("{", "[]", "null", "{}", '{"__proto__":{"all":true}}', '{"reason":"fine"}'),
);
/** A body for the route: mostly of its shape, sometimes anything, sometimes none. */
function bodyFor(shape: string): fc.Arbitrary<string | undefined> {
  const fitting =
    shape === "bulk"
      ? bulkBody.map((b) => JSON.stringify(b))
      : shape === "discard"
        ? discardBody.map((b) => JSON.stringify(b))
        : fc.constantFrom(undefined, "{}");
  return fc.oneof(
    { weight: 6, arbitrary: fitting },
    { weight: 2, arbitrary: junkBody },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );
}

const authorization = fc.oneof(
  { weight: 6, arbitrary: fc.constant({ token: "admin" as const }) },
  { weight: 5, arbitrary: fc.constantFrom("read", "replay", "discard", "none").map((k) => ({ token: k })) },
  { weight: 1, arbitrary: fc.nat().map((n) => ({ refused: n })) },
  { weight: 1, arbitrary: fc.constant({ absent: true as const }) },
  { weight: 1, arbitrary: fc.string({ maxLength: 60 }).map((raw) => ({ raw })) },
  { weight: 1, arbitrary: fc.string({ maxLength: 60 }).map((raw) => ({ raw: `Bearer ${raw}` })) },
);
const contentType = fc.oneof(
  { weight: 8, arbitrary: fc.constant("application/json") },
  { weight: 1, arbitrary: fc.constant(undefined) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      "application/json; charset=utf-8",
      "APPLICATION/JSON",
      "application/vnd.api+json",
      "application/problem+json",
      "application/jsonp",
      "text/plain",
      "application/x-www-form-urlencoded",
      "application/octet-stream",
      "multipart/form-data; boundary=x",
    ),
  },
);
const extraHeader = fc.option(
  fc.tuple(
    fc.constantFrom("x-fuzz", "accept", "x-forwarded-for", "origin", "x-amz-date"),
    fc.string({ maxLength: 30 }),
  ),
  { nil: undefined, freq: 4 },
);

const idSegment = fc.oneof(
  // Mostly the first few dozen ids, so decided dead letters are asked again (409).
  { weight: 6, arbitrary: fc.nat({ max: 40 }).map((known) => ({ known })) },
  { weight: 1, arbitrary: fc.uuid().map((raw) => ({ raw })) },
  {
    weight: 2,
    arbitrary: fc
      .oneof(text, fc.constantFrom("stats", "replay", "discard", "..", "%2F", "{id}"))
      .map((s) => ({ raw: encodeURIComponent(s.toWellFormed()) })),
  },
);
const SHAPES = ["list", "stats", "bulk", "one", "replay", "discard", "junk", "trailing", "outside"] as const;
/** Mostly a route as the API defines it; sometimes any method on any path. */
const target = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.constantFrom(
      { method: "GET", shape: "list" },
      { method: "GET", shape: "stats" },
      { method: "GET", shape: "one" },
      { method: "GET", shape: "trailing" },
      { method: "POST", shape: "replay" },
      { method: "POST", shape: "bulk" },
      { method: "POST", shape: "discard" },
    ),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      method: fc.constantFrom("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "PROPFIND"),
      shape: fc.constantFrom(...SHAPES),
    }),
  },
);

const request = target.chain(({ method, shape }) =>
  fc.record({
    method: fc.constant(method),
    shape: fc.constant(shape),
    id: idSegment,
    junk: fc.string({ maxLength: 10 }),
    query,
    authorization,
    contentType,
    extraHeader,
    body: bodyFor(shape),
  }),
);
type GeneratedRequest = typeof request extends fc.Arbitrary<infer R> ? R : never;

// ---- Running one ------------------------------------------------------------------------------

function pathOf(r: GeneratedRequest): string {
  const id = "known" in r.id ? (knownIds[r.id.known % knownIds.length] ?? "none") : r.id.raw;
  const qs = Array.isArray(r.query) ? new URLSearchParams(r.query).toString() : r.query;
  const path = {
    list: BASE,
    stats: `${BASE}/stats`,
    bulk: `${BASE}/replay`,
    one: `${BASE}/${id}`,
    replay: `${BASE}/${id}/replay`,
    discard: `${BASE}/${id}/discard`,
    junk: `${BASE}/${id}/${encodeURIComponent(r.junk)}`,
    trailing: `${BASE}/`,
    outside: `/v1/core/${encodeURIComponent(r.junk)}`,
  }[r.shape as (typeof SHAPES)[number]];
  return qs ? `${path}?${qs}` : path;
}

function headersOf(r: GeneratedRequest): Record<string, string> {
  const headers: Record<string, string> = {};
  const auth = r.authorization;
  if ("token" in auth) headers.authorization = `Bearer ${bed.tokens[auth.token]}`;
  else if ("refused" in auth)
    headers.authorization = `Bearer ${refusedTokens[auth.refused % refusedTokens.length]}`;
  else if ("raw" in auth) headers.authorization = auth.raw;
  if (r.contentType !== undefined) headers["content-type"] = r.contentType;
  if (r.extraHeader !== undefined) headers[r.extraHeader[0]] = r.extraHeader[1];
  return headers;
}

/** The dead letters a successful response says it decided. */
function decidedBy(method: string, path: string, response: ApiResponse): string[] {
  if (method !== "POST" || response.status !== 200) return [];
  const route = path.split("?")[0] ?? "";
  if (route === `${BASE}/replay`) {
    const outcomes: Array<{ id: string; outcome: string }> = response.body.outcomes ?? [];
    return outcomes.filter((o) => o.outcome !== "failed").map((o) => o.id);
  }
  if (route.endsWith("/replay") || route.endsWith("/discard")) return [response.body.id];
  return [];
}

/** Where the table stands: the database's clock, and how many dead letters there are and are pending. */
async function mark(): Promise<{ at: string; rows: number; pending: number }> {
  const { rows } = await watcher.query(
    `SELECT clock_timestamp()::text AS at, count(*)::int AS rows,
            count(*) FILTER (WHERE status = 'pending_review')::int AS pending
       FROM core.dead_letters`,
  );
  return rows[0];
}

/**
 * The dead letters decided since `at`, with their actors. The schema lets a row change only by
 * leaving pending_review, which sets resolved_at to the deciding transaction's start; so these are
 * all the rows a request changed.
 */
async function decidedSince(
  at: string,
): Promise<{ rows: number; decided: Array<{ id: string; resolved_by: string }> }> {
  const { rows } = await watcher.query(
    `SELECT (SELECT count(*)::int FROM core.dead_letters) AS rows,
            coalesce((SELECT json_agg(json_build_object('id', id, 'resolved_by', resolved_by) ORDER BY id)
                        FROM core.dead_letters WHERE resolved_at >= $1::timestamptz), '[]') AS decided`,
    [at],
  );
  return rows[0];
}

/** Who a generated Authorization header names, when it is one of the standard tokens. */
const ACTORS: Record<keyof ApiTestBed["tokens"], string> = {
  admin: "local-admin",
  read: "local-reader",
  replay: "local-replayer",
  discard: "local-discarder",
  none: "local-nobody",
};

async function exercise(r: GeneratedRequest): Promise<void> {
  let before = await mark();
  if (before.pending < MIN_PENDING) {
    await topUp();
    before = await mark();
  }
  const path = pathOf(r);
  const sendsBody = r.body !== undefined && r.method !== "GET" && r.method !== "HEAD";
  const response = await bed.call(r.method, path, {
    headers: headersOf(r),
    ...(sendsBody ? { rawBody: r.body } : {}),
  });
  requests++;
  statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
  const after = await decidedSince(before.at);
  const context = `${r.method} ${path} → ${response.status} ${JSON.stringify(response.body)}`;

  expect(ALLOWED_STATUSES.has(response.status), context).toBe(true);
  if (response.status >= 300) {
    expect(response.contentType, context).toBe("application/problem+json");
    if (r.method !== "HEAD") {
      expect(response.body, context).toMatchObject({
        type: expect.any(String),
        title: expect.any(String),
        status: response.status,
      });
    }
    if (response.status === 401)
      expect(response.headers.get("www-authenticate"), context).toMatch(/^Bearer /);
  } else {
    expect(response.contentType, context).toBe("application/json");
  }
  expect(after.rows, context).toBe(before.rows);
  const decided = decidedBy(r.method, path, response).sort();
  expect(
    after.decided.map((d) => d.id),
    context,
  ).toEqual(decided);
  if (decided.length > 0 && "token" in r.authorization) {
    const actor = ACTORS[r.authorization.token];
    expect(
      after.decided.every((d) => d.resolved_by === actor),
      context,
    ).toBe(true);
  }
}

it(`${RUNS} generated requests: never a 5xx, every refusal a problem document, no change but what a 2xx decided`, async () => {
  await fc.assert(fc.asyncProperty(request, exercise), { numRuns: RUNS });
  expect(requests).toBeGreaterThanOrEqual(1000);
  // The generators reach past authorization and validation: successes and each refusal occur.
  for (const status of [200, 400, 401, 403, 404, 409, 415]) {
    expect(statuses.get(status) ?? 0, `responses with status ${status}`).toBeGreaterThan(0);
  }
}, 60_000);
