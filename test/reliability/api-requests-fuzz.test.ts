/**
 * Reliability 5b: generated API requests. Requests to the dead-letter API over real HTTP, built by
 * fast-check: ids (pending, decided, unknown, malformed), cursors, filters, bodies (junk, huge,
 * deeply nested, invalid UTF-8, wrong content types), headers, and tokens — standard ones, ones
 * signed with crafted claims (no or unusable `sub`, expired, not yet valid, wrong issuer or
 * audience, permissions in odd shapes), unsigned, tampered, or signed with another key.
 *
 * Every answer must be a 2xx or 4xx the contract names (never a 5xx), every refusal an RFC 9457
 * problem, and where the request alone decides the answer (a refused token: 401; a missing
 * permission: 403; an unknown route: 404; a known path with another method: 405; an unknown id:
 * 404; a decided one: 409; a malformed id: 400) it must be exactly that. A rejected request changes
 * nothing: not a dead letter's row, not a fence, not the replay queue. A 2xx replay or discard
 * changes exactly the dead letters it names (and stamps exactly those resolved), recorded with the
 * caller's `sub`, and sends exactly one message per dead letter it says it replayed.
 *
 * Beside the requests shaped by route, free-form ones: any method (HEAD and PROPFIND included) on
 * any path under the API or beside it (junk segments, a trailing slash, ids such as `..` or
 * `stats`), Authorization headers as they come (standard tokens, refused ones, none, raw text),
 * content types and headers of every sort, bodies of the route's shape or not (filters with wrong
 * types, `__proto__` keys, over-long and blank reasons), query values hostile or half-valid
 * (timestamps with offsets, impossible dates, cursors of another version): only the contract's
 * statuses, and the same rules for what may change.
 */
import { randomUUID } from "node:crypto";
import fc from "fast-check";
import { type JWTPayload, SignJWT, UnsecuredJWT } from "jose";
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createLocalIssuer } from "../../local/tokens.ts";
import { encodeCursor, filterFingerprint } from "../../shared/dead-letters/cursor.ts";
import { PERMISSION } from "../../shared/http/auth.ts";
import {
  type ApiCall,
  callAt,
  craftedSigner,
  resolveDirectly,
  seedDeadLetters,
  serveApiTrusting,
} from "../support/api-fixtures.ts";
import { type ApiResponse, type ApiTestBed, apiTestBed } from "../support/api-harness.ts";
import { insertFence } from "../support/fixtures.ts";
import { messagesIn } from "../support/sqs.ts";
import { reportFigures, runSeed, sized, tally } from "./support/figures.ts";

const REQUESTS = sized(1100, 2400);
/** What the API may answer to anything a client sends. */
const ALLOWED_STATUSES = [200, 400, 401, 403, 404, 405, 409, 415];
const SEED = runSeed();
const BASE = "/v1/core/dead-letters";
const REPLAY_QUEUE = "api-fuzz-replay";
const CRAFTED_ISSUER = "https://fuzz.example/issuer";
const CRAFTED_AUDIENCE = "jobfence-fuzz";
/** Pending dead letters kept available, so replays and discards keep finding something to decide. */
const MIN_PENDING = 15;
const ALL = Object.values(PERMISSION);

let bed: ApiTestBed;
let crafted: Awaited<ReturnType<typeof craftedSigner>>;
let craftedApi: { call: ApiCall; close(): Promise<void> };
let standardApi: ApiCall;
/** Tokens and Authorization headers made once (signing per request would dominate the run). */
let tokens: Record<string, { header: string | undefined; server: "standard" | "crafted"; actor?: string }>;
let watcher: pg.Client;
let queueUrl: string;
let seeded = 0;

async function topUp(): Promise<void> {
  const kinds = ["poison", "hard", "exhausted", "unrecorded"];
  const rows = Array.from({ length: 20 }, () => {
    const i = seeded++;
    return {
      consumer: i % 3 === 0 ? "fuzz-b" : "fuzz-a",
      job_id: `afz-${i}`,
      queue: queueUrl,
      tenant_id: i % 4 === 0 ? null : `t-${i % 2}`,
      error_kind: kinds[i % 4] as string,
      correlation_id: i % 5 === 0 ? "corr-afz" : `corr-afz-${i}`,
    };
  });
  knownIds.push(...(await seedDeadLetters(bed.db, rows)));
  // Some jobs already succeeded by another path: their replay resolves as superseded.
  await bed.db.withClient(async (c) => {
    for (const row of rows.filter((_, k) => k % 6 === 0))
      await insertFence(c, row.job_id, { consumer: row.consumer });
  });
}

/** How each token variant is expected to fare, whatever the route. */
type TokenFate = "accepted" | "refused";

const TOKEN_FATES: Record<string, TokenFate> = {};

