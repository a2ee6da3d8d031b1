-- The fence's consumer as a smallint id from the registry (issue 19, item 4).
--
-- Why: a fence carried its consumer's name as text twice, once in the heap row and once in every
-- primary-key entry. A 2-byte id from core.consumer_roles, in a row whose columns are ordered so
-- that no byte is padding, takes a fence from 232.6 to about 200 bytes at 1,000,000 rows, indexes
-- included (docs/performance.md, "Fence storage"). What it costs: the insert looks the id up in the
-- registry (core.consumer_id, once per statement), and whatever matches fences with dead letters,
-- which keep the consumer's name, joins through the registry.
--
-- 1. Every registered consumer gets a stable smallint id. The registry row is the key of its
--    fences now, so it may be neither deleted nor renamed: a consumer registered again would get a
--    new id, its fences would name nobody, and every job they fence would apply again.
-- 2. The fence becomes (processed_at, expires_at, consumer_id, fingerprint, job_id, tenant_id),
--    keyed (job_id, consumer_id). The existing fences are carried over, each under its consumer's
--    id; a consumer named by fences but not registered is registered here (below, with why).
-- 3. Row-level security compares consumer_id with the session's consumer's id. There is no foreign
--    key to the registry, on purpose (below).
-- 4. Every function that reads fences by consumer name is recreated against the id. Their
--    signatures do not change: callers still pass consumer names.

-- The migration takes the fence table before the registry, the order a fence insert takes them
-- (the table, then the registry as its statement runs), so it queues behind open fence
-- transactions instead of deadlocking with them; fence inserts then wait for it to commit (for as
-- long as the copy below takes). A dead-letter write takes them the other way round: should one
-- deadlock with this, PostgreSQL aborts one of the two, and either is safe to run again.
LOCK TABLE core.processed_jobs, core.consumer_roles IN ACCESS EXCLUSIVE MODE;

-- 1. The registry's id --------------------------------------------------------------------------

-- Existing rows get ids here, from the identity's sequence. GENERATED ALWAYS: nobody chooses one.
ALTER TABLE core.consumer_roles
  ADD COLUMN id smallint GENERATED ALWAYS AS IDENTITY,
  ADD CONSTRAINT consumer_roles_id_key UNIQUE (id);

COMMENT ON COLUMN core.consumer_roles.id IS
  'The consumer''s id: what its fences (core.processed_jobs.consumer_id) name it by. Assigned once, never changed or reused; the row is never deleted.';

CREATE FUNCTION core.consumer_roles_keep_identity() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    RAISE EXCEPTION 'core.consumer_roles cannot be truncated: fences name their consumers by these ids, and a consumer registered again would get a new one and apply its jobs again'
      USING ERRCODE = 'restrict_violation', SCHEMA = 'core', TABLE = 'consumer_roles';
  END IF;
  IF TG_OP = 'UPDATE' AND NEW.id = OLD.id AND NEW.consumer = OLD.consumer THEN
    RETURN NEW; -- its queues, say: the identity stays
  END IF;
  RAISE EXCEPTION 'consumer % (id %) stays registered under its name and id: its fences name it by id, and under a new one its jobs would apply again', OLD.consumer, OLD.id
    USING ERRCODE = 'restrict_violation', SCHEMA = 'core', TABLE = 'consumer_roles';
END
$$;

REVOKE ALL ON FUNCTION core.consumer_roles_keep_identity() FROM PUBLIC;

CREATE TRIGGER consumer_roles_keep_identity
  BEFORE UPDATE OR DELETE ON core.consumer_roles
  FOR EACH ROW EXECUTE FUNCTION core.consumer_roles_keep_identity();
CREATE TRIGGER consumer_roles_refuse_truncate
  BEFORE TRUNCATE ON core.consumer_roles
  FOR EACH STATEMENT EXECUTE FUNCTION core.consumer_roles_keep_identity();

-- As in 0014, except the registration: an INSERT … ON CONFLICT DO NOTHING draws its id from the
-- sequence before it finds the conflict, and the runner calls this on every run for every
-- consumer, so each deploy would waste an id per consumer out of smallint's 32,767. The row is
-- looked for first; migrators are serialised by the runner's advisory lock, and the ON CONFLICT
-- stays for one that is not.
CREATE OR REPLACE FUNCTION core.ensure_consumer_role(consumer text) RETURNS name
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  role_name name;
  found     record;
  other     name;
  left_over name[];
