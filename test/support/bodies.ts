/**
 * Message bodies of every kind a producer or an attacker could send to a consumer, as fast-check
 * arbitraries, one per class, for award-points (`{ user_id, points }`). The poison fuzzer
 * (test/reliability/poison-fuzz.test.ts) draws from {@link arbitraryBody}; a new class goes into
 * {@link BODY_CLASSES}.
 *
 * The classes cover what JavaScript accepts and PostgreSQL refuses (numbers outside `numeric`,
 * nesting deeper than the server parses, U+0000 and lone surrogates in keys and values), what
 * JavaScript and PostgreSQL disagree on (collation-sensitive spaces in ids), and what the library
 * once read as its own (look-alikes of the `{"raw": …}` wrapper it used to store).
 *
 * A case is built from a job id unique to the run (`build(id)`; of one length throughout, so that
 * an id with text after it stays unique), so that no two bodies share a job: every body's fate can
 * be read back on its own. Each class says what must become of its
 * bodies: `poison` (refused: exactly one pending poison dead letter), `job` (valid: applied once),
 * or `parser` (either, as the product's parser decides: the classes that mix both).
 */
import fc from "fast-check";

/** What must become of a body. */
export type BodyFate = "poison" | "job" | "parser";

/** A generated body: its class, what must become of it, and the body given a unique job id. */
export interface BodyCase {
  readonly category: string;
  readonly fate: BodyFate;
  readonly build: (uniqueId: string) => string;
}

/** A class of bodies and how often {@link arbitraryBody} draws it. */
export interface BodyClass {
  readonly category: string;
  readonly weight: number;
  readonly arbitrary: fc.Arbitrary<BodyCase>;
}

type Envelope = Record<string, unknown> & { payload?: unknown };

/** A valid envelope: every poison class breaks it in at least one way. */
export function validEnvelope(id: string): Envelope {
  return {
    job_id: id,
    tenant_id: "t-fuzz",
    correlation_id: `corr-${id}`,
    payload: { user_id: "u-fuzz", points: 5 },
  };
}

/** Sets a dotted path (`payload.points`) of an envelope. */
function setPath(envelope: Envelope, path: string, value: unknown): Envelope {
  const [head, tail] = path.split(".") as [string, string | undefined];
  if (tail === undefined) return { ...envelope, [head]: value };
  return { ...envelope, [head]: { ...(envelope[head] as object), [tail]: value } };
}

function deletePath(envelope: Envelope, path: string): Envelope {
  const [head, tail] = path.split(".") as [string, string | undefined];
  const copy = { ...envelope };
  if (tail === undefined) delete copy[head];
  else {
    const inner = { ...(copy[head] as Record<string, unknown>) };
    delete inner[tail];
    copy[head] = inner;
  }
  return copy;
}

/** A class whose bodies are all `fate`. */
function bodyClass(
  category: string,
  fate: BodyFate,
  weight: number,
  builds: fc.Arbitrary<(uniqueId: string) => string>,
): BodyClass {
  return { category, weight, arbitrary: builds.map((build): BodyCase => ({ category, fate, build })) };
}

// ---- Values -------------------------------------------------------------------------------------

const notAString = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.jsonValue({ maxDepth: 1 }), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 5 }), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 3 }),
);
/** Anything JSON can say that is not a positive 32-bit integer. */
const notPoints = fc.oneof(
  fc.integer({ max: 0 }),
  fc.integer({ min: 2_147_483_648, max: Number.MAX_SAFE_INTEGER }),
  fc.double({ noNaN: true, noDefaultInfinity: true }).filter((d) => !Number.isInteger(d)),
  fc.string({ maxLength: 12 }),
  fc.constantFrom("5", "1e3", true, null, [5], { n: 5 }),
);
const notAnObject = fc.oneof(
  fc.constant(null),
  fc.integer(),
  fc.string({ maxLength: 20 }),
  fc.array(fc.jsonValue({ maxDepth: 1 }), { maxLength: 4 }),
);