beforeAll(async () => {
  bed = await apiTestBed();
  standardApi = callAt(bed.apiUrl);
  crafted = await craftedSigner();
  craftedApi = await serveApiTrusting(bed, {
    jwks: crafted.jwks,
    issuer: CRAFTED_ISSUER,
    audience: CRAFTED_AUDIENCE,
  });
  watcher = new pg.Client({ connectionString: bed.db.url });
  await watcher.connect();
  queueUrl = (await bed.queue(REPLAY_QUEUE)).url;
  await topUp();
  await topUp();
  // Some already decided from the start, so requests naming a decided dead letter (409) occur early.
  const decided = await seedDeadLetters(
    bed.db,
    Array.from({ length: 9 }, (_, i) => ({
      consumer: "fuzz-a",
      job_id: `afz-decided-${i}`,
      queue: queueUrl,
    })),
  );
  await resolveDirectly(bed.db, decided.slice(0, 3), "replayed");
  await resolveDirectly(bed.db, decided.slice(3, 6), "discarded");
  await resolveDirectly(bed.db, decided.slice(6), "superseded");

  const now = Math.floor(Date.now() / 1000);
  const claims = (extra: JWTPayload): JWTPayload => ({
    iss: CRAFTED_ISSUER,
    aud: CRAFTED_AUDIENCE,
    ...extra,
  });
  const craftedTokens: Record<string, { claims: JWTPayload; fate: TokenFate }> = {
    "crafted: all permissions in scope": {
      claims: claims({ sub: "fuzz-all", scope: ALL.join(" ") }),
      fate: "accepted",
    },
    "crafted: permissions array": {
      claims: claims({ sub: "fuzz-array", permissions: ALL }),
      fate: "accepted",
    },
    "crafted: read in scope, replay in permissions, junk beside": {
      claims: claims({
        sub: "fuzz-mixed",
        scope: PERMISSION.read,
        permissions: [PERMISSION.replay, 5, null, {}],
      }),
      fate: "accepted",
    },
    "crafted: audience among others": {
      claims: {
        iss: CRAFTED_ISSUER,
        aud: ["other", CRAFTED_AUDIENCE],
        sub: "fuzz-aud",
        scope: ALL.join(" "),
      },
      fate: "accepted",
    },
    "crafted: 6 kB of other claims": {
      claims: claims({ sub: "fuzz-big", scope: ALL.join(" "), filler: "f".repeat(6000) }),
      fate: "accepted",
    },
    "crafted: scope as an array": {
      claims: claims({ sub: "fuzz-scope-array", scope: ALL }),
      fate: "accepted",
    },
    "crafted: scope as a number": {
      claims: claims({ sub: "fuzz-scope-number", scope: 7 }),
      fate: "accepted",
    },
    "crafted: tab-separated scope": {
      claims: claims({ sub: "fuzz-tabs", scope: ALL.join("\t") }),
      fate: "accepted",
    },
    "crafted: permissions as a string": {
      claims: claims({ sub: "fuzz-perm-string", permissions: PERMISSION.read }),
      fate: "accepted",
    },
    "crafted: no sub": { claims: claims({ scope: ALL.join(" ") }), fate: "refused" },
    "crafted: blank sub": { claims: claims({ sub: " \t", scope: ALL.join(" ") }), fate: "refused" },
    "crafted: sub with U+0000": {
      claims: claims({ sub: "a\u0000b", scope: ALL.join(" ") }),
      fate: "refused",
    },
    "crafted: sub of 256 characters": {
      claims: claims({ sub: "s".repeat(256), scope: ALL.join(" ") }),
      fate: "refused",
    },
    "crafted: sub as a number": {
      claims: claims({ sub: 42 as unknown as string, scope: ALL.join(" ") }),
      fate: "refused",
    },
    "crafted: expired": {
      claims: claims({ sub: "fuzz-old", scope: ALL.join(" "), exp: now - 120 }),
      fate: "refused",
    },
    "crafted: not yet valid": {
      claims: claims({ sub: "fuzz-early", scope: ALL.join(" "), nbf: now + 3600 }),
      fate: "refused",
    },
    "crafted: wrong issuer": {
      claims: { iss: "https://evil.example", aud: CRAFTED_AUDIENCE, sub: "x", scope: ALL.join(" ") },
      fate: "refused",
    },
    "crafted: wrong audience": {
      claims: { iss: CRAFTED_ISSUER, aud: "other", sub: "x", scope: ALL.join(" ") },
      fate: "refused",
    },
  };
  tokens = {};
  for (const [name, { claims: c, fate }] of Object.entries(craftedTokens)) {
    tokens[name] = {
      header: `Bearer ${await crafted.sign(c)}`,
      server: "crafted",
      ...(typeof c.sub === "string" ? { actor: c.sub } : {}),
    };
    TOKEN_FATES[name] = fate;
  }
  const actors = {
    admin: "local-admin",
    read: "local-reader",
    replay: "local-replayer",
    discard: "local-discarder",
    none: "local-nobody",
  };
  for (const [name, token] of Object.entries(bed.tokens)) {
    tokens[`standard: ${name}`] = {
      header: `Bearer ${token}`,
      server: "standard",
      actor: actors[name as keyof typeof actors],
    };
    TOKEN_FATES[`standard: ${name}`] = "accepted";
  }
  tokens["standard: lower-case scheme"] = {
    header: `bearer ${bed.tokens.admin}`,
    server: "standard",
    actor: "local-admin",
  };
  TOKEN_FATES["standard: lower-case scheme"] = "accepted";

  const admin = bed.tokens.admin;
  const [head, payload, signature] = admin.split(".") as [string, string, string];
  const middle = Math.floor(payload.length / 2);
  const flipped = payload[middle] === "A" ? "B" : "A";
  const otherIssuer = await createLocalIssuer();
  const refused: Record<string, string | undefined> = {
    "no Authorization header": undefined,
    "tampered payload": `Bearer ${head}.${payload.slice(0, middle)}${flipped}${payload.slice(middle + 1)}.${signature}`,
    "unsigned (alg none)": `Bearer ${new UnsecuredJWT({ sub: "x", scope: ALL.join(" ") })
      .setIssuer(bed.issuer.issuer)
      .setAudience(bed.issuer.audience)
      .setExpirationTime("1h")
      .encode()}`,
    "HS256 keyed with the public key": `Bearer ${await new SignJWT({ sub: "x", scope: ALL.join(" ") })
      .setProtectedHeader({ alg: "HS256", kid: "local-1" })
      .setIssuer(bed.issuer.issuer)
      .setAudience(bed.issuer.audience)
      .setExpirationTime("1h")
      .sign(new TextEncoder().encode(JSON.stringify(bed.issuer.jwks.keys[0])))}`,
    "another issuer's key": `Bearer ${await otherIssuer.sign("intruder", ALL)}`,
    "expired (our issuer)": `Bearer ${await bed.issuer.sign("expired", ALL, { ttlSeconds: -60 })}`,
    "blank sub (our issuer)": `Bearer ${await bed.issuer.sign(" ", ALL)}`,
    "Basic scheme": "Basic YWRtaW46YWRtaW4=",
    "scheme alone": "Bearer",
    "two spaces": `Bearer  ${admin}`,
    "token without scheme": admin,
    "two tokens": `Bearer ${admin}, Bearer ${admin}`,
    "trailing junk": `Bearer ${admin} x`,
    "truncated token": `Bearer ${admin.slice(0, -10)}`,
  };
  for (const [name, header] of Object.entries(refused)) {
    tokens[`broken: ${name}`] = { header, server: "standard" };
    TOKEN_FATES[`broken: ${name}`] = "refused";
  }
}, 120_000);

