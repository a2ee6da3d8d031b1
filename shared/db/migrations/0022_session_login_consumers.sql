-- A login holding two consumers' roles acts for neither, whatever role it has set (issue 30).
--
-- Until now core.session_consumer() and core.session_consumer_id() (migration 0017) looked at the
-- current role only. A login granted two consumers' roles (a misconfiguration core.provision_login
-- never makes, but a grant by hand can) was refused while it inherited both, yet after
-- `SET ROLE jobfence_consumer_a` it acted as consumer a, and after `SET ROLE jobfence_consumer_b` as
-- b: one credential, two consumers. From here both functions also refuse when the session's login
-- (session_user, which SET ROLE does not change) is a member of more than one registered
-- consumer's group role, naming the consumers. A superuser is a member of every role and may do
-- anything anyway (tests, the local stack): it is not refused, and acts for the role it has set.
-- The refusal is in both functions, not in a helper both call: a policy's lookup must stay one
-- function call per statement, and a role that may call the lookups need not be granted another.
--
-- Cost: the same single query, planned once per session. It keeps the registry rows whose role the
-- login is a member of (one membership test per row, as before), and tests the current role's
-- USAGE only on those: SET ROLE reaches only roles the login is a member of, so no consumer of the
-- current role is missed. Everything else (the names, the superuser check) runs on the refusal path
-- alone, in an IF of its own: a PL/pgSQL condition holding a subquery is run through the executor on
-- every call, even when its first operand is false.
--
-- Also: a consumer's role reads only the registry columns the fence and dead-letter paths use (id,
-- consumer, role_name). The whole-table SELECT of migration 0014 let every consumer read every
-- other consumer's replay queue URLs (`queues`). jobfence_ops keeps the whole table.

CREATE OR REPLACE FUNCTION core.session_consumer_id() RETURNS smallint
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  ids   smallint[];
  held  integer;
  names text[];
  held_names text[];
BEGIN
  SELECT array_agg(c.id) FILTER (WHERE pg_has_role(current_user, to_regrole(quote_ident(c.role_name)), 'USAGE')),
         count(*)
    INTO ids, held
    FROM core.consumer_roles AS c
   WHERE pg_has_role(session_user, to_regrole(quote_ident(c.role_name)), 'MEMBER');
  -- A superuser is a member of every role: only it gets past this, on the path it alone takes.
  IF held > 1 THEN
    IF NOT coalesce((SELECT a.rolsuper FROM pg_catalog.pg_roles AS a WHERE a.rolname = session_user), false) THEN
      SELECT array_agg(c.consumer ORDER BY c.consumer) INTO held_names
        FROM core.consumer_roles AS c
       WHERE pg_has_role(session_user, to_regrole(quote_ident(c.role_name)), 'MEMBER');
      RAISE EXCEPTION 'login % is a member of several consumers'' roles (%): a login must be granted one consumer''s role only, whatever role it sets', session_user, held_names
        USING ERRCODE = 'insufficient_privilege';
    END IF;
  END IF;
  IF cardinality(ids) > 1 THEN
    SELECT array_agg(c.consumer ORDER BY c.consumer) INTO names FROM core.consumer_roles AS c WHERE c.id = ANY (ids);
    RAISE EXCEPTION 'role % acts for several consumers (%): a login must be granted one consumer''s role only', current_user, names
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN ids[1];
END
$$;

CREATE OR REPLACE FUNCTION core.session_consumer() RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  names text[];
  held  integer;
  held_names text[];
BEGIN
  SELECT array_agg(c.consumer ORDER BY c.consumer) FILTER (WHERE pg_has_role(current_user, to_regrole(quote_ident(c.role_name)), 'USAGE')),
         count(*)
    INTO names, held
    FROM core.consumer_roles AS c
   WHERE pg_has_role(session_user, to_regrole(quote_ident(c.role_name)), 'MEMBER');
  -- A superuser is a member of every role: only it gets past this, on the path it alone takes.
  IF held > 1 THEN
    IF NOT coalesce((SELECT a.rolsuper FROM pg_catalog.pg_roles AS a WHERE a.rolname = session_user), false) THEN
      SELECT array_agg(c.consumer ORDER BY c.consumer) INTO held_names
        FROM core.consumer_roles AS c
       WHERE pg_has_role(session_user, to_regrole(quote_ident(c.role_name)), 'MEMBER');
      RAISE EXCEPTION 'login % is a member of several consumers'' roles (%): a login must be granted one consumer''s role only, whatever role it sets', session_user, held_names
        USING ERRCODE = 'insufficient_privilege';
    END IF;
  END IF;
  IF cardinality(names) > 1 THEN
    RAISE EXCEPTION 'role % acts for several consumers (%): a login must be granted one consumer''s role only', current_user, names
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN names[1];
END
$$;

