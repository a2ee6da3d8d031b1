-- A dead letter in another consumer's name is refused before any trigger looks at that consumer's
-- rows (issue 32, an adversary's finding).
--
-- Row-level security refuses a consumer's INSERT of a row whose consumer is not its own
-- (consumer_own_dead_letters, migration 0014), but only once the BEFORE triggers have run, and two
-- of them run with their owner's rights and look at rows of NEW.consumer: the outlived-copy check
-- (0021) key-share-locks that consumer's fence of the job, and the replay link (0025) share-locks
-- its pending rows of the body. A refused insert still waited on those locks and took them: a
-- consumer could tell from a lock wait, instead of an immediate refusal, that another consumer
-- held a fence or had a dead letter of a guessed body being replayed, and the locks its refused
-- insert held could deadlock the other consumer's bulk replay.
--
-- This trigger fires first (BEFORE triggers fire in name order), with the inserting role's own
-- rights, and applies the policy's test at once: nothing of another consumer is read or locked.
-- It binds whom the policy binds: a member of jobfence_consumer that is not exempt from row-level
-- security (a superuser, a role with BYPASSRLS, the table's owner, which also covers a definer
-- function writing for another consumer, core.outbox_undelivered).

CREATE FUNCTION core.dead_letters_as_own_consumer() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
  -- Tested one after the other: the session's consumer is asked only of a session the policy binds
  -- (a superuser is a member of every consumer's role, and has no one consumer).
  IF EXISTS (
       SELECT 1 FROM pg_roles AS r
        WHERE r.rolname = current_user
          AND (r.rolsuper OR r.rolbypassrls
               OR r.oid = (SELECT c.relowner FROM pg_class AS c WHERE c.oid = TG_RELID))) THEN
    RETURN NEW;
  END IF;
  IF NOT pg_has_role(current_user, 'jobfence_consumer', 'MEMBER') THEN
    RETURN NEW;
  END IF;
  IF NEW.consumer IS DISTINCT FROM (SELECT core.session_consumer()) THEN
    RAISE EXCEPTION 'new row violates row-level security policy for table "dead_letters"'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END
$$;

-- A trigger's function needs no EXECUTE of the role whose INSERT fires it: nobody may call it.
REVOKE ALL ON FUNCTION core.dead_letters_as_own_consumer() FROM PUBLIC;

CREATE TRIGGER dead_letters_as_own_consumer
  BEFORE INSERT ON core.dead_letters
  FOR EACH ROW EXECUTE FUNCTION core.dead_letters_as_own_consumer();
