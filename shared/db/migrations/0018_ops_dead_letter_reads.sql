-- The ops role's reads of dead letters through a view, so the planner sees the table's statistics
-- (found by issue 19's full API benchmark).
--
-- Why: since migration 0014 core.dead_letters has row-level security, and PostgreSQL then lets
-- the planner use a column's statistics for a session that is subject to it only with leakproof
-- operators. ILIKE is not leakproof, so for jobfence_ops every message filter was estimated at a
-- default of about 100 rows, whatever the word: at 1,000,000 dead letters "timeout" matches
-- 351,749, the planner gathered them all through the trigram index and sorted them (2.9 s a page,
-- against 0.6 ms walking the time index newest first), and the list's rare-word check, which asks
-- the planner the same question, took every word for a rare one.
--
-- core.ops_dead_letters is every row and column of core.dead_letters, which jobfence_ops may
-- already read in full (its policy is USING (true) and it has SELECT on the table). The view runs
-- with its owner's rights (security_invoker off), and the owner, the migrator, owns the table and
-- is not subject to its row-level security, so a query through the view is planned with the
-- statistics. Through it a consumer's role would see every consumer's rows, so:
-- * only jobfence_ops is granted it;
-- * and it shows rows only to a current role that is jobfence_ops or has its privileges
--   (pg_has_role … 'USAGE'), because a grant nobody meant also reaches a view: a member of
--   pg_read_all_data (a common grant for read-only users) reads the table's rows under row-level
--   security, none, but would read every row through the view. The condition names no column, so
--   PostgreSQL evaluates it once, before the scan, and it hides no statistics from the planner (a
--   security_barrier view would).
-- Writes and single-row reads still go to the table.
--
-- A view's `*` is fixed when it is created, and it pins the types of the columns it shows: a
-- migration that adds a column to core.dead_letters, or changes one's type or collation, drops
-- and recreates this view.

CREATE VIEW core.ops_dead_letters WITH (security_invoker = false) AS
  SELECT * FROM core.dead_letters WHERE pg_catalog.pg_has_role('jobfence_ops', 'USAGE');

COMMENT ON VIEW core.ops_dead_letters IS
  'Every dead letter, for jobfence_ops''s filtered reads: planned with the table''s statistics, which row-level security withholds from a session subject to it (ILIKE is not leakproof).';

REVOKE ALL ON core.ops_dead_letters FROM PUBLIC;
GRANT SELECT ON core.ops_dead_letters TO jobfence_ops;