REVOKE SELECT ON core.consumer_roles FROM jobfence_consumer;
GRANT SELECT (id, consumer, role_name) ON core.consumer_roles TO jobfence_consumer;

-- The definer functions a consumer calls (the relay's claim, sends, retries and moves; the
-- dead-letter write's holds on a fence and on a pending row) check the session's login, not the
-- current role, since they run as their owner: each asked whether the login holds the named
-- consumer's role, so a login holding two consumers' roles could act for either through them. One
-- check serves them all: core.session_login_holds refuses such a login, naming the consumers, and
-- the two holds that tested the membership inline now ask it too.
CREATE OR REPLACE FUNCTION core.session_login_holds(consumer text) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  held text[];
BEGIN
  SELECT array_agg(c.consumer ORDER BY c.consumer) INTO held
    FROM core.consumer_roles AS c
   WHERE pg_has_role(session_user, to_regrole(quote_ident(c.role_name)), 'MEMBER');
  IF cardinality(held) > 1
     AND NOT coalesce((SELECT a.rolsuper FROM pg_catalog.pg_roles AS a WHERE a.rolname = session_user), false) THEN
    RAISE EXCEPTION 'login % is a member of several consumers'' roles (%): a login must be granted one consumer''s role only, whatever role it sets', session_user, held
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN session_login_holds.consumer = ANY (held);
END
$$;

CREATE OR REPLACE FUNCTION core.hold_fence(job text, consumer_name text) RETURNS TABLE (fingerprint uuid)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
  SELECT p.fingerprint FROM core.consumer_roles AS c
    JOIN core.processed_jobs AS p ON p.consumer_id = c.id
   WHERE c.consumer = consumer_name AND p.job_id = job AND core.session_login_holds(consumer_name)
     FOR KEY SHARE OF p
$$;

CREATE OR REPLACE FUNCTION core.hold_pending_dead_letter(consumer_name text, job text, fingerprint bytea)
RETURNS TABLE (id uuid, error_kind text)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
  SELECT d.id, d.error_kind FROM core.dead_letters AS d
   WHERE d.consumer = consumer_name AND d.job_id = job AND d.body_fingerprint = fingerprint
     AND d.status = 'pending_review' AND core.session_login_holds(consumer_name)
     FOR SHARE OF d
$$;

-- A follow-up commits only with its parent's fence. The outbox's insert policy (0019) checks that
-- this transaction wrote the parent's fence when the row goes in; core.withdraw_own_fences (the
-- harness's way to drop the fences of a batch's unreached records, whose works never ran) could
-- remove it afterwards, and the follow-up would commit without a parent: a job id its consumer
-- could then fill again with any body, and an outbox row (then an undelivered dead letter) for a
-- job that never ran. It now refuses to withdraw a fence that a follow-up written by this
-- transaction names (created_at is the transaction's start, which a consumer cannot write), and, as
-- the other definers, acts only for a consumer whose role the session's login alone holds.
CREATE OR REPLACE FUNCTION core.withdraw_own_fences(consumer text, job_ids text[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
  parent    text;
  withdrawn integer;
BEGIN
  IF NOT core.session_login_holds(withdraw_own_fences.consumer) THEN
    RETURN 0;
  END IF;
  SELECT o.parent_job_id INTO parent FROM core.outbox AS o
   WHERE o.consumer = withdraw_own_fences.consumer AND o.parent_job_id = ANY (withdraw_own_fences.job_ids)
     AND o.created_at = now()
   LIMIT 1;
  IF parent IS NOT NULL THEN
    RAISE EXCEPTION 'the fence of job % of % cannot be withdrawn: a follow-up this transaction wrote names it as its parent', parent, withdraw_own_fences.consumer
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  DELETE FROM core.processed_jobs AS f
   USING core.consumer_roles AS c
   WHERE c.consumer = withdraw_own_fences.consumer
     AND f.consumer_id = c.id
     AND f.job_id = ANY (withdraw_own_fences.job_ids)
     AND f.xmin = xid(pg_current_xact_id());
  GET DIAGNOSTICS withdrawn = ROW_COUNT;
  RETURN withdrawn;
END
$$;
