-- Function logins, created on deploy (SPEC §9). Each deployed function logs in as its own user,
-- granted exactly one of the group roles of migration 0003. The migrate function calls this once
-- per login after migrating, with the user name from that login's secret and a SCRAM-SHA-256
-- verifier computed from its password on the client: the password itself never reaches the
-- server, its statement log or pg_stat_statements.
--
-- Only the migrator (the owner of this function) may call it: EXECUTE is revoked from PUBLIC.
-- It runs with the caller's rights, so creating a role still needs CREATEROLE (the RDS master
-- user has it).

CREATE FUNCTION core.provision_login(login name, password_verifier text, member_of name) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
DECLARE
  group_roles constant name[] := ARRAY['jobfence_consumer', 'jobfence_ops', 'jobfence_cleanup']::name[];
  existing    record;
  outcome     text;
  other       name;
BEGIN
  IF member_of IS NULL OR NOT member_of = ANY (group_roles) THEN
    RAISE EXCEPTION 'a login can only be granted one of %, not %', group_roles, member_of
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF login IS NULL OR login = ANY (group_roles) OR login = current_user OR login LIKE 'pg\_%' OR login LIKE 'rds\_%' OR login = 'rdsadmin' THEN
    RAISE EXCEPTION 'login % is reserved: choose a user name of its own', login
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- A plaintext password here would be stored as given; accept only a verifier.
  IF password_verifier IS NULL OR password_verifier !~ '^SCRAM-SHA-256\$[0-9]+:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$' THEN
    RAISE EXCEPTION 'password_verifier must be a SCRAM-SHA-256 verifier, never a plaintext password'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;

  SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls
    INTO existing FROM pg_roles WHERE rolname = login;
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

  EXECUTE format('GRANT %I TO %I', member_of, login);
  -- Exactly one role: a login moved from one kind of function to another loses the old grants.
  FOREACH other IN ARRAY group_roles LOOP
    IF other <> member_of AND pg_has_role(login, other, 'MEMBER') THEN
      EXECUTE format('REVOKE %I FROM %I', other, login);
    END IF;
  END LOOP;
  RETURN outcome;
END
$$;

REVOKE ALL ON FUNCTION core.provision_login(name, text, name) FROM PUBLIC;
