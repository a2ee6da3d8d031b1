-- The fence's transaction commits only through the harness's COMMIT (issue 31): a guard the server
-- enforces, in place of the statement scanner the harness ran over the work's SQL.
--
-- The harness opens a fence transaction with one message: BEGIN, a set_config of
-- `jobfence.fence_scope` (transaction-local: the role and search_path the transaction began with,
-- which the harness reads back from it), and the fence insert. Each fence row inserted while that marker is set queues a deferred
-- constraint trigger, fired at COMMIT (and at PREPARE TRANSACTION, or at a SET CONSTRAINTS ALL
-- IMMEDIATE), which requires `jobfence.commit_checked` to hold the transaction's own id. Only
-- core.fence_commit_check sets it, and the harness sends that check and its COMMIT as one message.
-- Any other COMMIT of the transaction, however spelled, fails at the server, and the fence rolls back
-- with the half-done work: a COMMIT the work sends, COMMIT AND CHAIN, END, PREPARE TRANSACTION. A
-- COMMIT inside a DO block or a procedure PostgreSQL already refuses inside a transaction block, and
-- a function cannot commit at all.
--
-- A fence inserted without the marker (a test's fixture, a seed, a person's INSERT) queues no
-- trigger: the WHEN clause is read as the row goes in, so those rows cost nothing at COMMIT.
--
-- core.fence_commit_check also keeps the check of migration 0008 (the transaction being committed
-- is the one that inserted the fences, JF001) and adds one for batch-mates: the role and search_path
-- the transaction commits with must be those it began with (JF003). In batch-commit mode the records
-- share the transaction, and one work's SET LOCAL ROLE or search_path would otherwise reach a later
-- record's work; the batch then fails without a culprit and each record is redone alone, where the
-- work that changed them fails.
--
-- This guards against the work's mistakes, not against hostile code: the settings are placeholders
-- any role can set, and the work runs in the harness's own process.
--
-- Cost: one set_config per transaction, a WHEN clause per fence row, and at COMMIT one PL/pgSQL
-- call per fence row (constraint triggers are row triggers) and the check itself, which replaces
-- core.assert_fence_transaction on the COMMIT. No round trip: each rides on a message the harness
-- sends anyway.

-- The harness's COMMIT check. `began` is the scope the BEGIN message read (the harness sends it
-- back as a literal: a work's RESET ALL resets the setting, not the literal); `scope` is the one the
-- caller has now, computed in the caller's context with the same expression
-- (shared/db/queries/begin-with-fences.ts): the function's own search_path is fixed, so it could not
-- read the caller's.
CREATE FUNCTION core.fence_commit_check(expected xid8, began text, scope text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF pg_current_xact_id_if_assigned() IS DISTINCT FROM expected THEN
    RAISE EXCEPTION 'the transaction being committed is not the fence transaction % (it is %)',
      expected, coalesce(pg_current_xact_id_if_assigned()::text, 'one without writes')
      USING ERRCODE = 'JF001';
  END IF;
  IF began IS DISTINCT FROM scope THEN
    RAISE EXCEPTION 'the fence transaction began as % and would commit as %: the work changed its role or search_path and did not restore it',
      began, scope
      USING ERRCODE = 'JF003';
  END IF;
  PERFORM set_config('jobfence.commit_checked', expected::text, true);
END
$$;

REVOKE ALL ON FUNCTION core.fence_commit_check(xid8, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.fence_commit_check(xid8, text, text) TO jobfence_consumer;

-- The deferred check: the transaction ending now passed core.fence_commit_check. Trigger functions
-- are not checked for EXECUTE when they fire; nobody needs to call it. It runs once per fence row at
-- COMMIT, so it pins no search_path (a SET clause costs a settings save and restore per call) and
-- names everything by schema instead; it runs with the inserting role's own rights.
CREATE FUNCTION core.fence_commit_required() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF pg_catalog.current_setting('jobfence.commit_checked', true)
       IS DISTINCT FROM pg_catalog.pg_current_xact_id()::pg_catalog.text THEN
    RAISE EXCEPTION 'the fence transaction of job % may be committed by the harness only: it is rolled back',
      NEW.job_id
      USING ERRCODE = 'JF002',
            HINT = 'the work runs inside the harness''s transaction and must not end it (COMMIT, END, PREPARE TRANSACTION) or run SET CONSTRAINTS ALL IMMEDIATE; the harness commits when the work returns';
  END IF;
  RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION core.fence_commit_required() FROM PUBLIC;

CREATE CONSTRAINT TRIGGER fence_commit_by_harness
  AFTER INSERT ON core.processed_jobs
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW
  WHEN (pg_catalog.current_setting('jobfence.fence_scope', true) <> '')
  EXECUTE FUNCTION core.fence_commit_required();