afterAll(async () => {
  await watcher?.end();
  await craftedApi?.close();
  await bed?.close();
});

// ---- Generators -------------------------------------------------------------------------------

type Route = "list" | "stats" | "one" | "replay" | "bulk" | "discard";
const ROUTE_METHOD: Record<Route, string> = {
  list: "GET",
  stats: "GET",
  one: "GET",
  replay: "POST",
  bulk: "POST",
  discard: "POST",
};
const ROUTE_PERMISSION: Record<Route, string> = {
  list: PERMISSION.read,
  stats: PERMISSION.read,
  one: PERMISSION.read,
  replay: PERMISSION.replay,
  bulk: PERMISSION.replay,
  discard: PERMISSION.discard,
};

/** Which dead letter (or not) a path names; resolved against the table when the request runs. */
type IdSpec =
  | { readonly kind: "pending" | "decided" | "unknown" | "pending-upper-case" }
  | { readonly kind: "malformed"; readonly raw: string };

const idSpec: fc.Arbitrary<IdSpec> = fc.oneof(
  { weight: 5, arbitrary: fc.constant({ kind: "pending" as const }) },
  { weight: 4, arbitrary: fc.constant({ kind: "decided" as const }) },
  { weight: 2, arbitrary: fc.constant({ kind: "unknown" as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: "pending-upper-case" as const }) },
  {
    weight: 3,
    arbitrary: fc
      .oneof(
        fc.constantFrom(
          "not-a-uuid",
          "00000000-0000-0000-0000-00000000000",
          "{6f1c2e8a-4b5d-4c3e-9f10-2a3b4c5d6e7f}",
          "urn:uuid:6f1c2e8a-4b5d-4c3e-9f10-2a3b4c5d6e7f",
          "6f1c2e8a4b5d4c3e9f102a3b4c5d6e7f",
          "' OR 1=1 --",
          "%00",
          "x".repeat(2000),
          "😀",
        ),
        // Not a UUID, and not a segment that names another route or that URLs resolve away.
        fc
          .string({ minLength: 1, maxLength: 40 })
          .filter((s) => !/^[0-9a-f-]{36}$/i.test(s) && ![".", "..", "stats", "replay"].includes(s)),
      )
      .map((raw) => ({ kind: "malformed" as const, raw })),
  },
);

const hostile = fc.constantFrom(
  "' OR 1=1 --",
  "; DROP TABLE core.dead_letters;",
  "%",
  "_",
  "\\",
  "\u0000",
  "a\u0000b",
  "\ud800",
  "😀",
  "",
  " ",
  "fuzz-a",
  "fuzz-b",
  "t-1",
  "corr-afz",
  "x".repeat(300),
);
/** Text of every kind, hostile values included. */
const queryValue = fc.oneof(
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
    fc.constantFrom("Z", "Z", "+00:00", "+02:00", "-05:30", "+15:59", "-15:59"),
  )
  .map(([date, offset]) => date.toISOString().replace("Z", offset));
/** Instants, and text that is not one (or not quite). */
const timestamp = fc.oneof(
  instant,
  fc.constantFrom("yesterday", "2024-01-01", "2024-01-01T00:00:00", "2024-02-30T00:00:00Z", "1700000000", ""),
);
const limitValue = fc.oneof(
  fc.integer({ min: -3, max: 600 }).map(String),
  fc.constantFrom("abc", "1.5", "1e2", "0x10", " 7", " 7 ", "", "Infinity"),
);
const base64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
const cursorValue = fc.oneof(
  fc.constantFrom("!!!", "abc", "e30", "", "A".repeat(3000), "eyJ2IjoxfQ"),
  fc.string({ maxLength: 60 }),
  fc.tuple(instant, fc.uuid()).map(([t, i]) => encodeCursor({ createdAt: t, id: i }, {}, "list")),
  // A cursor made for another filter, or another walk.
  fc
    .tuple(instant, fc.uuid())
    .map(([t, i]) => encodeCursor({ createdAt: t, id: i }, { consumer: "fuzz-a" }, "list")),
  fc.tuple(instant, fc.uuid()).map(([t, i]) => encodeCursor({ createdAt: t, id: i }, {}, "bulk-replay")),
  fc.tuple(instant, fc.uuid(), fc.nat()).map(([t, i, n]) => {
    const good = encodeCursor({ createdAt: t, id: i }, {}, "list");
    const at = n % good.length;
    return `${good.slice(0, at)}${good[at] === "x" ? "y" : "x"}${good.slice(at + 1)}`;
  }),
  // Hand-built: another version, a timestamp that is not one, an id that is not a UUID, a fingerprint.
  fc
    .record({
      v: fc.constantFrom(1, 2),
      t: timestamp,
      i: fc.oneof(fc.uuid(), fc.constant("not-a-uuid")),
      f: fc.oneof(fc.constant(filterFingerprint({ walk: "list" })), fc.stringMatching(/^[0-9a-f]{16}$/)),
    })
    .map(base64url),
);
/** Any value at all for any key. */
const anyValue = fc.oneof(queryValue, statusValue, kindValue, timestamp, limitValue, cursorValue);
/** Per query key, values the API accepts (mostly), so requests get past validation often. */
const goodQuery: Record<string, fc.Arbitrary<string>> = {
  status: fc.constantFrom("pending_review", "replayed", "discarded", "superseded"),
  consumer: fc.constantFrom("fuzz-a", "fuzz-b", "%", "' OR 1=1 --"),
  // The replay queue's URL, put in when the request runs; or a name, or a pattern, that is none.
  queue: fc.constantFrom("QUEUE_URL", "QUEUE_URL", REPLAY_QUEUE, "%"),
  error_kind: fc.constantFrom("poison", "hard", "exhausted", "unrecorded"),
  tenant_id: fc.constantFrom("t-0", "t-1", "_"),
  job_id: fc.nat({ max: 80 }).map((i) => `afz-${i}`),
  correlation_id: fc.constantFrom("corr-afz", "corr-afz-3"),
  created_after: instant,
  created_before: instant,
  limit: fc.oneof(fc.integer({ min: 1, max: 60 }).map(String), limitValue),
  cursor: cursorValue,
};
const queryPair = fc
  .oneof(
    { weight: 8, arbitrary: fc.constantFrom(...Object.keys(goodQuery)) },
    { weight: 1, arbitrary: fc.constantFrom("foo", "Status", "__proto__", "constructor", "offset") },
  )
  .chain((key) =>
    fc.tuple(
      fc.constant(key),
      fc.oneof(
        { weight: 3, arbitrary: (Object.hasOwn(goodQuery, key) ? goodQuery[key] : undefined) ?? anyValue },
        { weight: 2, arbitrary: anyValue },
      ),
    ),
  );
