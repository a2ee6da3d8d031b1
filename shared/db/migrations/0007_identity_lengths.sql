-- Tenant and correlation ids are bounded like job ids (SPEC §2's 255 characters). Both are B-tree
-- indexed in core.dead_letters, and a B-tree entry holds at most about 2.7 kB: an unbounded value
-- could make a dead letter impossible to write, and a failure that cannot be recorded is one that
-- vanishes. The envelope refuses longer ones (they are poison), and a poison message's identity
-- leaves an unusable one out, so these constraints only guard against writers that skip both.

ALTER TABLE core.dead_letters
  ADD CONSTRAINT dead_letters_tenant_id_length CHECK (char_length(tenant_id) <= 255),
  ADD CONSTRAINT dead_letters_correlation_id_length CHECK (char_length(correlation_id) <= 255);

ALTER TABLE core.processed_jobs
  ADD CONSTRAINT processed_jobs_tenant_id_length CHECK (char_length(tenant_id) <= 255);
