-- The email each notification was sent as: the provider's message id, which the consumer's step
-- records before the fence's transaction writes the row. Notifications recorded before emails were
-- sent have none. One email is one notification: the same message id twice is an error.

ALTER TABLE notify_user.notifications ADD COLUMN provider_message_id text
  CHECK (provider_message_id <> '');

ALTER TABLE notify_user.notifications
  ADD CONSTRAINT notifications_provider_message_id_key UNIQUE (provider_message_id);