BEGIN
  IF consumer IS NULL OR (consumer COLLATE "C") !~ '^[a-z][a-z0-9-]{0,62}$' THEN
    RAISE EXCEPTION 'a consumer name is a lowercase letter followed by up to 62 of [a-z0-9-], not %', consumer
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  role_name := core.consumer_role_name(consumer);
  BEGIN
    EXECUTE format('CREATE ROLE %I NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS', role_name);
  EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL; -- created for another database of the cluster, or at this moment by another migrator
  END;
  SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls, rolcanlogin
    INTO found FROM pg_catalog.pg_roles WHERE rolname = role_name;
  IF found.rolsuper OR found.rolcreatedb OR found.rolcreaterole OR found.rolreplication OR found.rolbypassrls
     OR found.rolcanlogin THEN
    RAISE EXCEPTION 'role % exists with privileges beyond a jobfence consumer group role (it may log in, or is privileged); drop or rename it', role_name
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m
                  WHERE m.member = role_name::regrole AND m.roleid = 'jobfence_consumer'::regrole) THEN
    BEGIN
      EXECUTE format('GRANT jobfence_consumer TO %I', role_name);
    EXCEPTION WHEN unique_violation THEN
      NULL; -- granted at this moment by another migrator
    END;
  END IF;
  -- The group role holds the core privileges and its own tables' grants, nothing else.
  FOR other IN SELECT DISTINCT r.rolname FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles r ON r.oid = m.roleid
                WHERE m.member = role_name::regrole AND r.rolname <> 'jobfence_consumer' LOOP
    EXECUTE format('REVOKE %I FROM %I', other, role_name);
  END LOOP;
  -- Since PostgreSQL 16 a membership another role granted survives that REVOKE (with a warning).
  SELECT array_agg(DISTINCT r.rolname ORDER BY r.rolname) INTO left_over
    FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles r ON r.oid = m.roleid
   WHERE m.member = role_name::regrole AND r.rolname <> 'jobfence_consumer';
  IF left_over IS NOT NULL THEN
    RAISE EXCEPTION 'consumer role % is also a member of % and the migrator cannot revoke it; revoke it as its grantor', role_name, left_over
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM core.consumer_roles AS c WHERE c.consumer = ensure_consumer_role.consumer) THEN
    INSERT INTO core.consumer_roles AS c (consumer, role_name) VALUES (consumer, role_name)
    ON CONFLICT ON CONSTRAINT consumer_roles_pkey DO NOTHING;
  END IF;
  RETURN role_name;
END
$$;

-- The id of a registered consumer, for the fence insert: `(SELECT core.consumer_id('award-points'))`
-- is evaluated once per statement, one probe of the registry's primary key. A consumer that is not
-- registered is an error, never NULL: a fence insert that wrote nothing would read as "every job a
-- duplicate", and the harness would ack jobs it never applied.
CREATE FUNCTION core.consumer_id(consumer text) RETURNS smallint
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  found smallint;
BEGIN
  SELECT c.id INTO found FROM core.consumer_roles AS c WHERE c.consumer = consumer_id.consumer;
  IF found IS NULL THEN
    RAISE EXCEPTION 'consumer % is not registered in this database (core.consumer_roles), so it has no fence id', coalesce(consumer, 'NULL')
      USING ERRCODE = 'foreign_key_violation', SCHEMA = 'core', TABLE = 'consumer_roles',
            HINT = 'Migrate the consumer''s own set (the runner registers it: core.ensure_consumer_role) before it processes jobs.';
  END IF;
  RETURN found;
END
$$;

