-- Failure groups (SPEC §5, §6): dead letters that failed the same way share an error fingerprint,
-- so an incident's thousand rows are one group an operator can find, count and act on.
--
-- The fingerprint is the database's to compute, from last_error alone, in a generated column: every
-- writer (harness, drain, any future one) gets the same answer for the same failure, a writer cannot
-- claim another group, and rows written before this migration are grouped by the same rule.
--
-- What identifies a failure: the error class, its message with the parts that vary per job
-- normalised away (UUIDs, numbers and every word holding a digit: ids like order-8812, amounts,
-- timestamps), and the first stack frame of the consumer's own code (function and file name, no
-- line numbers or directories, so two deployments of one build group together). A trailing
-- " [code]" (a SQLSTATE or errno the harness appends) is kept as it is: 23505 and 40001 are not
-- the same failure.

-- The normalised message. IMMUTABLE: it depends on its argument alone.
CREATE FUNCTION core.normalise_error_message(message text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT left(btrim(regexp_replace(regexp_replace(regexp_replace(regexp_replace(
           coalesce(substring(message FROM '^(.*?)(?:\s\[[^]\s]{1,16}\])?$'), ''),
           '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<uuid>', 'g'),
           '[[:alnum:]_.:/+-]*[0-9][[:alnum:]_.:/+-]*', '<n>', 'g'),
           '(<n>)+', '<n>', 'g'),
           '\s+', ' ', 'g')), 500)
         || coalesce(substring(message FROM '\s\[[^]\s]{1,16}\]$'), '')
$$;

-- The first frame of the consumer's code in a V8 stack: the first "at …" line that is not Node's
-- own (node:, internal/), a dependency's (node_modules) or jobfence's library (/shared/), as
-- "function@file" with the directories, line and column dropped. '' when there is none.
CREATE FUNCTION core.first_own_frame(stack text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce((
    SELECT concat_ws('@',
             nullif(regexp_replace(coalesce(m[1], ''), '^async\s+', ''), ''),
             regexp_replace(regexp_replace(m[2], '(:[0-9]+)+$', ''), '^.*[/\\]', ''))
      FROM regexp_split_to_table(stack, '\n') WITH ORDINALITY AS line(text, n),
           LATERAL regexp_match(line.text, '^\s*at\s+(?:(.*?)\s+\()?([^()]*?)\)?\s*$') AS m
     WHERE m IS NOT NULL
       AND m[2] !~ '^(<anonymous>|native)$|(^|[/\\])(node:|internal/)|node_modules|[/\\]shared[/\\]'
     ORDER BY line.n
     LIMIT 1), '')
$$;

-- The fingerprint: the first 16 bytes of SHA-256 over class, normalised message and frame. Declared
-- IMMUTABLE although convert_to is only STABLE: a database's encoding never changes.
CREATE FUNCTION core.error_fingerprint(last_error jsonb) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT substring(sha256(convert_to(concat_ws(E'\n',
           coalesce(last_error ->> 'class', ''),
           core.normalise_error_message(last_error ->> 'message'),
           core.first_own_frame(last_error ->> 'stack')), 'UTF8')) FROM 1 FOR 16)
$$;

-- Called by the generated columns, so as every writer of a dead letter.
GRANT EXECUTE ON FUNCTION core.normalise_error_message(text), core.first_own_frame(text),
  core.error_fingerprint(jsonb) TO jobfence_consumer, jobfence_ops;

ALTER TABLE core.dead_letters
  ADD COLUMN error_class text GENERATED ALWAYS AS (last_error ->> 'class') STORED,
  ADD COLUMN error_fingerprint bytea GENERATED ALWAYS AS (core.error_fingerprint(last_error)) STORED;

COMMENT ON COLUMN core.dead_letters.error_class IS 'last_error''s class, for filtering.';
COMMENT ON COLUMN core.dead_letters.error_fingerprint IS
  'The failure group: 16 bytes of SHA-256 over the error class, the message with ids and numbers normalised away, and the first frame of the consumer''s code (core.error_fingerprint).';

-- A BEFORE UPDATE trigger sees the generated columns of NEW not yet computed, so the append-only
-- check leaves them out; they are functions of last_error, which it does compare.
CREATE OR REPLACE FUNCTION core.dead_letters_guard_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.status <> 'pending_review' THEN
    RAISE EXCEPTION 'dead letter % is % and can no longer change', OLD.id, OLD.status
      USING ERRCODE = 'check_violation', CONSTRAINT = 'dead_letters_transition',
            SCHEMA = 'core', TABLE = 'dead_letters';
  END IF;
  IF NEW.status NOT IN ('replayed', 'discarded', 'superseded') THEN
    RAISE EXCEPTION 'dead letter % cannot move from pending_review to %', OLD.id, NEW.status
      USING ERRCODE = 'check_violation', CONSTRAINT = 'dead_letters_transition',
            SCHEMA = 'core', TABLE = 'dead_letters';
  END IF;
  IF (to_jsonb(NEW) - ARRAY['status', 'resolved_at', 'resolved_by', 'discard_reason', 'error_class', 'error_fingerprint'])
     IS DISTINCT FROM
     (to_jsonb(OLD) - ARRAY['status', 'resolved_at', 'resolved_by', 'discard_reason', 'error_class', 'error_fingerprint']) THEN
    RAISE EXCEPTION 'dead letter % is append-only: only status and its resolution may change', OLD.id
      USING ERRCODE = 'check_violation', CONSTRAINT = 'dead_letters_append_only',
            SCHEMA = 'core', TABLE = 'dead_letters';
  END IF;
  RETURN NEW;
END
$$;

-- Groups, kept by statement-level triggers like core.dead_letter_counts: the stats endpoint reads
-- a few rows instead of grouping a million. One row per (consumer, fingerprint): how many dead
-- letters it holds and how many still wait, when it was first and last seen, and the first row
-- as its sample.
CREATE TABLE core.dead_letter_groups (
  consumer       text        NOT NULL,
  fingerprint    bytea       NOT NULL,
  error_class    text,
  sample_id      uuid        NOT NULL,
  sample_message text        NOT NULL,
  total          bigint      NOT NULL,
  pending        bigint      NOT NULL,
  first_seen     timestamptz NOT NULL,
  last_seen      timestamptz NOT NULL,
  PRIMARY KEY (consumer, fingerprint),
  CONSTRAINT dead_letter_groups_counts CHECK (total >= 1 AND pending BETWEEN 0 AND total)
);

COMMENT ON TABLE core.dead_letter_groups IS
  'Dead letters per (consumer, error fingerprint), maintained by triggers on core.dead_letters; read by stats and the groups endpoint.';

-- Groups with something pending, biggest first, per consumer and overall.
CREATE INDEX dead_letter_groups_pending_idx ON core.dead_letter_groups (pending DESC, consumer) WHERE pending > 0;

CREATE FUNCTION core.dead_letters_group_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
  INSERT INTO core.dead_letter_groups AS g
         (consumer, fingerprint, error_class, sample_id, sample_message, total, pending, first_seen, last_seen)
  SELECT consumer, error_fingerprint,
         (array_agg(error_class ORDER BY created_at, id))[1],
         (array_agg(id ORDER BY created_at, id))[1],
         left((array_agg(last_error ->> 'message' ORDER BY created_at, id))[1], 500),
         count(*), count(*) FILTER (WHERE status = 'pending_review'), min(created_at), max(created_at)
    FROM inserted GROUP BY 1, 2 ORDER BY 1, 2
  ON CONFLICT (consumer, fingerprint) DO UPDATE
     SET total = g.total + EXCLUDED.total,
         pending = g.pending + EXCLUDED.pending,
         first_seen = least(g.first_seen, EXCLUDED.first_seen),
         last_seen = greatest(g.last_seen, EXCLUDED.last_seen);
  RETURN NULL;
END
$$;

CREATE FUNCTION core.dead_letters_group_updated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
  UPDATE core.dead_letter_groups AS g SET pending = g.pending - d.left_pending
    FROM (SELECT o.consumer, o.error_fingerprint, count(*) AS left_pending
            FROM old_rows o JOIN new_rows n USING (id)
           WHERE o.status = 'pending_review' AND n.status <> 'pending_review'
           GROUP BY 1, 2 ORDER BY 1, 2) AS d
   WHERE g.consumer = d.consumer AND g.fingerprint = d.error_fingerprint;
  RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION core.dead_letters_group_inserted() FROM PUBLIC;
REVOKE ALL ON FUNCTION core.dead_letters_group_updated() FROM PUBLIC;

CREATE TRIGGER dead_letters_group_inserted
  AFTER INSERT ON core.dead_letters REFERENCING NEW TABLE AS inserted
  FOR EACH STATEMENT EXECUTE FUNCTION core.dead_letters_group_inserted();

CREATE TRIGGER dead_letters_group_updated
  AFTER UPDATE ON core.dead_letters REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION core.dead_letters_group_updated();

INSERT INTO core.dead_letter_groups
       (consumer, fingerprint, error_class, sample_id, sample_message, total, pending, first_seen, last_seen)
SELECT consumer, error_fingerprint,
       (array_agg(error_class ORDER BY created_at, id))[1],
       (array_agg(id ORDER BY created_at, id))[1],
       left((array_agg(last_error ->> 'message' ORDER BY created_at, id))[1], 500),
       count(*), count(*) FILTER (WHERE status = 'pending_review'), min(created_at), max(created_at)
  FROM core.dead_letters GROUP BY 1, 2;

GRANT SELECT ON core.dead_letter_groups TO jobfence_ops;

-- Filters by group and by class, alone, with a status, and a group with its consumer: each keeps
-- the keyset columns behind it, so a page is one index range scan even when the group's rows are
-- an old burst (without them the planner walks the time index and filters, reading most of the
-- table: measured at a million rows, bench/api.ts).
CREATE INDEX dead_letters_group_created_idx ON core.dead_letters (error_fingerprint, created_at, id);
CREATE INDEX dead_letters_group_status_created_idx
  ON core.dead_letters (error_fingerprint, status, created_at, id);
CREATE INDEX dead_letters_consumer_group_created_idx
  ON core.dead_letters (consumer, error_fingerprint, created_at, id);
CREATE INDEX dead_letters_class_created_idx ON core.dead_letters (error_class, created_at, id);
CREATE INDEX dead_letters_class_status_created_idx
  ON core.dead_letters (error_class, status, created_at, id);
-- A bulk plan counts a group's pending set and joins it to the fences: covering, so that is an
-- index-only scan of the set rather than a heap page per row.
CREATE INDEX dead_letters_pending_group_covering_idx
  ON core.dead_letters (error_fingerprint, created_at, id) INCLUDE (consumer, job_id, job_fingerprint, queue)
  WHERE status = 'pending_review';

-- A message match ("contains", case-insensitive) served by a trigram index, so a rare match over
-- a million rows is an index lookup rather than a scan. pg_trgm is a trusted extension: a
-- migrator that may create objects in the database may install it. It is found wherever an
-- earlier install put it.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
DO $$
DECLARE
  opclass_schema name;
BEGIN
  SELECT n.nspname INTO opclass_schema
    FROM pg_opclass c JOIN pg_namespace n ON n.oid = c.opcnamespace
   WHERE c.opcname = 'gin_trgm_ops' LIMIT 1;
  EXECUTE format(
    'CREATE INDEX dead_letters_message_trgm_idx ON core.dead_letters USING gin ((last_error ->> %L) %I.gin_trgm_ops)',
    'message', opclass_schema);
END
$$;
