/**
 * The seed's SQL, set-based: each statement makes or changes one chunk of rows in the database
 * (INSERT … SELECT FROM generate_series; the failure picked by an array lookup into a table of
 * template indices), so a million rows take minutes, not a round trip each. bench/api/seed.ts runs
 * them chunk by chunk.
 */
import { at } from "../lib/support.ts";
import { FAILURES, templateIndex } from "./failures.ts";
import { CONSUMERS, ERROR_KINDS, type FailureTemplate, INCIDENTS } from "./world.ts";

/** Slots per (consumer, kind) in the pick table. */
const PICK_SLOTS = 1000;

/**
 * The pick table: for each consumer and kind, PICK_SLOTS 1-based template indices in proportion to
 * the weights of the templates that consumer fails with, so SQL picks one with an array lookup.
 */
function pickTable(): number[] {
  const table: number[] = [];
  for (let c = 0; c < CONSUMERS.length; c++) {
    for (const kind of ERROR_KINDS) {
      const eligible = FAILURES.flatMap((t, index) =>
        t.kind === kind && t.weight > 0 && t.consumers.includes(c) ? [{ t, index }] : [],
      );
      if (eligible.length === 0) throw new Error(`no ${kind} failure for ${at(CONSUMERS, c)}`);
      const total = eligible.reduce((sum, e) => sum + e.t.weight, 0);
      let cumulative = 0;
      let filled = 0;
      for (const { t, index } of eligible) {
        cumulative += t.weight;
        const upto = Math.round((cumulative / total) * PICK_SLOTS);
        for (; filled < upto; filled++) table.push(index + 1);
      }
    }
  }
  return table;
}

/** A stack as V8 prints it, as format() text: %1$s the message, %2$s and %3$s column numbers. */
function stackFormat(t: FailureTemplate): string | null {
  if (t.frames === null) return null;
  const literal = (text: string) => text.replaceAll("%", "%%");
  const lines = [
    `${literal(t.class)}: %1$s`,
    ...t.frames.map((frame) => `    ${literal(frame)}`),
    ...(t.own === null ? [] : [`    at ${literal(t.own)} (/var/task/index.mjs:1:%2$s)`]),
    "    at runJob (/var/task/shared/consumer/harness.mjs:1:%3$s)",
    "    at process.processTicksAndRejections (node:internal/process/task_queues:105:5)",
  ];
  return lines.join("\n");
}

/** `CASE …`: which incident (1-based) row fraction f falls in, 0 for none. */
const INCIDENT_OF = `CASE ${INCIDENTS.map(
  (inc, n) => `WHEN f >= ${inc.from} AND f < ${inc.to} AND x < ${inc.share} THEN ${n + 1}`,
).join(" ")} ELSE 0 END`;
const incidentArray = (values: readonly number[]) => `(ARRAY[${values.join(", ")}]::int[])`;
const INCIDENT_TEMPLATE = incidentArray(INCIDENTS.map((inc) => templateIndex(inc.key) + 1));
const INCIDENT_CONSUMER = incidentArray(
  INCIDENTS.map((inc) => at(at(FAILURES, templateIndex(inc.key)).consumers, 0)),
);
const INCIDENT_KIND = incidentArray(
  INCIDENTS.map((inc) => ERROR_KINDS.indexOf(at(FAILURES, templateIndex(inc.key)).kind)),
);

/**
 * One chunk of dead letters, all pending_review (the insert guard refuses anything else).
 * Consumers skewed (the first ~31 %, the last ~7 %), tenants skewed (~14 % … ~1 %, some poison
 * without a tenant), error kinds exhausted 55 % / hard 25 % / poison 15 % / unrecorded 5 %, the
 * failure picked by the consumer's weights (or the incident's, in its window), ~4 dead letters per
 * correlation id, created_at rising with i over 30 days (as an append-only table fills),
 * microseconds apart from any neighbour. Six deployments over the month: the stack's column
 * numbers change with each (the fingerprint drops them).
 *
 * $1, $2 the range of i; $3 consumers; $4 their queues; $5 t0; $6 seconds per row; $7 rows in all;
 * $8 classes, $9 messages, $10 stacks (per template); $11 the pick table; $12 the kinds.
 */
