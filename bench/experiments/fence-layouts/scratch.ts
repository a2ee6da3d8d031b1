/**
 * The scratch schema the candidate layouts live in (dropped at the end): a consumers table and an
 * enum for the layouts that name the consumer by id or by enum value, the fence table before
 * migration 0016 (the consumer's name as text), which most candidates vary, and a view of the
 * seeded fences with their consumer's name to fill those from; and the SQL the candidates share.
 */
import type pg from "pg";
import { CONSUMER } from "../../fence-storage/seed.ts";
import type { Cleanups } from "../../lib/support.ts";

export const SCRATCH = "bench_storage";
/** The fence table before migration 0016 (consumer as text), which most candidates vary. */
export const TEXT_LAYOUT = `${SCRATCH}.text_layout`;
/** The seeded fences with their consumer's name, to fill the text-layout candidates from. */
export const SOURCE = `${SCRATCH}.fences`;

/** The shipped job id check, for layouts written out column by column. */
export const JOB_ID_CHECK = "CHECK (char_length(job_id) BETWEEN 1 AND 255)";

/** Creates the schema and what the candidates build on; `cleanups` drops it. */
export async function createScratch(db: pg.Client, cleanups: Cleanups): Promise<void> {
  await db.query(`CREATE SCHEMA ${SCRATCH}`);
  cleanups.push(() => db.query(`DROP SCHEMA IF EXISTS ${SCRATCH} CASCADE`));
  await db.query(`CREATE TABLE ${SCRATCH}.consumers (id smallint PRIMARY KEY, name text NOT NULL UNIQUE)`);
  await db.query(`INSERT INTO ${SCRATCH}.consumers VALUES (1, $1)`, [CONSUMER]);
  await db.query(`CREATE TYPE ${SCRATCH}.consumer_name AS ENUM ('${CONSUMER}')`);
  await db.query(`CREATE TABLE ${TEXT_LAYOUT} (
    job_id text NOT NULL, consumer text NOT NULL, tenant_id text NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz NOT NULL, fingerprint uuid,
    PRIMARY KEY (job_id, consumer), ${JOB_ID_CHECK}, CHECK (char_length(tenant_id) <= 255),
    CHECK (expires_at > processed_at))`);
  await db.query(`CREATE INDEX ON ${TEXT_LAYOUT} (expires_at)`);
  await db.query(`CREATE VIEW ${SOURCE} AS
    SELECT p.job_id, c.consumer, p.tenant_id, p.fingerprint, p.processed_at, p.expires_at
      FROM core.processed_jobs p JOIN core.consumer_roles c ON c.id = p.consumer_id`);
}

/** The replay path's lookup on a layout that names the consumer as text (or an enum). */
export const textLookup = (t: string) => `SELECT 1 FROM ${t} WHERE job_id = $1 AND consumer = '${CONSUMER}'`;

/** …and on one that names it by the scratch consumers table's id. */
export const idLookup = (t: string) =>
  `SELECT 1 FROM ${t} WHERE job_id = $1 AND consumer_id = (SELECT id FROM ${SCRATCH}.consumers WHERE name = '${CONSUMER}')`;

/** A text layout's fill: the seeded fences with their consumer's name, in insertion order. */
export const fillAll = (t: string) =>
  `INSERT INTO ${t} (job_id, consumer, tenant_id, processed_at, expires_at)
   SELECT job_id, consumer, tenant_id, processed_at, expires_at FROM ${SOURCE} ORDER BY expires_at`;

/** The shipped layout's fill, every column, in insertion order. */
export const fillShipped = (t: string) =>
  `INSERT INTO ${t} (processed_at, expires_at, consumer_id, fingerprint, job_id, tenant_id)
   SELECT processed_at, expires_at, consumer_id, fingerprint, job_id, tenant_id FROM core.processed_jobs ORDER BY expires_at`;

/** The text layout's columns and checks, no index. */
export const likeCore = (t: string) =>
  `CREATE TABLE ${t} (LIKE ${TEXT_LAYOUT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`;
