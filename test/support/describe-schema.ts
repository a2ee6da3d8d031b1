/**
 * A deterministic text description of the jobfence schema, read from the catalogs: tables and
 * columns, constraints, indexes, triggers, functions, privileges and role attributes. Compared with
 * a committed snapshot so any drift between migrations and the reviewed schema fails the build.
 *
 * Catalog queries rather than pg_dump: the output must be identical on every PostgreSQL version the
 * suite runs on (15 and 18), and pg_dump's text differs between versions.
 */
import type pg from "pg";

const SECTIONS: Array<{ title: string; sql: string }> = [
  {
    title: "columns",
    sql: `SELECT c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
              || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
              || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
            FROM pg_attribute a
            JOIN pg_class c ON c.oid = a.attrelid
            LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
           WHERE c.relnamespace = 'core'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
           ORDER BY c.relname, a.attnum`,
  },
  {
    // contype 'n' (catalogued NOT NULL, PostgreSQL 18+) is already covered by the columns section.
    title: "constraints",
    sql: `SELECT conrelid::regclass::text || ' ' || conname || ': ' || pg_get_constraintdef(oid, true)
            FROM pg_constraint
           WHERE connamespace = 'core'::regnamespace AND contype <> 'n'
           ORDER BY conrelid::regclass::text, conname`,
  },
  {
    title: "indexes",
    sql: `SELECT pg_get_indexdef(indexrelid)
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
           WHERE c.relnamespace = 'core'::regnamespace
           ORDER BY c.relname`,
  },
  {
    title: "triggers",
    sql: `SELECT pg_get_triggerdef(t.oid, true)
            FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
           WHERE c.relnamespace = 'core'::regnamespace AND NOT t.tgisinternal
           ORDER BY c.relname, t.tgname`,
  },
  {
    title: "functions",
    sql: `SELECT p.oid::regprocedure::text || ' ' || md5(pg_get_functiondef(p.oid))
            FROM pg_proc p WHERE p.pronamespace = 'core'::regnamespace
           ORDER BY 1`,
  },
  {
    title: "table privileges",
    sql: `SELECT grantee || ' ' || table_name || ' ' || string_agg(privilege_type, ', ' ORDER BY privilege_type)
            FROM information_schema.role_table_grants
           WHERE table_schema = 'core' AND grantee LIKE 'jobfence\\_%'
           GROUP BY grantee, table_name ORDER BY 1`,
  },
  {
    title: "column privileges",
    sql: `SELECT grantee || ' ' || table_name || ' ' || privilege_type || ' (' || string_agg(column_name, ', ' ORDER BY column_name) || ')'
            FROM information_schema.column_privileges
           WHERE table_schema = 'core' AND grantee LIKE 'jobfence\\_%'
             -- table-level grants also appear per column; keep only the column-only ones
             AND NOT EXISTS (SELECT 1 FROM information_schema.role_table_grants g
                              WHERE g.table_schema = 'core' AND g.table_name = column_privileges.table_name
                                AND g.grantee = column_privileges.grantee
                                AND g.privilege_type = column_privileges.privilege_type)
           GROUP BY grantee, table_name, privilege_type ORDER BY 1`,
  },
  {
    title: "schema privileges",
    sql: `SELECT r.rolname || ' core ' || concat_ws(', ',
                   CASE WHEN has_schema_privilege(r.rolname, 'core', 'USAGE') THEN 'USAGE' END,
                   CASE WHEN has_schema_privilege(r.rolname, 'core', 'CREATE') THEN 'CREATE' END)
            FROM pg_roles r WHERE r.rolname LIKE 'jobfence\\_%' ORDER BY 1`,
  },
  {
    title: "roles",
    sql: `SELECT rolname || ' login=' || rolcanlogin || ' super=' || rolsuper || ' createdb=' || rolcreatedb
              || ' createrole=' || rolcreaterole || ' bypassrls=' || rolbypassrls
            FROM pg_roles WHERE rolname LIKE 'jobfence\\_%' ORDER BY 1`,
  },
];

/** Describes the schema `core` and the jobfence roles as seen by `client`. */
export async function describeSchema(client: pg.ClientBase): Promise<string> {
  const parts: string[] = [];
  for (const section of SECTIONS) {
    const { rows } = await client.query<{ line: string }>(`SELECT line FROM (${section.sql}) AS s(line)`);
    parts.push(`## ${section.title}`, ...rows.map((r) => r.line), "");
  }
  return parts.join("\n");
}