export const INSERT_CHUNK = `
WITH src AS MATERIALIZED (
  SELECT i,
         least(7, floor(power(random(), 1.8) * 8))::int  AS c0,
         least(49, floor(power(random(), 2.0) * 50))::int AS t,
         random() AS k, random() AS n, random() AS j, random() AS e, random() AS x,
         i::float8 / $7::float8 AS f
    FROM generate_series($1::bigint, $2::bigint) AS i
), placed AS (
  SELECT src.*, ${INCIDENT_OF} AS incident FROM src
), picked AS (
  SELECT i, t, n, j, e, f, incident,
         CASE incident WHEN 0 THEN c0 ELSE ${INCIDENT_CONSUMER}[incident] END AS c,
         CASE incident WHEN 0 THEN (CASE WHEN k < 0.55 THEN 0 WHEN k < 0.80 THEN 1 WHEN k < 0.95 THEN 2 ELSE 3 END)
                       ELSE ${INCIDENT_KIND}[incident] END AS kind
    FROM placed
), shaped AS (
  SELECT i, c, n, j, f,
         CASE incident WHEN 0 THEN ($11::int[])[(c * 4 + kind) * ${PICK_SLOTS} + floor(e * ${PICK_SLOTS})::int + 1]
                       ELSE ${INCIDENT_TEMPLATE}[incident] END AS tpl,
         'job-' || md5('job' || i)          AS job_id,
         'corr-' || md5('corr' || (i / 4))  AS correlation_id,
         ($12::text[])[kind + 1]            AS error_kind,
         'tenant-' || lpad(t::text, 3, '0') AS tenant,
         ($4::text[])[c + 1]                AS queue
    FROM picked
)
INSERT INTO core.dead_letters
  (job_id, consumer, queue, tenant_id, payload, body_form, body, message_attributes, attempts, error_kind,
   last_error, correlation_id, created_at)
SELECT job_id,
       ($3::text[])[c + 1],
       queue,
       CASE WHEN error_kind = 'poison' AND n < 0.3 THEN NULL ELSE tenant END,
       p.envelope,
       'text',
       p.envelope::text,
       CASE WHEN queue LIKE '%.fifo'
            THEN jsonb_build_object('message_attributes', '{}'::jsonb, 'message_group_id', tenant)
            ELSE jsonb_build_object('message_attributes', jsonb_build_object(
                   'source', jsonb_build_object('dataType', 'String', 'stringValue', 'checkout')))
       END,
       CASE error_kind WHEN 'exhausted' THEN 5 WHEN 'hard' THEN 1 + (i % 3)::int WHEN 'poison' THEN 1 ELSE 8 END,
       error_kind,
       jsonb_build_object('class', ($8::text[])[tpl], 'message', m.message)
         || CASE WHEN ($10::text[])[tpl] IS NULL THEN '{}'::jsonb
                 ELSE jsonb_build_object('stack', format(($10::text[])[tpl], m.message,
                        (40000 + floor(f * 6)::int * 1187)::text, (900 + floor(f * 6)::int * 13)::text))
            END,
       correlation_id,
       $5::timestamptz + make_interval(secs => (i + j) * $6::float8)
  FROM shaped,
       LATERAL (SELECT format(($9::text[])[tpl], ((i * 7919) % 100000)::text, md5('uuid' || i)::uuid::text,
                              (3 + i % 997)::text) AS message) AS m,
       LATERAL (SELECT jsonb_build_object(
         'job_id', job_id, 'tenant_id', tenant, 'correlation_id', correlation_id,
         'payload', jsonb_build_object(
           'account_id', 'acct-' || (i % 50000), 'amount', (i % 997) + 1, 'currency', 'EUR',
           'reference', 'order-' || (i * 7919 % 10000000),
           'lines', jsonb_build_array(jsonb_build_object('sku', 'SKU-' || (i % 3000), 'qty', 1 + i % 4))))
         AS envelope) AS p`;

