/** A privilege as the catalog read (catalog.ts) gives it. */

/** What a privilege is on; `large object` only among the snapshot's `reach.systemPrivileges` (schema `pg_largeobject`). */
export type PrivilegeTarget =
  | "database"
  | "schema"
  | "table"
  | "sequence"
  | "column"
  | "function"
  | "large object";

/**
 * One privilege one role (or PUBLIC) holds on one object of this database, as its ACL grants it;
 * the owner's own privileges are left out. An object without an ACL has its type's default one
 * (`acldefault`), so a function nobody revoked EXECUTE on shows EXECUTE to PUBLIC.
 */
export interface CatalogPrivilege {
  readonly target: PrivilegeTarget;
  /** The object's schema; the database's name for `database`. */
  readonly schema: string;
  /**
   * The object as the description names it: `core`, `core.dead_letters`,
   * `core.hold_fence(text,text)`; for a column, its table.
   */
  readonly object: string;
  /** The column, for `column`. */
  readonly column?: string;
  /** A role name, or `PUBLIC`. */
  readonly grantee: string;
  /** SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER, MAINTAIN, EXECUTE, USAGE, CREATE, CONNECT, TEMPORARY. */
  readonly privilege: string;
  readonly grantable: boolean;
}