const query = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.array(queryPair, { maxLength: 3 }).map((pairs) => new URLSearchParams(pairs).toString()),
  },
  // Repeated keys (joined with commas, as API Gateway does) and broken encodings.
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      "status=replayed&status=discarded",
      "%zz",
      "a=%",
      "&&&",
      "=x",
      "limit=%00",
      "consumer=%ED%A0%80",
    ),
  },
);

/** A body: raw text or bytes, and its content type. */
interface BodySpec {
  readonly kind: string;
  readonly body?: string | Uint8Array;
  readonly contentType?: string;
}
const goodBodyFor = (route: Route): fc.Arbitrary<BodySpec> => {
  if (route === "discard") {
    return fc
      .string({ minLength: 1, maxLength: 60 })
      .filter((s) => /\S/.test(s) && s.isWellFormed() && !s.includes("\u0000"))
      .map((reason) => ({ kind: "good", body: JSON.stringify({ reason }), contentType: "application/json" }));
  }
  if (route === "bulk") {
    return fc
      .record(
        {
          filter: fc.record(
            {
              consumer: goodQuery.consumer as fc.Arbitrary<string>,
              error_kind: goodQuery.error_kind as fc.Arbitrary<string>,
            },
            { requiredKeys: [] },
          ),
          all: fc.boolean(),
          dry_run: fc.boolean(),
          limit: fc.integer({ min: 1, max: 10 }),
        },
        { requiredKeys: ["filter"] },
      )
      .map((b) => ({ kind: "good", body: JSON.stringify(b), contentType: "application/json" }));
  }
  return fc.constantFrom<BodySpec>(
    { kind: "good" },
    { kind: "good", body: "{}", contentType: "application/json" },
  );
};
/** A fine JSON body under a content type that is not JSON (or none): 415. */
const notJson: fc.Arbitrary<BodySpec> = fc
  .tuple(
    fc.constantFrom(
      "application/x-www-form-urlencoded",
      "text/plain",
      "application/octet-stream",
      "multipart/form-data; boundary=x",
      "application/jsonp",
      undefined,
    ),
    fc.constantFrom('{"reason":"x"}', '{"filter":{"consumer":"fuzz-a"}}', "{}"),
  )
  .map(([contentType, body]) => ({
    kind: `content type ${contentType ?? "none"}`,
    body,
    ...(contentType ? { contentType } : {}),
  }));
const badBody: fc.Arbitrary<BodySpec> = fc.oneof(
  { weight: 3, arbitrary: notJson },
  {
    weight: 1,
    arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => ({
      kind: "junk JSON",
      body: JSON.stringify(v) ?? "null",
      contentType: "application/json",
    })),
  },
  {
    weight: 1,
    arbitrary: fc
      .string({ maxLength: 60 })
      .map((s) => ({ kind: "junk text", body: s, contentType: "application/json" })),
  },
  fc.constantFrom<BodySpec>(
    {
      kind: "prototype keys",
      body: '{"__proto__":{"all":true},"constructor":{"reason":"x"}}',
      contentType: "application/json",
    },
    { kind: "reason not a string", body: '{"reason":["x"]}', contentType: "application/json" },
    { kind: "blank reason", body: '{"reason":" \\t "}', contentType: "application/json" },
    { kind: "reason with U+0000", body: '{"reason":"a\\u0000b"}', contentType: "application/json" },
    {
      kind: "over-long reason",
      body: JSON.stringify({ reason: "r".repeat(5000) }),
      contentType: "application/json",
    },
    {
      kind: "huge body",
      body: JSON.stringify({ reason: "ok", pad: "p".repeat(200_000) }),
      contentType: "application/json",
    },
    {
      kind: "deep body",
      body: `${'{"a":'.repeat(5000)}1${"}".repeat(5000)}`,
      contentType: "application/json",
    },
    {
      kind: "invalid UTF-8",
      body: new Uint8Array([0x7b, 0x22, 0x72, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]),
      contentType: "application/json",
    },
    { kind: "bulk matching everything", body: '{"filter":{}}', contentType: "application/json" },
    {
      kind: "bulk with unknown filter key",
      body: '{"filter":{"bogus":1},"all":true}',
      contentType: "application/json",
    },
  ),
);
const extraHeaders = fc.option(
  fc.oneof(
    fc.tuple(
      fc.constantFrom("x-fuzz", "accept", "x-forwarded-for", "x-http-method-override", "origin"),
      fc.string({ maxLength: 40 }).map((s) => s.replace(/[^\x20-\x7e]/g, "?")),
    ),
    fc.constant<[string, string]>(["x-big", "b".repeat(6000)]),
    fc.constant<[string, string]>(["content-encoding", "gzip"]),
    fc.constant<[string, string]>(["accept", "application/xml"]),
  ),
  { nil: undefined, freq: 3 },
);