// ---- The classes --------------------------------------------------------------------------------

export const randomBytes = bodyClass(
  "random bytes",
  "poison",
  8,
  fc
    .tuple(
      fc.uint8Array({ maxLength: 400 }),
      fc.constantFrom("latin1", "utf8") as fc.Arbitrary<BufferEncoding>,
    )
    .map(([bytes, encoding]) => {
      const text = Buffer.from(bytes).toString(encoding);
      return () => text;
    }),
);

export const randomText = bodyClass(
  "random text",
  "poison",
  8,
  fc.string({ unit: "binary", maxLength: 300 }).map((text) => () => text),
);

export const jsonNotAnObject = bodyClass(
  "JSON that is not an object",
  "poison",
  5,
  fc
    .jsonValue({ maxDepth: 4 })
    .filter((v) => v === null || typeof v !== "object" || Array.isArray(v))
    .map((value) => () => JSON.stringify(value)),
);

/** Any JSON document at all (objects included, keyed at random): almost always not an envelope. */
export const anyJson = bodyClass(
  "any JSON",
  "parser",
  5,
  fc.jsonValue().map((value) => () => JSON.stringify(value) ?? ""),
);

export const wrongTypes = bodyClass(
  "wrong types",
  "poison",
  12,
  fc
    .oneof(
      fc.tuple(fc.constantFrom("job_id", "tenant_id", "correlation_id", "payload.user_id"), notAString),
      fc.tuple(fc.constant("payload.points"), notPoints),
      fc.tuple(fc.constant("payload"), notAnObject),
    )
    .map(
      ([path, value]) =>
        (id: string) =>
          JSON.stringify(setPath(validEnvelope(id), path, value)),
    ),
);

export const missingFields = bodyClass(
  "missing fields",
  "poison",
  8,
  fc
    .subarray(["job_id", "tenant_id", "payload", "payload.user_id", "payload.points"], { minLength: 1 })
    .map(
      (paths) => (id: string) => JSON.stringify(paths.reduce((e, p) => deletePath(e, p), validEnvelope(id))),
    ),
);

/**
 * Envelope-like documents whose every field may be there or not, of its type or another (a job_id
 * of any text, a number or null; a payload of the right shape with points of any kind, or anything):
 * mostly poison, sometimes a job. A job_id that is text is made unique by the run's id in front.
 */
export const envelopeLike = bodyClass(
  "envelope-like, fields of any type",
  "parser",
  8,
  fc
    .record(
      {
        job_id: fc.oneof(fc.string({ maxLength: 300, unit: "grapheme" }), fc.integer(), fc.constant(null)),
        tenant_id: fc.oneof(fc.string({ maxLength: 20 }), fc.integer()),
        correlation_id: fc.oneof(fc.string({ maxLength: 40 }), fc.constant(null)),
        payload: fc.oneof(
          fc.record({
            user_id: fc.string({ maxLength: 130 }),
            points: fc.oneof(fc.integer(), fc.double(), fc.string()),
          }),
          fc.jsonValue(),
          fc.constant(undefined),
        ),
      },
      { requiredKeys: [] },
    )
    .map(
      (envelope) => (id: string) =>
        JSON.stringify(
          typeof envelope.job_id === "string" ? { ...envelope, job_id: `${id}${envelope.job_id}` } : envelope,
        ),
    ),
);

export const huge = bodyClass(
  "huge",
  "poison",
  1,
  fc
    .tuple(fc.integer({ min: 50_000, max: 250_000 }), fc.constantFrom("user_id", "points", "text", "job_id"))
    .map(([size, where]) => (id: string) => {
      if (where === "text") return `not json ${"A".repeat(size)}`;
      // The job_id only: over-long correlation and tenant ids have a test of their own.
      if (where === "job_id") return JSON.stringify({ ...validEnvelope(id), job_id: "j".repeat(size) });
      const value = where === "user_id" ? "x".repeat(size) : Array.from({ length: size / 10 }, () => 1);
      return JSON.stringify(setPath(validEnvelope(id), `payload.${where}`, value));
    }),
);

