/**
 * What the catalogs say about the ways a role reaches objects beyond its own privileges: views
 * (which read their tables with their owner's rights), rules on tables (whose actions run with the
 * table owner's), triggers (whose SECURITY DEFINER function runs
 * as its owner), inheritance and partitions (a query on a parent reads and changes its children with
 * the parent's privileges checked only), and foreign keys whose ON DELETE / ON UPDATE action changes
 * another table's rows as that table's owner. Besides, the privileges granted on PostgreSQL's own
 * objects after the database was made (against `pg_init_privs`) and on large objects, which no
 * schema holds. Read by `readCatalog` with its search path; checked by shared/doctor/check-reach.ts.
 */
import type { CatalogPrivilege } from "./catalog-privilege.ts";
import type { Queryable } from "./queryable.ts";

/** A view (or materialized view) outside the system schemas. */
export interface CatalogView {
  /** `billing.open_invoices` */
  readonly name: string;
  readonly owner: string;
  /** `security_invoker` (PostgreSQL 15+): it reads its tables with the caller's rights. */
  readonly securityInvoker: boolean;
  /** The relations its query names, schema-qualified, sorted. */
  readonly reads: readonly string[];
}

/** A rule on a table (not a view's) outside the system schemas: its actions run as the table's owner. */
export interface CatalogRule {
  readonly table: string;
  readonly name: string;
  readonly owner: string;
  /** The relations its actions name, schema-qualified, sorted (the table itself left out). */
  readonly reads: readonly string[];
}

/** A user trigger (enabled) on a table outside the system schemas. */
export interface CatalogTrigger {
  readonly table: string;
  readonly name: string;
  /** Its function's signature, schema-qualified (`billing.mirror()`). */
  readonly function: string;
  readonly securityDefiner: boolean;
  readonly functionOwner: string;
}

/** `child` inherits `parent` (a partition of it, or a plain inheritance child). */
export interface CatalogInheritance {
  readonly child: string;
  readonly parent: string;
  readonly partition: boolean;
}

/** A referential action of a foreign key. */
export type ReferentialAction = "NO ACTION" | "RESTRICT" | "CASCADE" | "SET NULL" | "SET DEFAULT";

/** A foreign key of `table` to `references`, outside the system schemas. */
export interface CatalogForeignKey {
  readonly table: string;
  readonly name: string;
  readonly references: string;
  readonly onDelete: ReferentialAction;
  readonly onUpdate: ReferentialAction;
}

/** Everything {@link readReach} reads. */
export interface CatalogReach {
  readonly views: readonly CatalogView[];
  readonly rules: readonly CatalogRule[];
  readonly triggers: readonly CatalogTrigger[];
  readonly inheritance: readonly CatalogInheritance[];
  readonly foreignKeys: readonly CatalogForeignKey[];
  /**
   * Privileges on objects of `pg_catalog` and `information_schema` (tables, their columns,
   * functions) that their ACL has and `pg_init_privs` (what initdb and extensions set) does not,
   * and every privilege on a large object (target `large object`, object its oid).
   */
  readonly systemPrivileges: readonly CatalogPrivilege[];
}

/**
 * A function's signature, schema-qualified: `regprocedure` leaves out the schema of a function on
 * the search path (`pg_catalog, public` here), so `public.f()` would read `f()`.
 */
export function signatureSql(proc: string, schema: string): string {
  return `CASE WHEN pg_function_is_visible(${proc}.oid) THEN quote_ident(${schema}.nspname) || '.' ELSE '' END || ${proc}.oid::regprocedure::text`;
}

const USER_SCHEMA = (n: string) => `${n}.nspname !~ '^pg_' AND ${n}.nspname <> 'information_schema'`;
// pg_init_privs has no rows for information_schema, whose views PUBLIC reads by design: its grants to roles only.
const SYSTEM_SCHEMA = (n: string) =>
  `(${n}.nspname = 'pg_catalog' OR (${n}.nspname = 'information_schema' AND a.grantee <> 0))`;
const GRANTEE = "CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END";

const VIEWS_SQL = `
  SELECT n.nspname || '.' || c.relname AS name, pg_get_userbyid(c.relowner) AS owner,
         EXISTS (SELECT 1 FROM unnest(c.reloptions) o
                  WHERE lower(o) IN ('security_invoker=true', 'security_invoker=on', 'security_invoker=1',
                                     'security_invoker=yes')) AS "securityInvoker",
         ARRAY(SELECT DISTINCT rn.nspname || '.' || rc.relname
                 FROM pg_rewrite r
                 JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                                 AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> c.oid
                 JOIN pg_class rc ON rc.oid = d.refobjid JOIN pg_namespace rn ON rn.oid = rc.relnamespace
                WHERE r.ev_class = c.oid
                ORDER BY 1) AS reads
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE ${USER_SCHEMA("n")} AND c.relkind IN ('v', 'm')`;

const RULES_SQL = `
  SELECT n.nspname || '.' || c.relname AS "table", r.rulename AS name, pg_get_userbyid(c.relowner) AS owner,
         ARRAY(SELECT DISTINCT rn.nspname || '.' || rc.relname
                 FROM pg_depend d
                 JOIN pg_class rc ON rc.oid = d.refobjid JOIN pg_namespace rn ON rn.oid = rc.relnamespace
                WHERE d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                  AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> c.oid
                ORDER BY 1) AS reads
    FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE ${USER_SCHEMA("n")} AND c.relkind IN ('r', 'p', 'f')`;

