/**
 * What a database's catalogs say about jobfence's objects and roles, read with queries any role may
 * run: the schema `core`'s definitions, every privilege in the database (from the ACL columns with
 * `aclexplode`, not information_schema, whose privilege views show only what the current role may
 * see), roles and memberships (cluster-wide), definer functions, row-level security and policies.
 * The ops login reads all of it except the migration history, which only the migrator may read.
 *
 * The impure edge of the schema snapshot and the doctor: `catalog-description.ts` turns a snapshot
 * into the committed description of `core`, and `shared/doctor/` checks it.
 */

import type pg from "pg";
import type { CatalogPrivilege } from "./catalog-privilege.ts";
import { type CatalogReach, readReach, signatureSql } from "./catalog-reach.ts";
import type { Queryable } from "./queryable.ts";
import { withTransaction } from "./transaction.ts";

/** A role and the attributes that matter to jobfence. */
export interface CatalogRole {
  readonly name: string;
  readonly canLogin: boolean;
  readonly superuser: boolean;
  readonly createDb: boolean;
  readonly createRole: boolean;
  readonly replication: boolean;
  readonly bypassRls: boolean;
}

/** `member` is a member of `role` (pg_auth_members; one row per grantor since PostgreSQL 16). */
export interface CatalogMembership {
  readonly role: string;
  readonly member: string;
  readonly grantor: string;
  readonly adminOption: boolean;
}

export type { CatalogPrivilege, PrivilegeTarget } from "./catalog-privilege.ts";

/** A function (or procedure) outside the system schemas. */
export interface CatalogFunction {
  readonly schema: string;
  /** `core.hold_fence(text,text)` */
  readonly signature: string;
  readonly securityDefiner: boolean;
  /** Its `SET` clauses as PostgreSQL keeps them: `search_path=pg_catalog, core`. */
  readonly settings: readonly string[];
  readonly owner: string;
}

/** A table, view or sequence outside the system schemas. */
export interface CatalogRelation {
  readonly schema: string;
  /** `core.dead_letters` */
  readonly name: string;
  readonly kind: "table" | "view" | "sequence";
  readonly rowSecurity: boolean;
  readonly forceRowSecurity: boolean;
  readonly owner: string;
}

/** A row-level security policy. */
export interface CatalogPolicy {
  /** `core.dead_letters` */
  readonly table: string;
  readonly name: string;
  readonly command: "ALL" | "SELECT" | "INSERT" | "UPDATE" | "DELETE";
  readonly permissive: boolean;
  /** Role names (or PUBLIC), sorted. */
  readonly roles: readonly string[];
  readonly using: string | null;
  readonly withCheck: string | null;
}

/** A schema outside the system ones. */
export interface CatalogSchema {
  readonly name: string;
  readonly owner: string;
}

/** One applied migration, from `core.schema_migrations`. */
export interface AppliedMigrationRow {
  readonly set: string;
  readonly version: number;
  readonly name: string;
  readonly checksum: string;
}

/** The definition sections of `core` kept as the lines PostgreSQL's own deparsers print. */
export const DEFINITION_SECTIONS = ["columns", "constraints", "indexes", "triggers", "functions"] as const;
export type DefinitionSection = (typeof DEFINITION_SECTIONS)[number];

/** Everything the description and the doctor need, read at one moment. */
export interface CatalogSnapshot {
  /** `server_version_num`, e.g. 150020 or 180004. */
  readonly serverVersion: number;
  /** The role the snapshot was read as. */
  readonly readAs: string;
  /** The owner of schema `core`, which is the migrator; undefined when `core` does not exist. */
  readonly migrator: string | undefined;
  readonly roles: readonly CatalogRole[];
  readonly memberships: readonly CatalogMembership[];
  readonly privileges: readonly CatalogPrivilege[];
  readonly schemas: readonly CatalogSchema[];
  readonly relations: readonly CatalogRelation[];
  readonly functions: readonly CatalogFunction[];
  readonly policies: readonly CatalogPolicy[];
  /** Views, triggers, inheritance, foreign keys, and privileges on PostgreSQL's own objects. */
  readonly reach: CatalogReach;
  /** `core`'s columns, constraints, indexes, triggers and function bodies, one line each. */
  readonly definitions: Readonly<Record<DefinitionSection, readonly string[]>>;
  /**
   * `core.consumer_roles`: each registered consumer's group role and the queues its dead letters
   * may be replayed to (empty: none registered); undefined when unreadable.
   */
  readonly consumerRoles:
    | readonly { readonly consumer: string; readonly role: string; readonly queues: readonly string[] }[]
    | undefined;
  /** `core.schema_migrations`; undefined when the role may not read it (only the migrator may). */
  readonly migrationHistory: readonly AppliedMigrationRow[] | undefined;
}