export const deep = bodyClass(
  "deeply nested",
  "poison",
  6,
  fc
    .tuple(fc.integer({ min: 20, max: 10_000 }), fc.constantFrom("array", "object", "payload", "user_id"))
    .map(([depth, where]) => (id: string) => {
      const arrays = `${"[".repeat(depth)}${"]".repeat(depth)}`;
      const objects = `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`;
      if (where === "array") return arrays;
      if (where === "object") return objects;
      const head = `{"job_id":${JSON.stringify(id)},"tenant_id":"t-fuzz","payload":`;
      if (where === "payload") return `${head}${objects}}`;
      return `${head}{"user_id":${arrays},"points":1}}`;
    }),
);

/** U+0000 and lone surrogates, as the text itself or as JSON escapes, where text cannot hold them. */
export const unstorable = bodyClass(
  "U+0000 and lone surrogates",
  "poison",
  12,
  fc
    .tuple(
      fc.constantFrom("\u0000", "\ud800", "\udfff"),
      fc.constantFrom("job_id", "tenant_id", "correlation_id", "payload.user_id", "raw", "raw-in-string"),
      fc.string({ maxLength: 8 }),
    )
    .map(([bad, where, around]) => (id: string) => {
      if (where === "raw") return `${around}${bad}${around}`;
      // An unescaped control character inside a JSON string: not JSON at all.
      if (where === "raw-in-string") return `{"job_id":"${id}${bad}","tenant_id":"t","payload":{}}`;
      const value = `${around}${bad}${around}`;
      return JSON.stringify(setPath(validEnvelope(id), where, where === "job_id" ? `${id}${value}` : value));
    }),
);

/**
 * Any text, spliced unescaped into a job_id: JSON broken by a quote, a backslash or a control
 * character, or a job_id of odd text; the payload is empty, so never a job.
 */
export const spliceInJobId = bodyClass(
  "text spliced into a job_id",
  "poison",
  5,
  fc
    .string({ unit: "binary", maxLength: 50 })
    .map((s) => (id: string) => `{"job_id":"${id}${s}","tenant_id":"t","payload":{}}`),
);

export const invalidPayload = bodyClass(
  "valid-looking envelope, invalid payload",
  "poison",
  20,
  fc
    .oneof(
      notPoints.map((points) => ({ user_id: "u-fuzz", points })),
      fc
        .oneof(
          fc.constant(""),
          fc.integer({ min: 129, max: 400 }).map((n) => "u".repeat(n)),
          fc.string({ maxLength: 5 }).map((s) => `${s}\u0000`),
        )
        .map((user_id) => ({ user_id, points: 5 })),
      notAnObject,
      fc.constant({}),
    )
    .map((payload) => (id: string) => JSON.stringify({ ...validEnvelope(id), payload })),
);

export const nearJson = bodyClass(
  "near-JSON",
  "poison",
  12,
  fc
    .tuple(
      fc.constantFrom(
        "truncated",
        "trailing comma",
        "single quotes",
        "BOM",
        "garbage after",
        "leading zero",
        "NaN",
        "duplicate key",
      ),
      fc.nat(),
    )
    .map(([how, n]) => (id: string) => {
      const text = JSON.stringify(validEnvelope(id));
      switch (how) {
        case "truncated":
          return text.slice(0, n % (text.length - 1));
        case "trailing comma":
          return `${text.slice(0, -1)},}`;
        case "single quotes":
          return text.replaceAll('"', "'");
        case "BOM":
          return `\ufeff${text}`;
        case "garbage after":
          return `${text}x`;
        case "leading zero":
          return text.replace('"points":5', '"points":05');
        case "NaN":
          return text.replace('"points":5', '"points":NaN');
        default:
          // Valid JSON; the last of duplicate keys wins, and it is not a valid number of points.
          return text.replace('"points":5', '"points":5,"points":-5');
      }
    }),
);