/** The INSERT_CHUNK parameters after the range and t0/step: the failure templates. */
export const FAILURE_PARAMS = [
  FAILURES.map((t) => t.class),
  FAILURES.map((t) => t.message),
  FAILURES.map(stackFormat),
  pickTable(),
  ERROR_KINDS,
];

/** The created_at range of a chunk: [t0 + lo·step, t0 + hi·step), hi NULL meaning unbounded. */
const CHUNK_RANGE = `
  created_at >= $1::timestamptz + make_interval(secs => $2::float8 * $4::float8)
  AND created_at < coalesce($1::timestamptz + make_interval(secs => $3::float8 * $4::float8), 'infinity')`;

/** The share of a chunk's rows resolved: ~66 % of rows older than three days, ~6 % of newer ones. */
const RESOLVED_SHARE = "CASE WHEN created_at < now() - interval '3 days' THEN 0.66 ELSE 0.06 END";

/**
 * A superseded dead letter's job has a fence (it succeeded by another path), and the database
 * allows `superseded` only then: the fences of 17 % of the rows to be resolved are written first.
 * A fence names its consumer by its id in the registry (migration 0016), where the seed registered
 * every consumer.
 */
export const FENCE_CHUNK = `
INSERT INTO core.processed_jobs (job_id, consumer_id, tenant_id, processed_at, expires_at)
SELECT d.job_id, c.id, coalesce(d.tenant_id, 'unknown'), d.created_at + interval '5 minutes',
       now() + interval '30 days'
  FROM (SELECT job_id, consumer, tenant_id, created_at FROM core.dead_letters
         WHERE ${CHUNK_RANGE} AND random() < ${RESOLVED_SHARE} * 0.17) AS d
  JOIN core.consumer_roles AS c ON c.consumer = d.consumer
ON CONFLICT DO NOTHING`;

/**
 * Resolves part of a chunk, the one transition the update guard allows (≈ 60 % overall): the rows
 * whose job has a fence as superseded (17 %), and of the others, picked at the same share, 70 %
 * replayed and 30 % discarded with a reason (58 % and 25 % of all resolutions); resolved minutes to
 * three days after creation, by one of four actors.
 */
export const RESOLVE_CHUNK = `
WITH picked AS MATERIALIZED (
  SELECT id, q, delay, a, fenced FROM (
    SELECT d.id, d.created_at, random() AS r, random() AS q, random() AS delay, random() AS a,
           EXISTS (SELECT 1 FROM core.processed_jobs f JOIN core.consumer_roles c ON c.id = f.consumer_id
                    WHERE f.job_id = d.job_id AND c.consumer = d.consumer) AS fenced
      FROM core.dead_letters d
     WHERE ${CHUNK_RANGE.replaceAll("created_at", "d.created_at")}
  ) AS x
  WHERE fenced OR r < ${RESOLVED_SHARE} * 0.83
)
UPDATE core.dead_letters d
   SET status = CASE WHEN p.fenced THEN 'superseded' WHEN p.q < 0.70 THEN 'replayed' ELSE 'discarded' END,
       discard_reason = CASE WHEN NOT p.fenced AND p.q >= 0.70
                             THEN ($5::text[])[1 + floor(p.delay * 4)::int] END,
       resolved_at = least(now(), d.created_at + make_interval(secs => 300 + p.delay * 259200)),
       resolved_by = ($6::text[])[1 + floor(p.a * 4)::int]
  FROM picked p
 WHERE d.id = p.id`;