/**
 * The output of `pg_get_indexdef` and friends names an object without its schema when the schema is
 * on the search path (the pg_trgm operator class in `public`, for one): read with a fixed path, so
 * the description does not depend on the session's.
 */
const DESCRIBE_SEARCH_PATH = "pg_catalog, public";

/** Schemas that are PostgreSQL's own. */
const USER_SCHEMA = "n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'";

/** A grantee oid as a name (0 is PUBLIC). */
const GRANTEE = "CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END";

const CONTEXT_SQL = `
  SELECT current_setting('server_version_num')::int AS server_version,
         current_user::text AS read_as,
         (SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'core') AS migrator,
         CASE WHEN to_regclass('core.schema_migrations') IS NULL THEN false
              ELSE has_table_privilege(to_regclass('core.schema_migrations'), 'SELECT') END AS history_readable,
         CASE WHEN to_regclass('core.consumer_roles') IS NULL THEN false
              ELSE has_table_privilege(to_regclass('core.consumer_roles'), 'SELECT') END AS registry_readable`;

const ROLES_SQL = `
  SELECT rolname AS name, rolcanlogin AS "canLogin", rolsuper AS superuser, rolcreatedb AS "createDb",
         rolcreaterole AS "createRole", rolreplication AS replication, rolbypassrls AS "bypassRls"
    FROM pg_roles`;

const MEMBERSHIPS_SQL = `
  SELECT r.rolname AS role, m.rolname AS member, coalesce(g.rolname, '') AS grantor, a.admin_option AS "adminOption"
    FROM pg_auth_members a
    JOIN pg_roles r ON r.oid = a.roleid
    JOIN pg_roles m ON m.oid = a.member
    LEFT JOIN pg_roles g ON g.oid = a.grantor`;

// Sequences have their own default ACL type ('s'); every other relation kind uses the table's ('r').
const PRIVILEGES_SQL = `
  SELECT 'database' AS target, d.datname::text AS schema, d.datname::text AS object, NULL AS "column",
         ${GRANTEE} AS grantee, a.privilege_type AS privilege, a.is_grantable AS grantable
    FROM pg_database d, aclexplode(coalesce(d.datacl, acldefault('d', d.datdba))) a
   WHERE d.datname = current_database() AND a.grantee <> d.datdba
  UNION ALL
  SELECT 'schema', n.nspname, n.nspname, NULL, ${GRANTEE}, a.privilege_type, a.is_grantable
    FROM pg_namespace n, aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
   WHERE ${USER_SCHEMA} AND a.grantee <> n.nspowner
  UNION ALL
  SELECT CASE WHEN c.relkind = 'S' THEN 'sequence' ELSE 'table' END, n.nspname, n.nspname || '.' || c.relname, NULL,
         ${GRANTEE}, a.privilege_type, a.is_grantable
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
         aclexplode(coalesce(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner))) a
   WHERE ${USER_SCHEMA} AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') AND a.grantee <> c.relowner
  UNION ALL
  SELECT 'column', n.nspname, n.nspname || '.' || c.relname, t.attname, ${GRANTEE}, a.privilege_type, a.is_grantable
    FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace,
         aclexplode(t.attacl) a
   WHERE ${USER_SCHEMA} AND t.attacl IS NOT NULL AND t.attnum > 0 AND NOT t.attisdropped
     AND a.grantee <> c.relowner
  UNION ALL
  SELECT 'function', n.nspname, ${signatureSql("p", "n")}, NULL, ${GRANTEE}, a.privilege_type, a.is_grantable
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
         aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
   WHERE ${USER_SCHEMA} AND a.grantee <> p.proowner`;

const SCHEMAS_SQL = `
  SELECT n.nspname AS name, pg_get_userbyid(n.nspowner) AS owner FROM pg_namespace n WHERE ${USER_SCHEMA}`;