REVOKE ALL ON FUNCTION core.consumer_id(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.consumer_id(text) TO jobfence_consumer;

-- The id of the consumer the current role acts for (core.session_consumer, which refuses a role
-- acting for several), or NULL: row-level security on the fences compares with it.
CREATE FUNCTION core.session_consumer_id() RETURNS smallint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT c.id FROM core.consumer_roles AS c WHERE c.consumer = core.session_consumer()
$$;

REVOKE ALL ON FUNCTION core.session_consumer_id() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.session_consumer_id() TO jobfence_consumer;

-- 2. The fence, rewritten ------------------------------------------------------------------------

-- A fence whose consumer is not registered is not dropped: its consumer is registered here, as the
-- runner would register it (core.ensure_consumer_role: its group role, a member of
-- jobfence_consumer), and its fences are carried over under the new id. Refusing instead would stop
-- every database upgraded from before 0014 in one run: the runner applies this whole set before it
-- registers the consumers of the sets after it, so their fences are still unregistered here. A
-- name that cannot be registered (the fence's own check was looser than the registry's) stops the
-- migration with the names: those fences can only be resolved by a person.
DO $$
DECLARE
  unregistered  text[];
  unusable      text[];
  consumer_name text;
BEGIN
  SELECT array_agg(n ORDER BY n) INTO unregistered
    FROM (SELECT DISTINCT p.consumer AS n FROM core.processed_jobs AS p) AS fenced
   WHERE NOT EXISTS (SELECT 1 FROM core.consumer_roles AS c WHERE c.consumer = fenced.n);
  unusable := ARRAY(SELECT n FROM unnest(unregistered) AS n WHERE (n COLLATE "C") !~ '^[a-z][a-z0-9-]{0,62}$');
  IF cardinality(unusable) > 0 THEN
    RAISE EXCEPTION 'fences name consumers that cannot be registered (a consumer name is ^[a-z][a-z0-9-]{0,62}$): %', unusable
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Each fence is a job applied once; decide what those consumers are (and delete their fences only once no delivery of their jobs can arrive) before migrating again.';
  END IF;
  FOREACH consumer_name IN ARRAY coalesce(unregistered, '{}') LOOP
    PERFORM core.ensure_consumer_role(consumer_name);
    RAISE NOTICE 'consumer % had fences and no registration: registered (role %)', consumer_name,
      core.consumer_role_name(consumer_name);
  END LOOP;
END
$$;

ALTER TABLE core.processed_jobs RENAME TO processed_jobs_before_0016;
ALTER TABLE core.processed_jobs_before_0016 RENAME CONSTRAINT processed_jobs_pkey TO processed_jobs_before_0016_pkey;
ALTER INDEX core.processed_jobs_expires_at_idx RENAME TO processed_jobs_before_0016_expires_at_idx;

-- The fixed-width columns first, widest alignment first, then the two texts: no byte of the row
-- is padding, whatever the lengths of its texts. With a 36-character job id and a 10-character
-- tenant the tuple is 106 bytes (24 of header, 82 of data), stored in 112 (8-byte alignment):
-- the floor for this data. 0001's order with a smallint in the consumer's place needs 6 bytes of
-- padding and lands on 112 too for these lengths; without padding the row is never larger, for
-- any lengths. The primary key's entry is 48 bytes (64 with award-points' name).
--
-- No foreign key to core.consumer_roles: its check would take a KEY SHARE lock on the consumer's
-- one registry row at every fence insert, and under concurrency those locks become multixacts on
-- one hot row. Row-level security's WITH CHECK (the session's own consumer's id) keeps a consumer
-- from writing any other id; the fence insert takes the id from the registry (core.consumer_id,
-- which refuses an unregistered name); the registry row can be neither deleted nor renamed; the
-- cleanup and the readers join through the registry.
CREATE TABLE core.processed_jobs (
  processed_at timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL,
  consumer_id  smallint    NOT NULL,
  fingerprint  uuid,
  job_id       text        NOT NULL,
  tenant_id    text        NOT NULL,
  -- A job_id is a non-empty string of at most 255 characters (docs/design.md §2).
  CONSTRAINT processed_jobs_job_id_length CHECK (char_length(job_id) BETWEEN 1 AND 255),
  CONSTRAINT processed_jobs_tenant_id_length CHECK (char_length(tenant_id) <= 255),
  -- A fence that expires at or before it was written would let cleanup delete it while the job's
  -- retries can still arrive (docs/design.md §7).
  CONSTRAINT processed_jobs_expires_after_processed CHECK (expires_at > processed_at)
);

