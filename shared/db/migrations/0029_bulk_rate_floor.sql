-- A bulk operation's pace has a floor (issue 34): at least 0.01 rows per second, one row every 100
-- seconds, as the API's request schema says (API_LIMITS.minRatePerSecond).
--
-- The CHECK of 0012 took any rate above 0. A start with 1e-40 was accepted (202), and every chunk
-- then rolled back: the pause after it, rows / rate seconds, was out of PostgreSQL's interval range,
-- and after ten such failures the operation ended `failed` with nothing done and a database error as
-- its reason. With 1e-46, below the smallest `real`, the INSERT itself failed (underflow).
--
-- The column is `real`: 0.01 is stored as 0.0099999998, so the floor is compared as a `real` too.
--
-- An operation still running below the floor could never finish: it is failed here, saying why.
-- Finished operations are an audit record that never changes (0012's guard), so rows below the floor
-- may remain among them: the constraint is added NOT VALID, which checks every row written from now
-- on (new operations, and each update of a running one) and leaves the record as it was.

UPDATE core.bulk_operations
   SET status = 'failed',
       finished_at = now(),
       last_error = format('its rate, %s rows per second, is below the floor of 0.01 (migration 0029)', rate_per_second)
 WHERE status = 'running' AND rate_per_second < real '0.01';

ALTER TABLE core.bulk_operations DROP CONSTRAINT bulk_operations_rate;
ALTER TABLE core.bulk_operations
  ADD CONSTRAINT bulk_operations_rate CHECK (rate_per_second >= real '0.01' AND rate_per_second <= 1000) NOT VALID;