const RELATIONS_SQL = `
  SELECT n.nspname AS schema, n.nspname || '.' || c.relname AS name,
         CASE WHEN c.relkind = 'S' THEN 'sequence' WHEN c.relkind IN ('v', 'm') THEN 'view' ELSE 'table' END AS kind,
         c.relrowsecurity AS "rowSecurity", c.relforcerowsecurity AS "forceRowSecurity",
         pg_get_userbyid(c.relowner) AS owner
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE ${USER_SCHEMA} AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')`;

const FUNCTIONS_SQL = `
  SELECT n.nspname AS schema, ${signatureSql("p", "n")} AS signature, p.prosecdef AS "securityDefiner",
         coalesce(p.proconfig, '{}') AS settings, pg_get_userbyid(p.proowner) AS owner
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
   WHERE ${USER_SCHEMA}`;

const POLICIES_SQL = `
  SELECT n.nspname || '.' || c.relname AS "table", p.polname AS name,
         CASE p.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT' WHEN 'w' THEN 'UPDATE'
                       WHEN 'd' THEN 'DELETE' ELSE 'ALL' END AS command,
         p.polpermissive AS permissive,
         ARRAY(SELECT CASE WHEN r = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(r)::text END FROM unnest(p.polroles) AS r) AS roles,
         pg_get_expr(p.polqual, p.polrelid) AS "using", pg_get_expr(p.polwithcheck, p.polrelid) AS "withCheck"
    FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid JOIN pg_namespace n ON n.oid = c.relnamespace`;

/**
 * `core`'s definitions, as PostgreSQL deparses them. Catalog queries rather than pg_dump: the text
 * must be identical on every PostgreSQL version the suite runs on (15 and 18), and pg_dump's is not.
 */
const DEFINITIONS_SQL: Readonly<Record<DefinitionSection, string>> = {
  columns: `
    SELECT c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
           || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
      FROM pg_attribute a
      JOIN pg_class c ON c.oid = a.attrelid
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE c.relnamespace = 'core'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
     ORDER BY c.relname COLLATE "C", a.attnum`,
  // contype 'n' (catalogued NOT NULL, PostgreSQL 18+) is already covered by the columns.
  constraints: `
    SELECT conrelid::regclass::text || ' ' || conname || ': ' || pg_get_constraintdef(oid, true)
      FROM pg_constraint
     WHERE connamespace = 'core'::regnamespace AND contype <> 'n'
     ORDER BY conrelid::regclass::text COLLATE "C", conname COLLATE "C"`,
  indexes: `
    SELECT pg_get_indexdef(indexrelid)
      FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
     WHERE c.relnamespace = 'core'::regnamespace
     ORDER BY c.relname COLLATE "C"`,
  // A trigger switched off by hand (ALTER TABLE … DISABLE TRIGGER) says so.
  triggers: `
    SELECT pg_get_triggerdef(t.oid, true)
           || CASE t.tgenabled WHEN 'O' THEN '' WHEN 'D' THEN ' [DISABLED]' WHEN 'R' THEN ' [ENABLE REPLICA]'
                               ELSE ' [ENABLE ALWAYS]' END
      FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
     WHERE c.relnamespace = 'core'::regnamespace AND NOT t.tgisinternal
     ORDER BY c.relname COLLATE "C", t.tgname COLLATE "C"`,
  functions: `
    SELECT p.oid::regprocedure::text || ' ' || md5(pg_get_functiondef(p.oid))
      FROM pg_proc p WHERE p.pronamespace = 'core'::regnamespace
     ORDER BY p.oid::regprocedure::text COLLATE "C"`,
};

/** A deparsed definition on one line (constraint and policy expressions may span several). */
function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, " ");
}

/** A pool: a snapshot is read on one of its connections. */
type PoolLike = Queryable & { connect(): Promise<pg.PoolClient> };
/** A client that says whether it is inside a transaction ('I': idle outside one). */
type ClientLike = Queryable & { getTransactionStatus(): string | null };

/**
 * Reads the snapshot through `client` (any role; see the module comment) as one consistent view.
 * Its dozen reads run in one REPEATABLE READ, READ ONLY transaction of their own, so a role created
 * or dropped by another session meanwhile is in all of them or in none (read one by one, a role
 * granted between the read of the roles and that of the memberships was a member nobody knew).
 * A client already inside a transaction (a test's rolled-back drift) reads in it, with the snapshot
 * its isolation gives; a pool lends one connection for the whole read. The search path is set for
 * the reads and the session's restored afterwards.
 */
