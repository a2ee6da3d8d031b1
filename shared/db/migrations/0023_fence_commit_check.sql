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
-- Then, when the work sent any statement, it resets the session (core.reset_fence_session) before
-- the COMMIT, so nothing the work changed of the pooled connection reaches the next job: inside the
-- transaction, so the harness's message stays `SELECT check; COMMIT` (no more statements, no more
-- results to read, no transaction after the COMMIT). A COMMIT that then fails rolls the resets back
-- with everything else; the harness's ROLLBACK is followed by core.reset_fence_session, outside.
--
-- This guards against the work's mistakes, not against hostile code: the settings are placeholders
-- any role can set, and the work runs in the harness's own process.
--
-- Cost: one set_config per transaction, a WHEN clause per fence row, and at COMMIT one PL/pgSQL
-- call per fence row (constraint triggers are row triggers), the check itself (it replaces
-- core.assert_fence_transaction on the COMMIT) and the resets. No round trip: each rides on a
-- message the harness sends anyway.

-- What a work may have changed of its pooled session, undone: settings (RESET ALL leaves those the
-- connection started with at their startup values, and does not touch role), the session's user (a
-- superuser login may have changed it), the role (RESET ROLE
-- returns to the one the connection started with), LISTEN, session advisory locks, cursors WITH
-- HOLD, temporary objects, prepared statements (the client's record of its own prepared statements
-- must then be cleared too). DISCARD ALL would do it all but cannot run inside a transaction or a
-- function. It pins no search_path: RESET ALL and RESET ROLE must reach the caller's session.
CREATE FUNCTION core.reset_fence_session() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  -- First: it also resets the role, which RESET ROLE then returns to the connection's own.
  RESET SESSION AUTHORIZATION;
  RESET ALL;
  RESET ROLE;
  UNLISTEN *;
  PERFORM pg_catalog.pg_advisory_unlock_all();
  -- Not the portal running this call, which PostgreSQL leaves open.
  EXECUTE 'CLOSE ALL';
  EXECUTE 'DISCARD TEMP';
  EXECUTE 'DEALLOCATE ALL';
END
$$;

REVOKE ALL ON FUNCTION core.reset_fence_session() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.reset_fence_session() TO jobfence_consumer;

-- The harness's COMMIT check. `began` is the scope the BEGIN message read (the harness sends it
-- back as a literal: a work's RESET ALL resets the setting, not the literal); `scope` is the one the
-- caller has now, computed in the caller's context with the same expression
-- (shared/db/queries/begin-with-fences.ts). It pins no search_path (its resets must reach the
-- caller's session, and a pinned one would be restored over them at its return); it names
-- everything by schema instead.
CREATE FUNCTION core.fence_commit_check(expected xid8, began text, scope text, reset boolean, fences text[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  -- JF001 unless the open transaction is the one that inserted the fences (migration 0008).
  PERFORM core.assert_fence_transaction(expected);
  -- JF004 unless every fence the harness expects to commit is still there: the work may not
  -- withdraw its own (core.withdraw_own_fences is the batch harness's, for records it did not reach).
  IF (SELECT pg_catalog.count(*) FROM core.processed_jobs AS p
       WHERE p.job_id OPERATOR(pg_catalog.=) ANY (fences)
         AND p.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(expected))
     IS DISTINCT FROM pg_catalog.cardinality(fences)::pg_catalog.int8 THEN
    RAISE EXCEPTION 'a fence of transaction % was withdrawn by its work: it is rolled back', expected
      USING ERRCODE = 'JF004';
  END IF;
  IF began IS DISTINCT FROM scope THEN
    RAISE EXCEPTION 'the fence transaction began as % and would commit as %: the work changed its role or search_path (in a batch: also a setting, or made a temporary relation) and did not restore it',
      began, scope
      USING ERRCODE = 'JF003';
  END IF;
  IF reset THEN
    PERFORM core.reset_fence_session();
  END IF;
  -- After the resets: RESET ALL would reset it too.
  PERFORM pg_catalog.set_config('jobfence.commit_checked', expected::pg_catalog.text, true);
END
$$;

REVOKE ALL ON FUNCTION core.fence_commit_check(xid8, text, text, boolean, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.fence_commit_check(xid8, text, text, boolean, text[]) TO jobfence_consumer;

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
