-- The follow-up key check reads its pattern the same whatever the caller's settings (issue 31).
--
-- core.follow_up_key_valid (migration 0019) is an SQL function whose body is parsed when it runs,
-- under the caller's standard_conforming_strings. Since the server enforces the fence transaction's
-- guard, a work may set standard_conforming_strings off for its session (the session resets before
-- the connection is reused); its pattern's backslashes were then read as escapes, the pattern
-- refused every key, and each follow-up of that work failed as a retryable error. Pinned here, as
-- its search_path already is (the function is not inlined either way).
ALTER FUNCTION core.follow_up_key_valid(text) SET standard_conforming_strings = on;