export const badIdentity = bodyClass(
  "unusable job_id",
  "poison",
  8,
  fc
    .oneof(
      fc.constantFrom("", " ", "\t\n ", "\u00a0"),
      fc.integer({ min: 256, max: 400 }).map((n) => "j".repeat(n)),
      fc.integer({ min: 256, max: 300 }).map((n) => "😀".repeat(n)),
    )
    .map((jobId) => () => JSON.stringify(validEnvelope(jobId))),
);

/**
 * Jobs the consumer must apply: any printable job_id after the run's id (up to the 255 characters
 * the envelope allows), tenant and user ids (a blank one is allowed), points from 1 to 1000.
 */
export const validJob = bodyClass(
  "valid job",
  "job",
  10,
  fc
    .record({
      job_id: fc.string({ maxLength: 255 }),
      tenant_id: fc.string({ maxLength: 20 }),
      payload: fc.record({
        user_id: fc.string({ minLength: 1, maxLength: 20 }),
        points: fc.integer({ min: 1, max: 1000 }),
      }),
    })
    .map(
      (envelope) => (id: string) =>
        JSON.stringify({ ...envelope, job_id: `${id}${envelope.job_id}`.slice(0, 255) }),
    ),
);

const head = (id: string, fields = "") =>
  `{"job_id":${JSON.stringify(id)},"tenant_id":"t-fuzz","correlation_id":${JSON.stringify(`c-${id}`)}${fields}`;

/** Numbers JSON.parse reads (as ±Infinity, 0 or -0) and jsonb refuses (outside `numeric`'s range). */
const outOfRange = fc.constantFrom(
  "1e200000",
  "1e-20000",
  "-1e999999",
  "9".repeat(140_000),
  "1e400",
  "-1e-400",
);

export const outOfRangeNumbers = bodyClass(
  "numbers outside numeric's range",
  "poison",
  6,
  fc
    .tuple(outOfRange, fc.constantFrom("points", "envelope", "payload", "nested"))
    .map(([n, where]) => (id: string) => {
      if (where === "points") return `${head(id)},"payload":{"user_id":"u","points":${n}}}`;
      if (where === "envelope") return `${head(id)},"payload":{"user_id":"u","points":-1},"extra":${n}}`;
      if (where === "payload") return `${head(id)},"payload":{"user_id":"u","points":"five","n":${n}}}`;
      return `${head(id)},"payload":{"user_id":"u","points":0,"deep":[{"a":[${n}]}]}}`;
    }),
);

/** Nesting deeper than the server's parser goes (its stack: about 10,000 levels at 2 MB). */
const serverDepth = fc.integer({ min: 12_000, max: 60_000 });

export const deeperThanServer = bodyClass(
  "nesting deeper than the server parses",
  "poison",
  3,
  fc.tuple(serverDepth, fc.constantFrom("[", '{"a":')).map(([depth, open]) => (id: string) => {
    const close = open === "[" ? "]" : "}";
    const value = `${open.repeat(depth)}${open === "[" ? "" : "1"}${close.repeat(depth)}`;
    return `${head(id)},"payload":{"user_id":"u","points":-1,"x":${value}}}`;
  }),
);

/** A valid job whose payload carries deep nesting in a field the schema drops: it applies, fingerprinted whole. */
export const deepButValid = bodyClass(
  "a valid job nested deeper than the server parses",
  "job",
  2,
  serverDepth.map((depth) => (id: string) => {
    return `${head(id)},"payload":{"user_id":"u","points":3,"x":${"[".repeat(depth)}${"]".repeat(depth)}}}`;
  }),
);

/** Lone surrogates and U+0000 in object keys, as escapes or as the text itself. */
const badKey = fc.constantFrom("\\ud800k", "k\\udfff", "\\u0000", "\ud800", "k\udc00");

