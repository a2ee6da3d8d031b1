-- The session's consumer, looked up for a fraction of what it cost (issue 19, the throughput
-- targets).
--
-- Why: every statement on a row-level-secured table evaluates its policy's
-- `(SELECT core.session_consumer_id())` once. Until now that was a SQL function with its own
-- search_path, so PostgreSQL neither inlined it nor kept its plan: each statement planned it
-- afresh, and it called core.session_consumer() (a PL/pgSQL function joining the registry with
-- pg_roles) once per registry row it scanned. On this project's benchmark machine that was about
-- 70 µs of server time per statement, around a fifth of a fence insert. The lookup below is one
-- PL/pgSQL function whose single query keeps its plan for the session and reads no catalog view:
-- about 10 µs.
--
-- What it decides is unchanged, and still cannot be forged by the session:
-- * the consumers are the registry's rows whose group role the current role has USAGE of
--   (inherits, directly or through other roles); a registered role that no longer exists counts
--   for nobody, as the join with pg_roles made it before;
-- * a role acting for more than one consumer is refused (42501), naming them;
-- * every name is resolved under `search_path = pg_catalog, pg_temp`, and the role is found by
--   its exact name (to_regrole of the quoted identifier), so no object the session creates, a
--   temporary table named pg_roles included, takes part.
--
-- core.session_consumer() (the name, for the policies of dead letters, the attempt ledger and the
-- outbox) makes the same query for the name and refuses from its own answer (a second query could
-- see the memberships changed in between). Calling one from the other instead would cost each
-- statement a second function call (about 7 µs). Both keep their signatures, so the policies
-- (bound to the functions, not to their text) need no change.

CREATE OR REPLACE FUNCTION core.session_consumer_id() RETURNS smallint
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  ids   smallint[];
  names text[];
BEGIN
  SELECT array_agg(c.id) INTO ids
    FROM core.consumer_roles AS c
   WHERE pg_has_role(current_user, to_regrole(quote_ident(c.role_name)), 'USAGE');
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
BEGIN
  SELECT array_agg(c.consumer ORDER BY c.consumer) INTO names
    FROM core.consumer_roles AS c
   WHERE pg_has_role(current_user, to_regrole(quote_ident(c.role_name)), 'USAGE');
  IF cardinality(names) > 1 THEN
    RAISE EXCEPTION 'role % acts for several consumers (%): a login must be granted one consumer''s role only', current_user, names
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN names[1];
END
$$;
