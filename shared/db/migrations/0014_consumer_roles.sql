-- One group role per consumer, and the database pins every consumer row to it.
--
-- Until now every consumer and drain logged in with one role, so a buggy or compromised consumer
-- could write fences for another (whose jobs would then be skipped as duplicates), dead letters for
-- another (which a bulk replay would send to that consumer's queue) and the other's own tables.
-- From here:
--
-- * each consumer has a NOLOGIN group role, `core.consumer_role_name(consumer)`, registered in
--   core.consumer_roles and a member of jobfence_consumer, which keeps the privileges on the core
--   tables. The consumer's function and its backstop drain log in as one user granted that role
--   and nothing else (core.provision_login). The consumer's own migrations grant their tables to
--   that role only, so no consumer reaches another's tables;
-- * row-level security on the tables a consumer writes (fences, dead letters, the attempt ledger)
--   limits it to the rows whose `consumer` is the one its role belongs to (core.session_consumer);
-- * a consumer inserts dead letters through a column grant that leaves out `created_at`, `status`
--   and the resolution: those come from the defaults and the transition alone;
-- * `superseded` needs the job's fence (the guard trigger checks it, whoever updates).
--
-- The ops role reads every row and performs the transition; the cleanup role works through
-- SECURITY DEFINER functions, whose owner is not subject to row-level security.

CREATE TABLE core.consumer_roles (
  consumer   text        NOT NULL,
  role_name  name        NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT consumer_roles_pkey PRIMARY KEY (consumer),
  CONSTRAINT consumer_roles_role_name_key UNIQUE (role_name),
  CONSTRAINT consumer_roles_consumer_name CHECK ((consumer COLLATE "C") ~ '^[a-z][a-z0-9-]{0,62}$')
);

COMMENT ON TABLE core.consumer_roles IS
  'The group role of each consumer of this database (core.ensure_consumer_role); row-level security maps a session to its consumer through it.';

-- The role name of a consumer: `jobfence_consumer_` and the name with '-' as '_' when the name has
-- at most 32 characters; a longer one keeps 32 and gains '_' and 12 hex digits of its MD5 (63 in
-- all). The two forms have different lengths (at most 50, exactly 63), so no short name can take a
-- long name's role. The library computes the same (consumerRoleName,
-- shared/db/queries/provision-login.ts).
CREATE FUNCTION core.consumer_role_name(consumer text) RETURNS name
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
  SELECT (CASE WHEN char_length(consumer) <= 32
               THEN 'jobfence_consumer_' || replace(consumer, '-', '_')
               ELSE 'jobfence_consumer_' || left(replace(consumer, '-', '_'), 32) || '_' || left(md5(consumer), 12)
          END)::name
$$;

-- Creates (or checks) the consumer's group role and registers it. The migration runner calls it
-- before applying a consumer's own migration set. Runs with the caller's rights: the migrator
-- needs CREATEROLE, as it does for migration 0003. Roles are cluster-wide, so several databases of
-- one cluster share a consumer's role; creation tolerates a concurrent creator.
CREATE FUNCTION core.ensure_consumer_role(consumer text) RETURNS name
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
  INSERT INTO core.consumer_roles AS c (consumer, role_name) VALUES (consumer, role_name)
  ON CONFLICT ON CONSTRAINT consumer_roles_pkey DO NOTHING;
  RETURN role_name;
END
$$;

REVOKE ALL ON FUNCTION core.ensure_consumer_role(text) FROM PUBLIC;

-- The consumer the current role acts for: the one registered consumer whose group role's
-- privileges it holds (a login granted the role, or the role itself after SET ROLE). NULL for any
-- other role, which row-level security then lets write nothing. Two is a misconfiguration that
-- provision_login never makes; it is refused rather than guessed.
CREATE FUNCTION core.session_consumer() RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  names text[];
BEGIN
  SELECT array_agg(c.consumer ORDER BY c.consumer) INTO names
    FROM core.consumer_roles AS c
    JOIN pg_catalog.pg_roles AS r ON r.rolname = c.role_name
   WHERE pg_has_role(current_user, r.oid, 'USAGE');
  IF cardinality(names) > 1 THEN
    RAISE EXCEPTION 'role % acts for several consumers (%): a login must be granted one consumer''s role only', current_user, names
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN names[1];
END
$$;

