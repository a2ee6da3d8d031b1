-- Least-privilege roles (SPEC §9). They are NOLOGIN group roles: each deployed function logs in as
-- its own user that is granted exactly one of them. None owns an object or may run DDL; the role
-- that applies these migrations (the migrator) owns everything.
--
-- Roles are cluster-wide while grants are per database, so several databases of one cluster (tests,
-- or environments sharing an instance) share the role names. Creation is therefore idempotent and
-- tolerant of a concurrent creator; an existing role with dangerous attributes is refused rather
-- than silently altered.

DO $$
DECLARE
  role_name text;
  found     record;
BEGIN
  FOREACH role_name IN ARRAY ARRAY['jobfence_consumer', 'jobfence_ops', 'jobfence_cleanup'] LOOP
    BEGIN
      EXECUTE format('CREATE ROLE %I NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS', role_name);
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL; -- created earlier, or by a migrator of another database at the same moment
    END;
    SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls
      INTO found FROM pg_roles WHERE rolname = role_name;
    IF found.rolsuper OR found.rolcreatedb OR found.rolcreaterole OR found.rolreplication OR found.rolbypassrls THEN
      RAISE EXCEPTION 'role % exists with privileges beyond what jobfence grants it', role_name
        USING ERRCODE = 'insufficient_privilege';
    END IF;
  END LOOP;
END
$$;

-- Before PostgreSQL 15 every role could create objects in the public schema; close that here so
-- "no role but the migrator can run DDL" holds on every supported version.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON SCHEMA core FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA core FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA core FROM PUBLIC;

GRANT USAGE ON SCHEMA core TO jobfence_consumer, jobfence_ops, jobfence_cleanup;

-- Consumer (the harness and the backstop drain): check and insert the fence inside the work
-- transaction; record dead letters idempotently. It reads back only what an idempotent dead-letter
-- write needs to find the row it collided with, never payloads or resolutions.
GRANT SELECT, INSERT ON core.processed_jobs TO jobfence_consumer;
GRANT INSERT ON core.dead_letters TO jobfence_consumer;
GRANT SELECT (id, consumer, job_id, status, created_at) ON core.dead_letters TO jobfence_consumer;

-- Ops (the dead-letter API): read dead letters, perform the status transition, and look up a fence
-- to resolve a replay as superseded. It cannot insert or delete either table.
GRANT SELECT ON core.dead_letters TO jobfence_ops;
GRANT UPDATE (status, resolved_at, resolved_by, discard_reason) ON core.dead_letters TO jobfence_ops;
GRANT SELECT ON core.processed_jobs TO jobfence_ops;

-- Cleanup (TTL cleanup): find and delete expired fences; nothing else.
GRANT SELECT (job_id, consumer, expires_at) ON core.processed_jobs TO jobfence_cleanup;
GRANT DELETE ON core.processed_jobs TO jobfence_cleanup;