const ROUTES = Object.keys(ROUTE_METHOD) as Route[];

/** One generated request, before ids are resolved. */
type RequestSpec =
  | {
      readonly shape: "route";
      readonly route: Route;
      readonly token: string;
      readonly id: IdSpec;
      readonly query: string;
      readonly body: BodySpec;
      readonly header: [string, string] | undefined;
    }
  | { readonly shape: "wrong method"; readonly route: Route; readonly method: string; readonly token: string }
  | {
      readonly shape: "unknown path";
      readonly method: string;
      readonly path: string;
      readonly token: string;
    }
  | FreeFormRequest;

const tokenName = () => fc.constantFrom(...Object.keys(tokens));
/** Routes, weighted towards the ones that change state (the ones a rejection must not let through). */
const weightedRoute = fc.oneof(
  { weight: 2, arbitrary: fc.constantFrom<Route>("list", "one", "bulk") },
  { weight: 1, arbitrary: fc.constant<Route>("stats") },
  { weight: 3, arbitrary: fc.constantFrom<Route>("replay", "discard") },
);
const routeRequest = fc.tuple(weightedRoute, fc.nat({ max: 4 })).chain(([route, n]) =>
  fc.record({
    shape: fc.constant("route" as const),
    route: fc.constant(route),
    token: fc.oneof(
      { weight: 3, arbitrary: fc.constant("standard: admin") },
      { weight: 4, arbitrary: tokenName() },
    ),
    id: idSpec,
    query:
      route === "list"
        ? query
        : fc.oneof({ weight: 5, arbitrary: fc.constant("") }, { weight: 1, arbitrary: query }),
    // Three in five with a body of the route's shape, so requests get past validation often.
    body: n < 3 ? goodBodyFor(route) : badBody,
    header: extraHeaders,
  }),
);
// ---- Free-form requests -------------------------------------------------------------------------
// Any method (HEAD and PROPFIND included) on any path under the API or beside it, with
// Authorization headers, content types, headers and bodies as they come: the contract's statuses
// only, never a 5xx, every refusal a problem document, no change but what a 2xx decided.

/** Where a free-form request goes. */
const WHERES = ["list", "stats", "bulk", "one", "replay", "discard", "junk", "trailing", "outside"] as const;
type Where = (typeof WHERES)[number];

/** A free-form request, before ids are resolved. */
interface FreeFormRequest {
  readonly shape: "free form";
  readonly method: string;
  readonly where: Where;
  /** A dead letter by its place among those seeded (mostly the first few dozen, so decided ones are asked again), or a raw segment. */
  readonly id: { readonly known: number } | { readonly raw: string };
  readonly junk: string;
  readonly query: string;
  readonly authorization:
    | { readonly standard: keyof ApiTestBed["tokens"] }
    | { readonly refused: number }
    | { readonly absent: true }
    | { readonly raw: string };
  readonly contentType: string | undefined;
  readonly header: [string, string] | undefined;
  readonly body: string | undefined;
}