export async function readCatalog(client: Queryable): Promise<CatalogSnapshot> {
  if (isClient(client)) {
    if (client.getTransactionStatus() !== "I") return readWithPath(client);
    return withTransaction(
      client as unknown as pg.ClientBase,
      readWithPath,
      "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
    );
  }
  if (isPool(client)) {
    const lent = await client.connect();
    try {
      return await readCatalog(lent);
    } finally {
      lent.release();
    }
  }
  return readWithPath(client);
}

const isClient = (q: Queryable): q is ClientLike =>
  typeof (q as Partial<ClientLike>).getTransactionStatus === "function";
// A pg.Client has connect() too (to open itself): only what is not a client is taken for a pool.
const isPool = (q: Queryable): q is PoolLike => typeof (q as Partial<PoolLike>).connect === "function";

async function readWithPath(client: Queryable): Promise<CatalogSnapshot> {
  const { rows: pathRows } = await client.query<{ path: string }>(
    "SELECT current_setting('search_path') AS path",
  );
  const restore = () =>
    client.query("SELECT set_config('search_path', $1, false)", [pathRows[0]?.path ?? ""]);
  await client.query("SELECT set_config('search_path', $1, false)", [DESCRIBE_SEARCH_PATH]);
  let snapshot: CatalogSnapshot;
  try {
    snapshot = await read(client);
  } catch (error) {
    // In an aborted transaction the restore fails too; the read's error is the one to report.
    await restore().catch(() => {});
    throw error;
  }
  await restore();
  return snapshot;
}

async function read(client: Queryable): Promise<CatalogSnapshot> {
  const rowsOf = async <T extends object>(sql: string): Promise<T[]> => (await client.query<T>(sql)).rows;
  const [context] = await rowsOf<{
    server_version: number;
    read_as: string;
    migrator: string | null;
    history_readable: boolean;
    registry_readable: boolean;
  }>(CONTEXT_SQL);
  if (!context) throw new Error("the catalog context query returned no row");
  const coreExists = context.migrator !== null;

  const definitions = Object.fromEntries(DEFINITION_SECTIONS.map((s) => [s, [] as string[]])) as Record<
    DefinitionSection,
    string[]
  >;
  if (coreExists) {
    for (const section of DEFINITION_SECTIONS) {
      const rows = await rowsOf<{ line: string }>(
        `SELECT line FROM (${DEFINITIONS_SQL[section]}) AS s(line)`,
      );
      definitions[section] = rows.map((r) => oneLine(r.line));
    }
  }
  const policies = (await rowsOf<CatalogPolicy>(POLICIES_SQL)).map((p) => ({
    ...p,
    roles: [...p.roles].sort(),
    using: p.using === null ? null : oneLine(p.using),
    withCheck: p.withCheck === null ? null : oneLine(p.withCheck),
  }));
  const privileges = (await rowsOf<CatalogPrivilege & { column: string | null }>(PRIVILEGES_SQL)).map(
    ({ column, ...rest }) => (column === null ? rest : { ...rest, column }),
  );
  return {
    serverVersion: context.server_version,
    readAs: context.read_as,
    migrator: context.migrator ?? undefined,
    roles: await rowsOf<CatalogRole>(ROLES_SQL),
    memberships: await rowsOf<CatalogMembership>(MEMBERSHIPS_SQL),
    privileges,
    schemas: await rowsOf<CatalogSchema>(SCHEMAS_SQL),
    relations: await rowsOf<CatalogRelation>(RELATIONS_SQL),
    functions: await rowsOf<CatalogFunction>(FUNCTIONS_SQL),
    policies,
    reach: await readReach(client),
    definitions,
    consumerRoles: context.registry_readable
      ? await rowsOf<{ consumer: string; role: string; queues: string[] }>(
          "SELECT consumer, role_name::text AS role, queues FROM core.consumer_roles",
        )
      : undefined,
    migrationHistory: context.history_readable
      ? await rowsOf<AppliedMigrationRow>(
          'SELECT migration_set AS "set", version, name, checksum FROM core.schema_migrations',
        )
      : undefined,
  };
}