export const surrogateKeys = bodyClass(
  "lone surrogates and U+0000 in keys",
  "poison",
  4,
  fc
    .tuple(badKey, fc.constantFrom("payload", "envelope"))
    .map(([key, where]) =>
      where === "payload"
        ? (id: string) => `${head(id)},"payload":{"user_id":"u","points":-1,"${key}":1}}`
        : (id: string) => `${head(id)},"${key}":1,"payload":{"user_id":"u","points":"x"}}`,
    ),
);

export const surrogateKeysInValidJob = bodyClass(
  "a valid job with lone surrogates in keys the schema drops",
  "job",
  2,
  badKey
    .filter((key) => !key.includes("u0000"))
    .map((key) => (id: string) => `${head(id)},"payload":{"user_id":"u","points":2,"${key}":1}}`),
);

/**
 * Characters PostgreSQL's [:space:] takes for blank under ICU (U+0085, U+001C–U+001F, U+00A0…)
 * and JavaScript's \s does not, or does: in the job, tenant and correlation ids of a valid job
 * (applied) and of one whose payload is refused (dead-lettered under those ids).
 */
const oddSpace = fc.constantFrom("\u0085", "\u001c", "\u001f", "\u00a0", "\u2028", "\u3000", "\ufeff");

const collationIds = (points: number) =>
  fc
    .tuple(oddSpace, fc.constantFrom("job_id", "tenant_id", "correlation_id", "all"))
    .map(([space, where]) => (id: string) => {
      const envelope = validEnvelope(id);
      const job = where === "job_id" || where === "all" ? `${id}${space}` : id;
      return JSON.stringify({
        ...envelope,
        job_id: job,
        ...(where === "tenant_id" || where === "all" ? { tenant_id: space } : {}),
        ...(where === "correlation_id" || where === "all" ? { correlation_id: space } : {}),
        payload: { user_id: "u", points },
      });
    });

export const collationSpacesInJob = bodyClass(
  "collation-sensitive spaces in a job's ids",
  "job",
  3,
  collationIds(4),
);

export const collationSpacesInPoison = bodyClass(
  "collation-sensitive spaces in a refused message's ids",
  "poison",
  3,
  collationIds(-4),
);

/** Bodies shaped like the `{"raw": …}` wrapper the library once stored: kept and replayed as they are. */
export const wrapperLookalikes = bodyClass(
  "look-alikes of the old raw wrapper",
  "poison",
  4,
  fc
    .tuple(fc.string({ maxLength: 30 }), fc.constantFrom("alone", "nul", "surrogates", "with-job"))
    .map(([text, how]) => (id: string) => {
      if (how === "alone") return JSON.stringify({ raw: `${id}${text}` });
      if (how === "nul") return JSON.stringify({ raw: `${id}${text}\\u0000`, nul: "escaped" });
      if (how === "surrogates") return JSON.stringify({ raw: `${id}${text}`, surrogates: "replaced" });
      return JSON.stringify({ job_id: id, raw: text, nul: "escaped" });
    }),
);

/** Every class the library handles, each drawn by its weight. */
export const BODY_CLASSES: readonly BodyClass[] = [
  randomBytes,
  randomText,
  jsonNotAnObject,
  anyJson,
  wrongTypes,
  missingFields,
  envelopeLike,
  huge,
  deep,
  unstorable,
  spliceInJobId,
  invalidPayload,
  nearJson,
  badIdentity,
  validJob,
  outOfRangeNumbers,
  deeperThanServer,
  deepButValid,
  surrogateKeys,
  surrogateKeysInValidJob,
  collationSpacesInJob,
  collationSpacesInPoison,
  wrapperLookalikes,
];

/** Any body of a class the library handles. */
export const arbitraryBody: fc.Arbitrary<BodyCase> = fc.oneof(
  ...BODY_CLASSES.map((c) => ({ weight: c.weight, arbitrary: c.arbitrary })),
);