REVOKE ALL ON FUNCTION core.session_consumer() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.session_consumer() TO jobfence_consumer;
GRANT SELECT ON core.consumer_roles TO jobfence_consumer, jobfence_ops;

-- The queues a consumer's dead letters may be replayed to. A dead letter's `queue` is written by
-- the consumer, so without this a consumer could record a row naming another consumer's queue and
-- an operator's replay would send its body there (the API may send to every consumer's queue).
-- The deployment registers each consumer's source queue (the migrate function, the local stack);
-- a replay sends a row only to a queue registered for its consumer. A consumer with none
-- registered yet (a database no deployment has registered queues in) is not restricted; the doctor
-- reports it.
ALTER TABLE core.consumer_roles ADD COLUMN queues text[] NOT NULL DEFAULT '{}',
  ADD CONSTRAINT consumer_roles_queues_bounded CHECK (cardinality(queues) <= 16);

COMMENT ON COLUMN core.consumer_roles.queues IS
  'The queues (URLs) a replay may send this consumer''s dead letters to; empty: not registered, unrestricted.';

CREATE FUNCTION core.register_consumer_queues(consumer text, queues text[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF queues IS NULL OR cardinality(queues) = 0 OR array_position(queues, NULL) IS NOT NULL
     OR EXISTS (SELECT 1 FROM unnest(queues) AS q WHERE q !~ '^https?://[^[:space:]]+$') THEN
    RAISE EXCEPTION 'queues must be one or more queue URLs, got %', queues USING ERRCODE = 'invalid_parameter_value';
  END IF;
  UPDATE core.consumer_roles AS c
     SET queues = ARRAY(SELECT DISTINCT q FROM unnest(register_consumer_queues.queues) AS q ORDER BY q)
   WHERE c.consumer = register_consumer_queues.consumer;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'consumer % has no role in this database: migrate its set first', consumer
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION core.register_consumer_queues(text, text[]) FROM PUBLIC;

-- Whether a replay may send a dead letter of `consumer` to `queue`.
CREATE FUNCTION core.replay_queue_allowed(consumer text, queue text) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT coalesce((SELECT cardinality(c.queues) = 0 OR replay_queue_allowed.queue = ANY (c.queues)
                     FROM core.consumer_roles AS c WHERE c.consumer = replay_queue_allowed.consumer), true)
$$;

REVOKE ALL ON FUNCTION core.replay_queue_allowed(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.replay_queue_allowed(text, text) TO jobfence_ops;

-- A bulk replay skips such a row, and says why.
ALTER TABLE core.bulk_operation_skips
  DROP CONSTRAINT bulk_operation_skips_reason_known,
  ADD CONSTRAINT bulk_operation_skips_reason_known CHECK (reason IN ('conflict', 'send-failed', 'foreign-queue'));

-- Row-level security. The policies compare with a scalar subquery, so the mapping is looked up
-- once per statement, not once per row. A policy names the roles it is for; a role that has a
-- table privilege but no policy sees no rows and writes none.
ALTER TABLE core.processed_jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE core.dead_letters ENABLE ROW LEVEL SECURITY;
ALTER TABLE core.message_attempts ENABLE ROW LEVEL SECURITY;

CREATE POLICY consumer_own_fences ON core.processed_jobs FOR ALL TO jobfence_consumer
  USING (consumer = (SELECT core.session_consumer()))
  WITH CHECK (consumer = (SELECT core.session_consumer()));
CREATE POLICY ops_reads_fences ON core.processed_jobs FOR SELECT TO jobfence_ops USING (true);

CREATE POLICY consumer_own_dead_letters ON core.dead_letters FOR ALL TO jobfence_consumer
  USING (consumer = (SELECT core.session_consumer()))
  WITH CHECK (consumer = (SELECT core.session_consumer()));
CREATE POLICY ops_reads_dead_letters ON core.dead_letters FOR SELECT TO jobfence_ops USING (true);
CREATE POLICY ops_resolves_dead_letters ON core.dead_letters FOR UPDATE TO jobfence_ops
  USING (true) WITH CHECK (true);

CREATE POLICY consumer_own_attempts ON core.message_attempts FOR ALL TO jobfence_consumer
  USING (consumer = (SELECT core.session_consumer()))
  WITH CHECK (consumer = (SELECT core.session_consumer()));

-- A consumer writes a dead letter's content; the database writes its identity, time and status.
REVOKE INSERT ON core.dead_letters FROM jobfence_consumer;
GRANT INSERT (job_id, consumer, queue, tenant_id, correlation_id, body_form, body, body_utf16, body_fingerprint,
              payload, message_attributes, attempts, error_kind, last_error, job_fingerprint, fence_fingerprint,
              attempt_history)
   ON core.dead_letters TO jobfence_consumer;

-- The fence lock a dead-letter write takes (migration 0013) runs with its owner's rights, past
-- row-level security: it answers, and locks, only the fences of a consumer whose role the
-- session's login holds. session_user, not current_user (which is the owner in here): a login is a
-- member of its consumer's role; a superuser (tests, the local stack) is a member of every role.
CREATE OR REPLACE FUNCTION core.hold_fence(job text, consumer_name text) RETURNS TABLE (fingerprint uuid)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
  SELECT p.fingerprint FROM core.processed_jobs AS p
   WHERE p.job_id = job AND p.consumer = consumer_name
     AND EXISTS (SELECT 1 FROM core.consumer_roles AS c JOIN pg_catalog.pg_roles AS r ON r.rolname = c.role_name
                  WHERE c.consumer = consumer_name AND pg_has_role(session_user, r.oid, 'MEMBER'))
     FOR KEY SHARE OF p
$$;

-- No login is granted jobfence_consumer itself any more: it would act for no consumer. A login
-- that was (the single consumer login of earlier versions) loses the membership here; the deploy
-- provisions the per-consumer logins.
DO $$
DECLARE
  login name;
BEGIN
  FOR login IN SELECT r.rolname FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles r ON r.oid = m.member
                WHERE m.roleid = 'jobfence_consumer'::regrole AND r.rolcanlogin LOOP
    EXECUTE format('REVOKE jobfence_consumer FROM %I', login);
  END LOOP;
END
$$;

-- A dead letter is superseded only when its job's fence exists. The guard runs with its owner's
-- rights, so the check holds whatever the updating role may read.
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
       SELECT 1 FROM core.processed_jobs AS f
        WHERE f.job_id = NEW.job_id AND f.consumer = NEW.consumer
          AND (f.fingerprint IS NULL OR NEW.job_fingerprint IS NULL OR NEW.error_kind = 'poison'
               OR uuid_send(f.fingerprint) = NEW.job_fingerprint)) THEN
    RAISE EXCEPTION 'dead letter % cannot be superseded: job % of % has no fence, or its fence is another job''s', OLD.id, OLD.job_id, OLD.consumer
      USING ERRCODE = 'check_violation', CONSTRAINT = 'dead_letters_superseded_needs_fence',
            SCHEMA = 'core', TABLE = 'dead_letters';
  END IF;
  RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION core.dead_letters_guard_update() FROM PUBLIC;

-- Logins get exactly one group role: the ops role, the cleanup role, or one registered consumer's
-- role (not jobfence_consumer itself). An existing role adopted as a login loses every other
-- membership it holds (pg_write_all_data, another consumer's role, anything granted by hand); one
-- that cannot be revoked (granted by a role the migrator cannot act for) is refused.
CREATE OR REPLACE FUNCTION core.provision_login(login name, password_verifier text, member_of name) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  shared_roles constant name[] := ARRAY['jobfence_ops', 'jobfence_cleanup']::name[];
  existing     record;
  outcome      text;
  other        name;
  left_over    name[];
BEGIN
  IF member_of IS NULL
     OR NOT (member_of = ANY (shared_roles)
             OR EXISTS (SELECT 1 FROM core.consumer_roles AS c WHERE c.role_name = member_of)) THEN
    RAISE EXCEPTION 'a login can only be granted one of % or a registered consumer''s role (core.consumer_roles), not %', shared_roles, member_of
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- Consumer group roles are cluster-wide and may be registered by another database of the
  -- cluster: their whole prefix is reserved, not only this database's.
  IF login IS NULL OR login = ANY (shared_roles) OR login = 'jobfence_consumer' OR login LIKE 'jobfence\_consumer\_%'
     OR EXISTS (SELECT 1 FROM core.consumer_roles AS c WHERE c.role_name = login)
     OR login = current_user OR login LIKE 'pg\_%' OR login LIKE 'rds\_%' OR login = 'rdsadmin' THEN
    RAISE EXCEPTION 'login % is reserved: choose a user name of its own', login
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- A plaintext password here would be stored as given; accept only a verifier.
  IF password_verifier IS NULL OR password_verifier !~ '^SCRAM-SHA-256\$[0-9]+:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$' THEN
    RAISE EXCEPTION 'password_verifier must be a SCRAM-SHA-256 verifier, never a plaintext password'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;

  SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls
    INTO existing FROM pg_catalog.pg_roles WHERE rolname = login;
  IF NOT FOUND THEN
    EXECUTE format('CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD %L',
                   login, password_verifier);
    outcome := 'created';
  ELSIF existing.rolsuper OR existing.rolcreatedb OR existing.rolcreaterole OR existing.rolreplication OR existing.rolbypassrls THEN
    -- Refused rather than altered: a user that can do more than its role is not jobfence's to reuse.
    RAISE EXCEPTION 'role % exists with privileges beyond a jobfence login; rename the login or drop the role', login
      USING ERRCODE = 'insufficient_privilege';
  ELSE
    EXECUTE format('ALTER ROLE %I LOGIN PASSWORD %L', login, password_verifier);
    outcome := 'updated';
  END IF;

  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m WHERE m.member = login::regrole AND m.roleid = member_of::regrole) THEN
    EXECUTE format('GRANT %I TO %I', member_of, login);
  END IF;
  FOR other IN SELECT DISTINCT r.rolname FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles r ON r.oid = m.roleid
                WHERE m.member = login::regrole AND r.rolname <> member_of LOOP
    EXECUTE format('REVOKE %I FROM %I', other, login);
  END LOOP;
  -- Since PostgreSQL 16 a membership another role granted survives a REVOKE by this one (with a
  -- warning): check what is left rather than trust the statement.
  SELECT array_agg(DISTINCT r.rolname ORDER BY r.rolname) INTO left_over
    FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles r ON r.oid = m.roleid
   WHERE m.member = login::regrole AND r.rolname <> member_of;
  IF left_over IS NOT NULL THEN
    RAISE EXCEPTION 'login % is also a member of % and the migrator cannot revoke it; revoke it as its grantor, or choose another user name', login, left_over
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  -- A login acts through its group role alone: another role that is a member of it would act as
  -- it too, and privileges or objects of its own would reach past the role's grants. (The
  -- migrator's own membership, which PostgreSQL 16+ gives the creator of a role, is its admin
  -- grant and is left.)
  SELECT array_agg(DISTINCT r.rolname ORDER BY r.rolname) INTO left_over
    FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles r ON r.oid = m.member
   WHERE m.roleid = login::regrole AND r.rolname <> current_user;
  IF left_over IS NOT NULL THEN
    RAISE EXCEPTION 'roles % are members of login %, so they would act as it; revoke the login from them, or choose another user name', left_over, login
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_shdepend d
              WHERE d.refclassid = 'pg_catalog.pg_authid'::regclass AND d.refobjid = login::regrole
                AND d.deptype IN ('o', 'a')
                AND d.dbid IN (0, (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()))) THEN
    RAISE EXCEPTION 'login % owns objects or holds privileges of its own in this database; revoke them (REASSIGN OWNED, REVOKE) or choose another user name', login
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN outcome;
END
$$;

REVOKE ALL ON FUNCTION core.provision_login(name, text, name) FROM PUBLIC;

-- A function with a pinned search_path still searches pg_temp first for tables unless pg_temp is
-- named: a session's temporary table called like a catalog or core table would shadow it inside a
-- SECURITY DEFINER function (any login may create temporary tables). Every core function that
-- pins its path names pg_temp last.
DO $$
DECLARE
  fn regprocedure;
BEGIN
  FOR fn IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
             WHERE p.pronamespace = 'core'::regnamespace
               AND EXISTS (SELECT 1 FROM unnest(p.proconfig) AS c WHERE c LIKE 'search\_path=%')
               AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) AS c WHERE c LIKE 'search\_path=%pg\_temp') LOOP
    EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, core, pg_temp', fn);
  END LOOP;
END
$$;