const TRIGGERS_SQL = `
  SELECT n.nspname || '.' || c.relname AS "table", t.tgname AS name, ${signatureSql("p", "pn")} AS function,
         p.prosecdef AS "securityDefiner", pg_get_userbyid(p.proowner) AS "functionOwner"
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_proc p ON p.oid = t.tgfoid JOIN pg_namespace pn ON pn.oid = p.pronamespace
   WHERE ${USER_SCHEMA("n")} AND NOT t.tgisinternal AND t.tgenabled <> 'D'`;

// pg_inherits also links partitioned indexes: tables only.
const INHERITANCE_SQL = `
  SELECT cn.nspname || '.' || c.relname AS child, pn.nspname || '.' || p.relname AS parent,
         c.relispartition AS partition
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace cn ON cn.oid = c.relnamespace
    JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace pn ON pn.oid = p.relnamespace
   WHERE c.relkind IN ('r', 'p', 'f')`;

const ACTION = (column: string) => `CASE ${column} WHEN 'r' THEN 'RESTRICT' WHEN 'c' THEN 'CASCADE'
  WHEN 'n' THEN 'SET NULL' WHEN 'd' THEN 'SET DEFAULT' ELSE 'NO ACTION' END`;

const FOREIGN_KEYS_SQL = `
  SELECT DISTINCT n.nspname || '.' || c.relname AS "table", k.conname AS name,
         rn.nspname || '.' || r.relname AS "references",
         ${ACTION("k.confdeltype")} AS "onDelete", ${ACTION("k.confupdtype")} AS "onUpdate"
    FROM pg_constraint k
    JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_class r ON r.oid = k.confrelid JOIN pg_namespace rn ON rn.oid = r.relnamespace
   WHERE k.contype = 'f' AND ${USER_SCHEMA("n")}`;

/** The privileges of `acl` that `init` (what initdb or an extension set, else the default) lacks. */
const GRANTED_SINCE = (initPrivs: string) => `
  NOT EXISTS (SELECT 1 FROM aclexplode(${initPrivs}) b
               WHERE b.grantee = a.grantee AND b.privilege_type = a.privilege_type)`;
const INIT_PRIVS = (classid: string, oid: string, sub: string, fallback: string) => `coalesce(
  (SELECT i.initprivs FROM pg_init_privs i WHERE i.classoid = '${classid}'::regclass AND i.objoid = ${oid}
      AND i.objsubid = ${sub}), ${fallback})`;
// A column has no default ACL: without an initial one, every privilege on it was granted since.
const NO_ACL = "NULL::aclitem[]";

const SYSTEM_PRIVILEGES_SQL = `
  SELECT CASE WHEN c.relkind = 'S' THEN 'sequence' ELSE 'table' END AS target, n.nspname AS schema,
         n.nspname || '.' || c.relname AS object, NULL AS "column", ${GRANTEE} AS grantee,
         a.privilege_type AS privilege, a.is_grantable AS grantable
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) a
   WHERE ${SYSTEM_SCHEMA("n")} AND c.relacl IS NOT NULL AND a.grantee <> c.relowner
     AND ${GRANTED_SINCE(INIT_PRIVS("pg_class", "c.oid", "0", `acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner)`))}
  UNION ALL
  SELECT 'column', n.nspname, n.nspname || '.' || c.relname, t.attname, ${GRANTEE}, a.privilege_type, a.is_grantable
    FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace,
         aclexplode(t.attacl) a
   WHERE ${SYSTEM_SCHEMA("n")} AND t.attacl IS NOT NULL AND t.attnum > 0 AND a.grantee <> c.relowner
     AND ${GRANTED_SINCE(INIT_PRIVS("pg_class", "c.oid", "t.attnum", NO_ACL))}
  UNION ALL
  SELECT 'function', n.nspname, ${signatureSql("p", "n")}, NULL, ${GRANTEE}, a.privilege_type, a.is_grantable
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace, aclexplode(p.proacl) a
   WHERE ${SYSTEM_SCHEMA("n")} AND p.proacl IS NOT NULL AND a.grantee <> p.proowner
     AND ${GRANTED_SINCE(INIT_PRIVS("pg_proc", "p.oid", "0", "acldefault('f', p.proowner)"))}
  UNION ALL
  SELECT 'large object', 'pg_largeobject', l.oid::text, NULL, ${GRANTEE}, a.privilege_type, a.is_grantable
    FROM pg_largeobject_metadata l, aclexplode(l.lomacl) a
   WHERE l.lomacl IS NOT NULL AND a.grantee <> l.lomowner`;

/** Reads {@link CatalogReach} through `client` (any role), on the caller's search path. */
export async function readReach(client: Queryable): Promise<CatalogReach> {
  const rowsOf = async <T extends object>(sql: string): Promise<T[]> => (await client.query<T>(sql)).rows;
  const systemPrivileges = (
    await rowsOf<CatalogPrivilege & { column: string | null }>(SYSTEM_PRIVILEGES_SQL)
  ).map(({ column, ...rest }) => (column === null ? rest : { ...rest, column }));
  return {
    views: await rowsOf<CatalogView>(VIEWS_SQL),
    rules: await rowsOf<CatalogRule>(RULES_SQL),
    triggers: await rowsOf<CatalogTrigger>(TRIGGERS_SQL),
    inheritance: await rowsOf<CatalogInheritance>(INHERITANCE_SQL),
    foreignKeys: await rowsOf<CatalogForeignKey>(FOREIGN_KEYS_SQL),
    systemPrivileges,
  };
}
