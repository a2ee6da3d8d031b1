/**
 * Configuration fields every jobfence function reads, defined once so each function refuses the
 * same bad values with the same message.
 */
import { z } from "zod";

/** A PostgreSQL connection string. */
export const databaseUrlField = z
  .string()
  .regex(/^postgres(ql)?:\/\//, "must be a postgres:// connection string");

/** A role to SET on each connection, for a login that does not inherit its jobfence role. */
export const dbRoleField = z
  .string()
  .regex(/^[a-z_][a-z0-9_]{0,62}$/, "must be a plain PostgreSQL role name");

/** The ops EventBridge bus (never a domain bus). */
export const opsBusNameField = z
  .string()
  .regex(/^[A-Za-z0-9._\-/]{1,256}$/, "must be an EventBridge bus name");

/** A consumer's name: lowercase letters, digits and dashes, starting with a letter, at most 63. */
export const CONSUMER_NAME = /^[a-z][a-z0-9-]{0,62}$/;