const anyFilter = fc.record(
  {
    consumer: queryValue,
    queue: queryValue,
    error_kind: fc.oneof(kindValue, queryValue),
    tenant_id: fc.oneof(queryValue, fc.constant(null)),
    job_id: queryValue,
    correlation_id: queryValue,
    created_after: timestamp,
    created_before: timestamp,
    status: statusValue,
    bogus: queryValue,
  },
  { requiredKeys: [] },
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
    ].map((key) => [key, goodQuery[key] ?? queryValue]),
  ),
  { requiredKeys: [] },
);
const freeBulkBody = fc.oneof(
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
        cursor: cursorValue,
        extra: fc.jsonValue({ maxDepth: 1 }),
      },
      { requiredKeys: [] },
    ),
  },
);
const freeDiscardBody = fc.oneof(
  { weight: 3, arbitrary: fc.record({ reason: fc.string({ minLength: 1, maxLength: 40 }) }) },
  {
    weight: 1,
    arbitrary: fc.record(
      {
        reason: fc.oneof(
          queryValue,
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
const freeJunkBody = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
  fc.string({ maxLength: 40 }),
  fc.constantFrom("{", "[]", "null", "{}", '{"__proto__":{"all":true}}', '{"reason":"fine"}'),
);
/** A body for where the request goes: mostly of its shape, sometimes anything, sometimes none. */
function freeBodyFor(where: Where): fc.Arbitrary<string | undefined> {
  const fitting =
    where === "bulk"
      ? freeBulkBody.map((b) => JSON.stringify(b))
      : where === "discard"
        ? freeDiscardBody.map((b) => JSON.stringify(b))
        : fc.constantFrom(undefined, "{}");
  return fc.oneof(
    { weight: 6, arbitrary: fitting },
    { weight: 2, arbitrary: freeJunkBody },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );
}
const freeAuthorization: fc.Arbitrary<FreeFormRequest["authorization"]> = fc.oneof(
  { weight: 6, arbitrary: fc.constant({ standard: "admin" as const }) },
  {
    weight: 5,
    arbitrary: fc.constantFrom("read", "replay", "discard", "none").map((k) => ({
      standard: k as keyof ApiTestBed["tokens"],
    })),
  },
  { weight: 1, arbitrary: fc.nat().map((n) => ({ refused: n })) },
  { weight: 1, arbitrary: fc.constant({ absent: true as const }) },
  { weight: 1, arbitrary: fc.string({ maxLength: 60 }).map((raw) => ({ raw })) },
  { weight: 1, arbitrary: fc.string({ maxLength: 60 }).map((raw) => ({ raw: `Bearer ${raw}` })) },
);
const freeContentType = fc.oneof(
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
const freeHeader = fc.option(
  fc.tuple(
    fc.constantFrom("x-fuzz", "accept", "x-forwarded-for", "origin", "x-amz-date"),
    fc.string({ maxLength: 30 }),
  ),
  { nil: undefined, freq: 4 },
);
const freeId = fc.oneof(
  { weight: 6, arbitrary: fc.nat({ max: 40 }).map((known) => ({ known })) },
  { weight: 1, arbitrary: fc.uuid().map((raw) => ({ raw })) },
  {
    weight: 2,
    arbitrary: fc
      .oneof(queryValue, fc.constantFrom("stats", "replay", "discard", "..", "%2F", "{id}"))
      .map((s) => ({ raw: encodeURIComponent(s.toWellFormed()) })),
  },
);
/** Mostly a route as the API defines it; sometimes any method anywhere. */
const freeTarget = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.constantFrom<{ method: string; where: Where }>(
      { method: "GET", where: "list" },
      { method: "GET", where: "stats" },
      { method: "GET", where: "one" },
      { method: "GET", where: "trailing" },
      { method: "POST", where: "replay" },
      { method: "POST", where: "bulk" },
      { method: "POST", where: "discard" },
    ),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      method: fc.constantFrom("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "PROPFIND"),
      where: fc.constantFrom(...WHERES),
    }),
  },
);
const freeFormRequest: fc.Arbitrary<FreeFormRequest> = freeTarget.chain(({ method, where }) =>
  fc.record({
    shape: fc.constant("free form" as const),
    method: fc.constant(method),
    where: fc.constant(where),
    id: freeId,
    junk: fc.string({ maxLength: 10 }),
    query,
    authorization: freeAuthorization,
    contentType: freeContentType,
    header: freeHeader,
    body: freeBodyFor(where),
  }),
);

/**
 * The path of a route (or of a place beside the routes) naming dead letter `id`; `junk` is a
 * free-form request's extra segment.
 */
function pathTo(where: Where, id: string, junk = ""): string {
  return {
    list: BASE,
    stats: `${BASE}/stats`,
    bulk: `${BASE}/replay`,
    one: `${BASE}/${id}`,
    replay: `${BASE}/${id}/replay`,
    discard: `${BASE}/${id}/discard`,
    junk: `${BASE}/${id}/${encodeURIComponent(junk)}`,
    trailing: `${BASE}/`,
    outside: `/v1/core/${encodeURIComponent(junk)}`,
  }[where];
}

/** A path with a generated query, the replay queue's URL put in for its placeholder. */
function withQuery(path: string, query: string): string {
  return query ? `${path}?${query.replaceAll("QUEUE_URL", encodeURIComponent(queueUrl))}` : path;
}

/** Ids of the dead letters seeded, in the order seeded: what a free-form `{ known }` id names. */
const knownIds: string[] = [];

/** Where a free-form request goes, with what, and who it names as the caller. */
function freeFormCall(spec: FreeFormRequest): {
  path: string;
  headers: Record<string, string>;
  body: string | undefined;
  actor: string | undefined;
} {
  const id = "known" in spec.id ? (knownIds[spec.id.known % knownIds.length] ?? "none") : spec.id.raw;
  const path = pathTo(spec.where, id, spec.junk);
  const headers: Record<string, string> = {};
  const auth = spec.authorization;
  let actor: string | undefined;
  if ("standard" in auth) {
    const token = tokens[`standard: ${auth.standard}`];
    if (token?.header !== undefined) headers.authorization = token.header;
    actor = token?.actor;
  } else if ("refused" in auth) {
    const refused = Object.keys(tokens).filter((name) => TOKEN_FATES[name] === "refused");
    const header = tokens[refused[auth.refused % refused.length] ?? ""]?.header;
    if (header !== undefined) headers.authorization = header;
  } else if ("raw" in auth) headers.authorization = auth.raw;
  if (spec.contentType !== undefined) headers["content-type"] = spec.contentType;
  if (spec.header !== undefined) headers[spec.header[0]] = spec.header[1];
  const sendsBody = spec.body !== undefined && spec.method !== "GET" && spec.method !== "HEAD";
  return {
    path: withQuery(path, spec.query),
    headers,
    body: sendsBody ? spec.body : undefined,
    actor,
  };
}

const requestSpec = (): fc.Arbitrary<RequestSpec> =>
  fc.oneof(
    { weight: 14, arbitrary: freeFormRequest },
    { weight: 12, arbitrary: routeRequest },
    {
      weight: 1,
      arbitrary: fc.record({
        shape: fc.constant("wrong method" as const),
        route: fc.constantFrom(...ROUTES),
        method: fc.constantFrom("PUT", "PATCH", "DELETE", "OPTIONS"),
        token: fc.constant("standard: admin"),
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        shape: fc.constant("unknown path" as const),
        method: fc.constantFrom("GET", "POST"),
        path: fc.oneof(
          fc.constantFrom(
            "/",
            "/v1",
            "/v1/core",
            "/v1/core/dead-letter",
            `${BASE}/stats/x`,
            `${BASE}/x/y/z`,
            "/v2/core/dead-letters",
          ),
          fc.string({ maxLength: 20 }).map((s) => `/v1/core/${encodeURIComponent(s)}x`),
        ),
        token: fc.constant("standard: admin"),
      }),
    },
  );

// ---- Running one ------------------------------------------------------------------------------

/** What the table, the fences and the replay queue hold: what a request may change. */
interface State {
  /** The database's clock when the state was read. */
  readonly at: string;
  readonly rows: Map<string, { hash: string; status: string; resolved_by: string | null }>;
  readonly fences: number;
  readonly queued: number;
}

async function state(): Promise<State> {
  const clock = await watcher.query<{ at: string }>("SELECT clock_timestamp()::text AS at");
  const { rows } = await watcher.query<{
    id: string;
    hash: string;
    status: string;
    resolved_by: string | null;
  }>("SELECT id::text, md5(d::text) AS hash, status, resolved_by FROM core.dead_letters d");
  const fences = await watcher.query<{ n: number }>("SELECT count(*)::int AS n FROM core.processed_jobs");
  return {
    at: clock.rows[0]?.at as string,
    rows: new Map(rows.map((r) => [r.id, { hash: r.hash, status: r.status, resolved_by: r.resolved_by }])),
    fences: fences.rows[0]?.n ?? 0,
    queued: messagesIn(bed.emulator, REPLAY_QUEUE),
  };
}

/** The dead letters whose resolved_at is at or after `at`, in id order. */
async function decidedSince(at: string): Promise<string[]> {
  const { rows } = await watcher.query<{ id: string }>(
    "SELECT id::text FROM core.dead_letters WHERE resolved_at >= $1::timestamptz ORDER BY id",
    [at],
  );
  return rows.map((r) => r.id).sort();
}

function pickId(before: State, spec: IdSpec, n: number): string {
  const ids = [...before.rows.entries()];
  const of = (wanted: (status: string) => boolean) => {
    const matching = ids.filter(([, r]) => wanted(r.status)).map(([id]) => id);
    return matching[n % Math.max(1, matching.length)];
  };
  switch (spec.kind) {
    case "pending":
      return of((s) => s === "pending_review") ?? randomUUID();
    case "pending-upper-case":
      return (of((s) => s === "pending_review") ?? randomUUID()).toUpperCase();
    case "decided":
      return of((s) => s !== "pending_review") ?? randomUUID();
    case "unknown":
      return randomUUID();
    default:
      return encodeURIComponent(spec.raw.toWellFormed());
  }
}

/** Statuses the contract allows per route, for a caller with the permission. */
const ROUTE_STATUSES: Record<Route, number[]> = {
  list: [200, 400],
  stats: [200, 400],
  one: [200, 400, 404],
  replay: [200, 400, 404, 409, 415],
  bulk: [200, 400, 415],
  discard: [200, 400, 404, 409, 415],
};

const statuses: Record<string, number> = {};
const categories: Record<string, number> = {};
let requests = 0;
let rejected = 0;
let replaysSent = 0;
let rejectedThatChangedState = 0;
let decidedByRequests = 0;

async function exercise(spec: RequestSpec, n: number): Promise<void> {
  let before = await state();
  if ([...before.rows.values()].filter((r) => r.status === "pending_review").length < MIN_PENDING) {
    await topUp();
    before = await state();
  }
  const token = ("token" in spec ? tokens[spec.token] : undefined) ?? {
    header: undefined,
    server: "standard" as const,
  };
  const fate = "token" in spec ? TOKEN_FATES[spec.token] : undefined;
  const headers: Record<string, string> = {};
  if (token.header !== undefined) headers.authorization = token.header;

  let method: string;
  let path: string;
  let body: string | Uint8Array | undefined;
  /** The exact status the request alone decides, when it does. */
  let exact: number | undefined;
  let allowed: number[];
  let category: string;
  let actor = token.actor;
  if (spec.shape === "free form") {
    const free = freeFormCall(spec);
    method = spec.method;
    path = free.path;
    body = free.body;
    Object.assign(headers, free.headers);
    actor = free.actor;
    allowed = ALLOWED_STATUSES;
    category = `free form: ${spec.where}`;
  } else if (spec.shape === "unknown path") {
    method = spec.method;
    path = spec.path;
    exact = 404;
    allowed = [404];
    category = "unknown path";
  } else if (spec.shape === "wrong method") {
    method = spec.method;
    path = pathTo(spec.route, randomUUID());
    exact = 405;
    allowed = [405];
    category = "wrong method";
  } else {
    const { route } = spec;
    method = ROUTE_METHOD[route];
    const id = pickId(before, spec.id, n);
    path = withQuery(pathTo(route, id), spec.query);
    // fetch sends no body with a GET.
    if (method === "POST") {
      if (spec.body.body !== undefined) body = spec.body.body;
      if (spec.body.contentType !== undefined) headers["content-type"] = spec.body.contentType;
    }
    if (spec.header) headers[spec.header[0]] = spec.header[1];
    allowed = ROUTE_STATUSES[route];
    const scopes = permissionsOfToken(spec.token);
    const permitted = scopes.has(ROUTE_PERMISSION[route]);
    const hasId = route === "one" || route === "replay" || route === "discard";
    category =
      fate === "refused"
        ? `token: ${spec.token}`
        : !permitted
          ? "missing permission"
          : hasId
            ? `id: ${spec.id.kind}`
            : method === "GET"
              ? `${route}: query`
              : `${route}: ${spec.body.kind}`;
    if (fate === "refused") {
      exact = 401;
      allowed = [401];
    } else if (!permitted) {
      exact = 403;
      allowed = [403];
    } else if (hasId && spec.id.kind === "malformed" && spec.id.raw.length > 0) exact = 400;
    else if (hasId && spec.body.kind === "good" && spec.query === "") {
      if (spec.id.kind === "unknown") exact = 404;
      if (
        spec.id.kind === "decided" &&
        route !== "one" &&
        [...before.rows.values()].some((r) => r.status !== "pending_review")
      )
        exact = 409;
    }
  }
  tally(categories, category);

  const call = token.server === "crafted" ? craftedApi.call : standardApi;
  const response = await call(method, path, {
    headers,
    ...(body !== undefined ? { rawBody: body as string } : {}),
  });
  requests++;
  tally(statuses, String(response.status));
  const after = await state();
  const context = `${category}: ${method} ${path.slice(0, 200)} → ${response.status} ${JSON.stringify(response.body)?.slice(0, 300)}`;

  expect(response.status, context).toBeLessThan(500);
  expect(allowed, context).toContain(response.status);
  if (exact !== undefined) expect(response.status, context).toBe(exact);
  if (response.status >= 400) {
    rejected++;
    expect(response.contentType, context).toBe("application/problem+json");
    // A HEAD answer has no body to read.
    if (method !== "HEAD") {
      expect(response.body, context).toMatchObject({
        type: expect.any(String),
        title: expect.any(String),
        status: response.status,
      });
    }
    if (response.status === 401)
      expect(response.headers.get("www-authenticate"), context).toMatch(/^Bearer /);
    if (response.status === 405) expect(response.headers.get("allow"), context).toMatch(/GET|POST/);
  } else {
    expect(response.contentType, context).toBe("application/json");
  }

  // What changed, and whether the response owns up to exactly that.
  const changed = [...after.rows.entries()]
    .filter(([id, r]) => before.rows.get(id)?.hash !== r.hash)
    .map(([id]) => id)
    .sort();
  expect(after.rows.size, context).toBe(before.rows.size);
  expect(after.fences, context).toBe(before.fences);
  if (
    response.status >= 400 &&
    (changed.length > 0 || after.queued !== before.queued || after.fences !== before.fences)
  ) {
    rejectedThatChangedState++;
  }
  const named = decidedBy(method, path, response);
  expect(changed, context).toEqual(named.ids.sort());
  // A row changes only by leaving pending_review, which stamps resolved_at with the deciding
  // transaction's start: the rows stamped since the request began are exactly the ones it names.
  expect(await decidedSince(before.at), context).toEqual(named.ids.sort());
  expect(after.queued - before.queued, context).toBe(named.sent);
  for (const id of changed) {
    expect(before.rows.get(id)?.status, context).toBe("pending_review");
    expect(after.rows.get(id)?.resolved_by, context).toBe(actor);
  }
  replaysSent += named.sent;
  decidedByRequests += changed.length;
}

/** The permissions a token variant grants, as SPEC §6 reads them. */
function permissionsOfToken(name: string): Set<string> {
  const grants: Record<string, string[]> = {
    "standard: admin": ALL,
    "standard: read": [PERMISSION.read],
    "standard: replay": [PERMISSION.replay],
    "standard: discard": [PERMISSION.discard],
    "standard: none": [],
    "standard: lower-case scheme": ALL,
    "crafted: all permissions in scope": ALL,
    "crafted: permissions array": ALL,
    "crafted: read in scope, replay in permissions, junk beside": [PERMISSION.read, PERMISSION.replay],
    "crafted: audience among others": ALL,
    "crafted: 6 kB of other claims": ALL,
  };
  return new Set(grants[name] ?? []);
}

/** The dead letters a successful response says it decided, and the messages it says it sent. */
function decidedBy(method: string, path: string, response: ApiResponse): { ids: string[]; sent: number } {
  if (method !== "POST" || response.status !== 200) return { ids: [], sent: 0 };
  const route = path.split("?")[0] ?? "";
  if (route === `${BASE}/replay`) {
    if (response.body.dry_run) return { ids: [], sent: 0 };
    const outcomes: Array<{ id: string; outcome: string }> = response.body.outcomes ?? [];
    const done = outcomes.filter((o) => o.outcome !== "failed");
    return {
      ids: done.map((o) => o.id.toLowerCase()),
      sent: done.filter((o) => o.outcome === "replayed").length,
    };
  }
  if (route.endsWith("/replay"))
    return {
      ids: [String(response.body.id).toLowerCase()],
      sent: response.body.status === "replayed" ? 1 : 0,
    };
  // A UUID is the same in either case; the table prints it in lower case.
  if (route.endsWith("/discard")) return { ids: [String(response.body.id).toLowerCase()], sent: 0 };
  return { ids: [], sent: 0 };
}

it(`${REQUESTS} generated API requests: only the 2xx and 4xx the contract names, no change from a rejection`, async () => {
  let n = 0;
  const started = Date.now();
  await fc.assert(
    fc.asyncProperty(requestSpec(), (spec) => exercise(spec, n++)),
    { numRuns: REQUESTS, seed: SEED, endOnFailure: true },
  );
  const durationMs = Date.now() - started;
  await reportFigures("api-fuzz", {
    seed: SEED,
    badInputsTried: requests,
    durationMs,
    statuses,
    categories,
    rejected,
    serverErrors: Object.entries(statuses)
      .filter(([s]) => Number(s) >= 500)
      .reduce((sum, [, k]) => sum + k, 0),
    stateChangesFromRejectedRequests: rejectedThatChangedState,
    deadLettersDecided: decidedByRequests,
    replaysSent,
  });
  expect(requests).toBe(REQUESTS);
  expect(rejectedThatChangedState).toBe(0);
  // The generators reach past authorization and validation: successes and every refusal occur.
  for (const status of ["200", "400", "401", "403", "404", "405", "409", "415"]) {
    expect(statuses[status] ?? 0, `responses with status ${status}`).toBeGreaterThan(0);
  }
  expect(decidedByRequests).toBeGreaterThan(0);
  expect(replaysSent).toBeGreaterThan(0);
}, 600_000);

// Found here: a discard naming the dead letter by its UUID in upper case discarded it, then
// answered 409, because the id as sent was compared with the lower-case ids PostgreSQL returned.
// The id schema now lower-cases ids (shared/dead-letters/api-schemas.ts).
it("a discard by an upper-case id answers 200 for the dead letter it discards", async () => {
  const [id] = await seedDeadLetters(bed.db, [
    { consumer: "fuzz-case", job_id: "afz-upper-case", queue: queueUrl },
  ]);
  const response = await standardApi("POST", `${BASE}/${String(id).toUpperCase()}/discard`, {
    token: bed.tokens.discard,
    body: { reason: "duplicate of another ticket" },
  });
  const { rows } = await watcher.query<{ status: string }>(
    "SELECT status FROM core.dead_letters WHERE id = $1",
    [id],
  );
  expect({ status: response.status, row: rows[0]?.status }).toEqual({ status: 200, row: "discarded" });
});