-- In expiry order, so the cleanup's batches empty whole pages; the indexes are built after the
-- copy (denser than grown by inserts, until random job ids split the key's pages again).
INSERT INTO core.processed_jobs (processed_at, expires_at, consumer_id, fingerprint, job_id, tenant_id)
SELECT o.processed_at, o.expires_at, c.id, o.fingerprint, o.job_id, o.tenant_id
  FROM core.processed_jobs_before_0016 AS o
  JOIN core.consumer_roles AS c ON c.consumer = o.consumer
 ORDER BY o.expires_at;

DO $$
DECLARE
  before bigint := (SELECT count(*) FROM core.processed_jobs_before_0016);
  after  bigint := (SELECT count(*) FROM core.processed_jobs);
BEGIN
  IF after <> before THEN
    RAISE EXCEPTION 'carried % of % fences over to the new table; nothing changed', after, before
      USING ERRCODE = 'internal_error';
  END IF;
END
$$;

DROP TABLE core.processed_jobs_before_0016;

-- A second fence for the same job and consumer is refused; ON CONFLICT (job_id, consumer_id) DO
-- NOTHING returning no row is how a repeat is detected.
ALTER TABLE core.processed_jobs ADD CONSTRAINT processed_jobs_pkey PRIMARY KEY (job_id, consumer_id);
-- TTL cleanup deletes "expires_at < now()" in bounded batches; this index lets each batch find
-- its rows without scanning the table.
CREATE INDEX processed_jobs_expires_at_idx ON core.processed_jobs (expires_at);

COMMENT ON TABLE core.processed_jobs IS
  'Idempotency fence: a row means the job''s work committed for that consumer. Written in the work transaction; deleted only by TTL cleanup after expires_at.';
COMMENT ON COLUMN core.processed_jobs.consumer_id IS
  'The consumer, by its id in core.consumer_roles (no foreign key: row-level security checks it is the session''s own).';
COMMENT ON COLUMN core.processed_jobs.fingerprint IS
  'First 16 bytes of SHA-256 over the RFC 8785 form of {tenant_id, payload}, as uuid (uuid_send gives the bytes); NULL on fences written before fingerprints existed (they count as equal).';

-- 3. Row-level security and grants, as before --------------------------------------------------

ALTER TABLE core.processed_jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY consumer_own_fences ON core.processed_jobs FOR ALL TO jobfence_consumer
  USING (consumer_id = (SELECT core.session_consumer_id()))
  WITH CHECK (consumer_id = (SELECT core.session_consumer_id()));
CREATE POLICY ops_reads_fences ON core.processed_jobs FOR SELECT TO jobfence_ops USING (true);

-- The consumer reads and inserts fences; ops reads them; the cleanup role has no right on the
-- table at all (0005): it deletes only through core.delete_expired_fences.
GRANT SELECT, INSERT ON core.processed_jobs TO jobfence_consumer;
GRANT SELECT ON core.processed_jobs TO jobfence_ops;

ANALYZE core.processed_jobs;

-- 4. The functions that read fences, against the id ---------------------------------------------
--
-- Each keeps its signature and its decisions; where it meets dead letters (which keep the name)
-- it goes through the registry. A fence whose id has no registry row cannot come from any writer
-- above; if one did, no dead letter could name it, and the cleanup would delete it once expired.

-- As in 0009: a transaction withdraws only the fences it inserted itself.
CREATE OR REPLACE FUNCTION core.withdraw_own_fences(consumer text, job_ids text[]) RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
  WITH withdrawn AS (
    DELETE FROM core.processed_jobs AS f
     USING core.consumer_roles AS c
     WHERE c.consumer = withdraw_own_fences.consumer
       AND f.consumer_id = c.id
       AND f.job_id = ANY (withdraw_own_fences.job_ids)
       AND f.xmin = xid(pg_current_xact_id())
    RETURNING 1)
  SELECT count(*)::integer FROM withdrawn
$$;

-- The registry's names, each at its id's subscript (NULL where no consumer has that id). The
-- cleanup reads it once per statement and finds the pending dead letters of a fence's job with
-- `d.consumer = names[p.consumer_id]`: the same probe of dead letters by (consumer, job_id) as
-- before, with no lookup of the registry per fence. Joined row by row instead, the registry costs
-- an index probe per candidate (about 47,000 more buffer reads for a batch of 20,000 out of
-- 1,000,000 fences, on PostgreSQL 15), in both of the cleanup's statements.
CREATE FUNCTION core.consumer_names() RETURNS text[]
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  names text[] := '{}';
  entry record;
BEGIN
  FOR entry IN SELECT c.id, c.consumer FROM core.consumer_roles AS c LOOP
    names[entry.id] := entry.consumer;
  END LOOP;
  RETURN names;
END
$$;

-- Called by the cleanup's definer functions below, as their owner.
REVOKE ALL ON FUNCTION core.consumer_names() FROM PUBLIC;

-- As in 0013, with the dead letters found through core.consumer_names.
CREATE OR REPLACE FUNCTION core.delete_expired_fences(batch_size integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
  names      text[];
  candidates tid[];
  deleted    integer;
BEGIN
  IF batch_size IS NULL OR batch_size < 1 OR batch_size > 100000 THEN
    RAISE EXCEPTION 'batch_size must be 1–100000, got %', batch_size USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- A consumer registered after this has no expired fence yet: a fence is younger than its
  -- consumer's registration by at least the TTL.
  names := core.consumer_names();
  -- 1. Lock the candidates. SKIP LOCKED: two cleanups divide the rows instead of queueing on each
  --    other, and a fence a dead-letter write holds is left for a later run.
  candidates := ARRAY(
    SELECT p.ctid FROM core.processed_jobs AS p
     WHERE p.expires_at < now()
       AND NOT EXISTS (SELECT 1 FROM core.dead_letters AS d
                        WHERE d.status = 'pending_review' AND d.consumer = names[p.consumer_id] AND d.job_id = p.job_id)
     ORDER BY p.expires_at
     LIMIT batch_size
       FOR UPDATE SKIP LOCKED);
  -- 2. Delete them, re-checked in this statement's own, later snapshot: a dead letter that
  --    committed since step 1 keeps its fence. None can commit after it: a writer needs the lock
  --    step 1 holds.
  DELETE FROM core.processed_jobs AS f
   WHERE f.ctid = ANY (candidates)
     AND f.expires_at < now()
     AND NOT EXISTS (SELECT 1 FROM core.dead_letters AS d
                      WHERE d.status = 'pending_review' AND d.consumer = names[f.consumer_id] AND d.job_id = f.job_id);
  GET DIAGNOSTICS deleted = ROW_COUNT;
  RETURN deleted;
END
$$;

-- As in 0010: expired fences the cleanup can delete, counted up to `cap`.
CREATE OR REPLACE FUNCTION core.expired_fence_backlog(cap integer) RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
  SELECT count(*)::integer FROM (
    SELECT 1 FROM core.processed_jobs AS p
     WHERE p.expires_at < now()
       AND NOT EXISTS (SELECT 1 FROM core.dead_letters AS d
                        WHERE d.status = 'pending_review' AND d.job_id = p.job_id
                          AND d.consumer = (SELECT core.consumer_names())[p.consumer_id])
     LIMIT greatest(cap, 0)
  ) AS expired
$$;

-- As in 0010: expired fences kept because a pending dead letter names their job, counted up to `cap`.
CREATE OR REPLACE FUNCTION core.held_fence_count(cap integer) RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
  SELECT count(*)::integer FROM (
    SELECT 1 FROM core.processed_jobs AS p
     WHERE p.expires_at < now()
       AND EXISTS (SELECT 1 FROM core.dead_letters AS d
                    WHERE d.status = 'pending_review' AND d.job_id = p.job_id
                      AND d.consumer = (SELECT core.consumer_names())[p.consumer_id])
     LIMIT greatest(cap, 0)
  ) AS held
$$;

-- As in 0014: the fence lock a dead-letter write takes, and the fence's fingerprint, only for a
-- consumer whose role the session's login holds. It locks the fence alone (OF p), never the
-- consumer's registry row, which every writer shares.
CREATE OR REPLACE FUNCTION core.hold_fence(job text, consumer_name text) RETURNS TABLE (fingerprint uuid)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
  SELECT p.fingerprint FROM core.consumer_roles AS c
    JOIN core.processed_jobs AS p ON p.consumer_id = c.id
   WHERE c.consumer = consumer_name AND p.job_id = job
     AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS r
                  WHERE r.rolname = c.role_name AND pg_has_role(session_user, r.oid, 'MEMBER'))
     FOR KEY SHARE OF p
$$;

-- As in 0014: a dead letter is superseded only when its job's fence exists.
CREATE OR REPLACE FUNCTION core.dead_letters_guard_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
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
  -- The fence must be this job's: the same fingerprint, or one side without (a fence from before
  -- fingerprints, a body whose envelope could not be read). A poison row names its job by id
  -- alone (its malformed payload's fingerprint means nothing), so any fence of the id will do.
  IF NEW.status = 'superseded' AND NOT EXISTS (
       SELECT 1 FROM core.consumer_roles AS c
         JOIN core.processed_jobs AS f ON f.consumer_id = c.id
        WHERE c.consumer = NEW.consumer AND f.job_id = NEW.job_id
          AND (f.fingerprint IS NULL OR NEW.job_fingerprint IS NULL OR NEW.error_kind = 'poison'
               OR uuid_send(f.fingerprint) = NEW.job_fingerprint)) THEN
    RAISE EXCEPTION 'dead letter % cannot be superseded: job % of % has no fence, or its fence is another job''s', OLD.id, OLD.job_id, OLD.consumer
      USING ERRCODE = 'check_violation', CONSTRAINT = 'dead_letters_superseded_needs_fence',
            SCHEMA = 'core', TABLE = 'dead_letters';
  END IF;
  RETURN NEW;
END
$$;
