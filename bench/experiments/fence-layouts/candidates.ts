/**
 * The candidate layouts bench/experiments/fence-layouts.ts measures beside the shipped table, each
 * with its DDL, its fill from the seeded table, its fence insert and lookup, and what it costs
 * besides the figures. `current`, `current-reindexed` and `no-fingerprint` are the shipped layout;
 * the others vary the layout before migration 0016, the consumer's name as text
 * (bench/experiments/fence-layouts/scratch.ts).
 */
import { type FenceInsert, shippedInsert } from "../../fence-storage/checks.ts";
import { CONSUMER, TTL } from "../../fence-storage/seed.ts";
import {
  fillAll,
  fillShipped,
  idLookup,
  JOB_ID_CHECK,
  likeCore,
  SCRATCH,
  SOURCE,
  TEXT_LAYOUT,
  textLookup,
} from "./scratch.ts";

export interface Candidate {
  readonly name: string;
  readonly summary: string;
  /** DDL creating `table` with its indexes (before the fill). */
  readonly create: (table: string) => string[];
  /** INSERT … SELECT filling `table` from core.processed_jobs in insertion order. */
  readonly fill: (table: string) => string;
  /** DDL after the fill (REINDEX). */
  readonly after?: (table: string) => string[];
  readonly insert: FenceInsert;
  /** What the layout costs in function, besides what is measured. */
  readonly costs: string;
}

/** The fence insert of the layout before 0016: the consumer's name. */
const textConsumerInsert: FenceInsert = {
  sql: (t) => `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
    VALUES ($1, '${CONSUMER}', $2, now(), date_trunc('minute', now()) + interval '${TTL}' + interval '1 minute')
    ON CONFLICT (job_id, consumer) DO NOTHING RETURNING 1`,
  lookup: textLookup,
};

export const CANDIDATES: readonly Candidate[] = [
  {
    name: "current",
    summary: "shipped layout rebuilt with new random job ids: a second sample of b-tree split positions",
    create: (t) => [`CREATE TABLE ${t} (LIKE core.processed_jobs INCLUDING ALL)`],
    fill: (t) =>
      `INSERT INTO ${t} (processed_at, expires_at, consumer_id, fingerprint, job_id, tenant_id)
       SELECT processed_at, expires_at, consumer_id, fingerprint, gen_random_uuid()::text, tenant_id
         FROM core.processed_jobs ORDER BY expires_at`,
    insert: shippedInsert,
    costs: "none (as shipped)",
  },
  {
    name: "no-fingerprint",
    summary:
      "the shipped layout without the fingerprint (what the fingerprint costs); the candidates below are measured without one too, and each would carry the same cost",
    create: (t) => [
      `CREATE TABLE ${t} (LIKE core.processed_jobs INCLUDING ALL)`,
      `ALTER TABLE ${t} DROP COLUMN fingerprint`,
    ],
    fill: (t) =>
      `INSERT INTO ${t} (processed_at, expires_at, consumer_id, job_id, tenant_id)
       SELECT processed_at, expires_at, consumer_id, job_id, tenant_id FROM core.processed_jobs ORDER BY expires_at`,
    insert: shippedInsert,
    costs: "no conflict detection: a second job under an applied job's id is a silent duplicate",
  },
  {
    name: "current-reindexed",
    summary: "shipped layout, REINDEXed after the fill (b-trees at fillfactor 90)",
    create: (t) => [`CREATE TABLE ${t} (LIKE core.processed_jobs INCLUDING ALL)`],
    fill: fillShipped,
    after: (t) => [`REINDEX TABLE ${t}`],
    insert: shippedInsert,
    costs:
      "a periodic REINDEX CONCURRENTLY; the gain is transient: random job ids split the packed PK pages again",
  },
  {
    name: "ff100",
    summary: "b-trees WITH (fillfactor = 100), grown by inserts",
    create: (t) => [
      likeCore(t),
      `ALTER TABLE ${t} ADD PRIMARY KEY (job_id, consumer) WITH (fillfactor = 100)`,
      `CREATE INDEX ON ${t} (expires_at) WITH (fillfactor = 100)`,
    ],
    fill: fillAll,
    insert: textConsumerInsert,
    costs:
      "none in function; fillfactor only changes rightmost (ascending) splits and rebuilds, so only the expires_at index shrinks",
  },
  {
    name: "ff100-reindexed",
    summary: "b-trees WITH (fillfactor = 100), REINDEXed after the fill",
    create: (t) => [
      likeCore(t),
      `ALTER TABLE ${t} ADD PRIMARY KEY (job_id, consumer) WITH (fillfactor = 100)`,
      `CREATE INDEX ON ${t} (expires_at) WITH (fillfactor = 100)`,
    ],
    fill: fillAll,
    after: (t) => [`REINDEX TABLE ${t}`],
    insert: textConsumerInsert,
    costs:
      "the floor of the shipped columns; the first insert into a full leaf splits it, so it does not last",
  },
  {
    name: "brin",
    summary: "BRIN (expires_at) instead of the btree",
    create: (t) => [
      likeCore(t),
      `ALTER TABLE ${t} ADD PRIMARY KEY (job_id, consumer)`,
      `CREATE INDEX ON ${t} USING brin (expires_at)`,
    ],
    fill: fillAll,
    insert: textConsumerInsert,
    costs:
      "BRIN has no order: cleanup's ORDER BY expires_at LIMIT n becomes a scan of every expired row plus a top-N sort per batch " +
      "(quadratic in the backlog); ranges only widen, so once cleanup frees pages and new fences reuse them, every range " +
      "covers old expiries and the index stops excluding anything; new ranges need brin_summarize_new_values (autosummarize off by default)",
  },
  {
    name: "no-processed-at",
    summary: "processed_at dropped (expires_at kept)",
    create: (t) => [
      `CREATE TABLE ${t} (job_id text NOT NULL, consumer text NOT NULL, tenant_id text NOT NULL,
        expires_at timestamptz NOT NULL, PRIMARY KEY (job_id, consumer), ${JOB_ID_CHECK})`,
      `CREATE INDEX ON ${t} (expires_at)`,
    ],
    fill: (t) =>
      `INSERT INTO ${t} (job_id, consumer, tenant_id, expires_at)
       SELECT job_id, consumer, tenant_id, expires_at FROM ${SOURCE} ORDER BY expires_at`,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer, tenant_id, expires_at)
        VALUES ($1, '${CONSUMER}', $2, now() + interval '${TTL}')
        ON CONFLICT (job_id, consumer) DO NOTHING RETURNING 1`,
      lookup: textLookup,
    },
    costs:
      "loses when the job committed (not derivable: the TTL is per consumer and configurable) and the CHECK expires_at > processed_at; " +
      "a migration plus insert changes (shared/db/queries/begin-with-fences.ts)",
  },
  {
    name: "consumer-smallint",
    summary: "consumer as smallint id (FK to a consumers table)",
    create: (t) => [
      `CREATE TABLE ${t} (job_id text NOT NULL, consumer_id smallint NOT NULL REFERENCES ${SCRATCH}.consumers (id),
        tenant_id text NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz NOT NULL,
        PRIMARY KEY (job_id, consumer_id), ${JOB_ID_CHECK}, CHECK (expires_at > processed_at))`,
      `CREATE INDEX ON ${t} (expires_at)`,
    ],
    fill: (t) =>
      `INSERT INTO ${t} (job_id, consumer_id, tenant_id, processed_at, expires_at)
       SELECT p.job_id, c.id, p.tenant_id, p.processed_at, p.expires_at
         FROM ${SOURCE} p JOIN ${SCRATCH}.consumers c ON c.name = p.consumer ORDER BY p.expires_at`,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer_id, tenant_id, processed_at, expires_at)
        VALUES ($1, (SELECT id FROM ${SCRATCH}.consumers WHERE name = '${CONSUMER}'), $2, now(), now() + interval '${TTL}')
        ON CONFLICT (job_id, consumer_id) DO NOTHING RETURNING 1`,
      lookup: idLookup,
    },
    costs:
      "a consumers table (a row per consumer, registered by its migration set) and a lookup in the insert; replay and ops " +
      "queries join it; an FK check per insert",
  },
  {
    name: "consumer-enum",
    summary: "consumer as an enum (4 bytes)",
    create: (t) => [
      `CREATE TABLE ${t} (job_id text NOT NULL, consumer ${SCRATCH}.consumer_name NOT NULL,
        tenant_id text NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz NOT NULL,
        PRIMARY KEY (job_id, consumer), ${JOB_ID_CHECK}, CHECK (expires_at > processed_at))`,
      `CREATE INDEX ON ${t} (expires_at)`,
    ],
    fill: (t) =>
      `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
       SELECT job_id, consumer::${SCRATCH}.consumer_name, tenant_id, processed_at, expires_at
         FROM ${SOURCE} ORDER BY expires_at`,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
        VALUES ($1, '${CONSUMER}', $2, now(), date_trunc('minute', now()) + interval '${TTL}' + interval '1 minute')
        ON CONFLICT (job_id, consumer) DO NOTHING RETURNING 1`,
      lookup: textLookup,
    },
    costs:
      "every new consumer is DDL in core (ALTER TYPE … ADD VALUE) run by the migrator; a value can never be removed",
  },
  {
    name: "hash-exclusion",
    summary: "EXCLUDE USING hash ((job_id || '/' || consumer) WITH =) instead of the btree PK",
    create: (t) => [
      `${likeCore(t)}`,
      `ALTER TABLE ${t} ADD EXCLUDE USING hash ((job_id || '/' || consumer) WITH =)`,
      `CREATE INDEX ON ${t} (expires_at)`,
    ],
    fill: fillAll,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
        VALUES ($1, '${CONSUMER}', $2, now(), date_trunc('minute', now()) + interval '${TTL}' + interval '1 minute')
        ON CONFLICT DO NOTHING RETURNING 1`,
      lookup: textLookup,
    },
    costs:
      "a hash index cannot be UNIQUE (no PK); uniqueness only through an exclusion constraint, which ON CONFLICT (job_id, consumer) " +
      "cannot infer: the insert must become a bare ON CONFLICT DO NOTHING (every constraint an arbiter); single-column " +
      "only, hence the concatenated key (unambiguous because consumer names are [a-z0-9-]); lookups by " +
      "job_id and consumer (the replay path, replay-queries.ts) cannot use it and scan the table unless rewritten to " +
      "the key expression; a hash index's size steps with its bucket splits",
  },
  {
    name: "expires-minute",
    summary: "expires_at rounded up to the minute: the btree deduplicates equal keys",
    create: (t) => [`CREATE TABLE ${t} (LIKE ${TEXT_LAYOUT} INCLUDING ALL)`],
    fill: (t) =>
      `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
       SELECT job_id, consumer, tenant_id, processed_at, date_trunc('minute', expires_at) + interval '1 minute'
         FROM ${SOURCE} ORDER BY expires_at`,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
        VALUES ($1, '${CONSUMER}', $2, now(), date_trunc('minute', now() + interval '${TTL}') + interval '1 minute')
        ON CONFLICT (job_id, consumer) DO NOTHING RETURNING 1`,
      lookup: textLookup,
    },
    costs:
      "fences live up to a minute longer (harmless: expiry only moves later); the gain depends on the rate " +
      "(fences per minute share a key); the insert SQL changes",
  },
  {
    name: "smallint+minute",
    summary: "consumer smallint id + expires_at rounded up to the minute",
    create: (t) => [
      `CREATE TABLE ${t} (job_id text NOT NULL, consumer_id smallint NOT NULL REFERENCES ${SCRATCH}.consumers (id),
        tenant_id text NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz NOT NULL,
        PRIMARY KEY (job_id, consumer_id), ${JOB_ID_CHECK}, CHECK (expires_at > processed_at))`,
      `CREATE INDEX ON ${t} (expires_at)`,
    ],
    fill: (t) =>
      `INSERT INTO ${t} (job_id, consumer_id, tenant_id, processed_at, expires_at)
       SELECT p.job_id, c.id, p.tenant_id, p.processed_at, date_trunc('minute', p.expires_at) + interval '1 minute'
         FROM ${SOURCE} p JOIN ${SCRATCH}.consumers c ON c.name = p.consumer ORDER BY p.expires_at`,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer_id, tenant_id, processed_at, expires_at)
        VALUES ($1, (SELECT id FROM ${SCRATCH}.consumers WHERE name = '${CONSUMER}'), $2, now(),
                date_trunc('minute', now() + interval '${TTL}') + interval '1 minute')
        ON CONFLICT (job_id, consumer_id) DO NOTHING RETURNING 1`,
      lookup: idLookup,
    },
    costs: "both of consumer-smallint's and expires-minute's",
  },
  {
    name: "smallint+no-processed-at",
    summary: "consumer smallint id + processed_at dropped",
    create: (t) => [
      `CREATE TABLE ${t} (job_id text NOT NULL, consumer_id smallint NOT NULL REFERENCES ${SCRATCH}.consumers (id),
        tenant_id text NOT NULL, expires_at timestamptz NOT NULL, PRIMARY KEY (job_id, consumer_id), ${JOB_ID_CHECK})`,
      `CREATE INDEX ON ${t} (expires_at)`,
    ],
    fill: (t) =>
      `INSERT INTO ${t} (job_id, consumer_id, tenant_id, expires_at)
       SELECT p.job_id, c.id, p.tenant_id, p.expires_at
         FROM ${SOURCE} p JOIN ${SCRATCH}.consumers c ON c.name = p.consumer ORDER BY p.expires_at`,
    insert: {
      sql: (t) => `INSERT INTO ${t} (job_id, consumer_id, tenant_id, expires_at)
        VALUES ($1, (SELECT id FROM ${SCRATCH}.consumers WHERE name = '${CONSUMER}'), $2, now() + interval '${TTL}')
        ON CONFLICT (job_id, consumer_id) DO NOTHING RETURNING 1`,
      lookup: idLookup,
    },
    costs: "both of consumer-smallint's and no-processed-at's",
  },
];
