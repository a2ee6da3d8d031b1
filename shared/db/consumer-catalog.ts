/**
 * The description of what one consumer's own migration set creates: its schema(s) with their
 * tables, columns, constraints, indexes, triggers, functions and types, every privilege granted in
 * them, its group role, and any privilege that role holds outside them. It is the consumer's
 * counterpart of `core-catalog.txt`: committed beside the consumer (`functions/<consumer>/schema.txt`
 * here), proven equal to a freshly migrated database by the schema snapshot test, refreshed with
 * `npm run schema:snapshot` and reviewed with the migration that changes it.
 *
 * Which schemas are the consumer's: the schema named after it (its name with `-` as `_`, shortened
 * with a digest like its role's when long: `award-points` → `award_points`), and any other schema,
 * `core` and `public` aside, that its group role owns or holds a privilege on. Both, because a
 * migration set may spread its tables over several schemas, and a schema it forgot to grant would
 * otherwise drop out of the description silently. `core` and `public` are shared by every
 * deployment: what the role holds there is listed as "role privileges elsewhere", not described
 * whole.
 *
 * The read is impure (catalog queries); {@link describeConsumerSchema} and
 * {@link renderConsumerSchema} are pure. Everything is printed by PostgreSQL's own deparsers with
 * a fixed search path, one fact per line in code-point order, so the text is the same on every
 * supported server version and whatever the database is called.
 */
import { readFileSync } from "node:fs";
import { type CatalogPrivilege, type CatalogSnapshot, readCatalog } from "./catalog.ts";
import {
  type CatalogSection,
  definerLine,
  factKey,
  parseSections,
  policyLine,
  privilegeLine,
  roleLine,
  rowSecurityLine,
  sqlIdentifier,
} from "./catalog-description.ts";
import { consumerIdentifier, consumerRoleName } from "./queries/provision-login.ts";
import type { Queryable } from "./queryable.ts";

/** Schemas every deployment shares: never a consumer's own, whatever its role holds there. */
const SHARED_SCHEMAS: readonly string[] = ["core", "public"];

/** The definition sections, read per schema. */
export const CONSUMER_DEFINITION_SECTIONS = [
  "columns",
  "constraints",
  "indexes",
  "triggers",
  "functions",
  "types",
  "views",
] as const;
export type ConsumerDefinitionSection = (typeof CONSUMER_DEFINITION_SECTIONS)[number];

/** The sections, in the order the text lists them. */
export const CONSUMER_SCHEMA_SECTIONS = [
  "schemas",
  "relations",
  ...CONSUMER_DEFINITION_SECTIONS,
  "security definer functions",
  "row level security",
  "policies",
  "table privileges",
  "column privileges",
  "function privileges",
  "schema privileges",
  "role",
  "role privileges elsewhere",
] as const;
export type ConsumerSchemaSection = (typeof CONSUMER_SCHEMA_SECTIONS)[number];

/** One-line facts by section. */
export type ConsumerSchemaDescription = Readonly<{
  readonly consumer: string;
  readonly sections: Readonly<Record<ConsumerSchemaSection, readonly string[]>>;
}>;

/** Everything {@link describeConsumerSchema} needs, read at one moment. */
export interface ConsumerCatalogSnapshot {
  readonly consumer: string;
  /** Its group role (`consumerRoleName`). */
  readonly role: string;
  /** Its schemas (see the module comment), sorted. */
  readonly schemas: readonly string[];
  /** The service's schemas it declares it works on: checked against its declaration, not described. @default none */
  readonly shared?: readonly string[];
  /** The whole database's catalog (privileges, relations, functions, policies, roles). */
  readonly catalog: CatalogSnapshot;
  /** The definitions in its schemas, one line each. */
  readonly definitions: Readonly<Record<ConsumerDefinitionSection, readonly string[]>>;
}

/** The schema named after `consumer`: its name with `-` as `_` (long names take a digest). */
export function consumerSchemaName(consumer: string): string {
  return consumerIdentifier("", consumer);
}

/**
 * The schemas of `consumer` in `catalog`, by the rule of the module comment, but for `shared`: the
 * service's schemas its definition declares it works on (shared/doctor/declared-data.ts), which are
 * the service's migration tool's, not described with the consumer's own.
 */
export function consumerSchemas(
  catalog: CatalogSnapshot,
  consumer: string,
  shared: readonly string[] = [],
): string[] {
  const role = consumerRoleName(consumer);
  const named = consumerSchemaName(consumer);
  const schemas = catalog.schemas
    .filter(
      (s) =>
        s.name === named ||
        s.owner === role ||
        catalog.privileges.some((p) => p.target === "schema" && p.object === s.name && p.grantee === role),
    )
    .map((s) => s.name)
    .filter((name) => !SHARED_SCHEMAS.includes(name) && (name === named || !shared.includes(name)));
  return schemas.sort(byCodePoint);
}

/**
 * The output of `pg_get_indexdef` and friends names an object without its schema when the schema
 * is on the search path: read with a fixed one, as the core catalog is.
 */
const DESCRIBE_SEARCH_PATH = "pg_catalog, public";

/** The consumer's schemas' oids: every definition query is over `$1`, their names. */
const IN_SCHEMAS = "(SELECT oid FROM pg_namespace WHERE nspname = ANY ($1::text[]))";

const DEFINITIONS_SQL: Readonly<Record<ConsumerDefinitionSection, string>> = {
  // Identity and generated columns are part of a column's definition: printed as declared.
  columns: `
    SELECT c.oid::regclass::text || '.' || quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
           || CASE a.attidentity WHEN 'a' THEN ' GENERATED ALWAYS AS IDENTITY'
                                 WHEN 'd' THEN ' GENERATED BY DEFAULT AS IDENTITY' ELSE '' END
           || CASE WHEN a.attgenerated <> ''
                   THEN ' GENERATED ALWAYS AS (' || pg_get_expr(d.adbin, d.adrelid) || ')'
                        || CASE a.attgenerated WHEN 's' THEN ' STORED' ELSE ' VIRTUAL' END
                   ELSE coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '') END
      FROM pg_attribute a
      JOIN pg_class c ON c.oid = a.attrelid
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE c.relnamespace IN ${IN_SCHEMAS} AND c.relkind IN ('r', 'p', 'f')
       AND a.attnum > 0 AND NOT a.attisdropped
     ORDER BY c.oid::regclass::text COLLATE "C", a.attnum`,
  // contype 'n' (catalogued NOT NULL, PostgreSQL 18+) is already in the columns.
  constraints: `
    SELECT CASE WHEN conrelid <> 0 THEN conrelid::regclass::text ELSE 'domain ' || contypid::regtype::text END
           || ' ' || quote_ident(conname) || ': ' || pg_get_constraintdef(oid, true)
      FROM pg_constraint
     WHERE connamespace IN ${IN_SCHEMAS} AND contype <> 'n'`,
  indexes: `
    SELECT pg_get_indexdef(i.indexrelid)
      FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
     WHERE c.relnamespace IN ${IN_SCHEMAS}`,
  triggers: `
    SELECT pg_get_triggerdef(t.oid, true)
           || CASE t.tgenabled WHEN 'O' THEN '' WHEN 'D' THEN ' [DISABLED]' WHEN 'R' THEN ' [ENABLE REPLICA]'
                               ELSE ' [ENABLE ALWAYS]' END
      FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
     WHERE c.relnamespace IN ${IN_SCHEMAS} AND NOT t.tgisinternal`,
  // A body as a digest: a changed body shows as a changed line without filling the file.
  functions: `
    SELECT p.oid::regprocedure::text || ' '
           || CASE WHEN p.prokind = 'a' THEN 'aggregate' ELSE md5(pg_get_functiondef(p.oid)) END
      FROM pg_proc p WHERE p.pronamespace IN ${IN_SCHEMAS}`,
  // Enums, domains, ranges and standalone composite types (a table's row type is its columns).
  types: `
    SELECT t.oid::regtype::text || ' ' ||
           CASE t.typtype
             WHEN 'e' THEN 'ENUM (' || coalesce((SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder)
                                                   FROM pg_enum e WHERE e.enumtypid = t.oid), '') || ')'
             WHEN 'd' THEN 'DOMAIN ' || format_type(t.typbasetype, t.typtypmod)
                           || CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END
                           || coalesce(' DEFAULT ' || t.typdefault, '')
             WHEN 'r' THEN 'RANGE'
             WHEN 'm' THEN 'MULTIRANGE'
             ELSE 'COMPOSITE (' || coalesce((SELECT string_agg(quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
                                               FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped), '') || ')'
           END
      FROM pg_type t
     WHERE t.typnamespace IN ${IN_SCHEMAS}
       AND (t.typtype IN ('e', 'd', 'r', 'm')
            OR (t.typtype = 'c' AND (SELECT c.relkind FROM pg_class c WHERE c.oid = t.typrelid) = 'c'))`,
  views: `
    SELECT c.oid::regclass::text || ' ' || CASE c.relkind WHEN 'm' THEN 'MATERIALIZED ' ELSE '' END
           || md5(pg_get_viewdef(c.oid, true))
      FROM pg_class c WHERE c.relnamespace IN ${IN_SCHEMAS} AND c.relkind IN ('v', 'm')`,
};

/** A deparsed definition on one line (constraint expressions may span several). */
function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, " ");
}

/** Code-point order: the same on every machine, whatever the database's collation. */
function byCodePoint(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * Reads what {@link describeConsumerSchema} needs through `client`, connected as the migrator (or
 * any role that may read the catalogs; every query is one any role may run). Runs no transaction
 * of its own, so it may read inside one (a rolled-back drift); the session's search path is
 * restored afterwards. `catalog`, when given, is used instead of reading it again (the doctor's,
 * read through the same client); `shared`, the service's schemas the consumer declares, are left out.
 */
export async function readConsumerCatalog(
  client: Queryable,
  consumer: string,
  catalog?: CatalogSnapshot,
  shared: readonly string[] = [],
): Promise<ConsumerCatalogSnapshot> {
  catalog ??= await readCatalog(client);
  const schemas = consumerSchemas(catalog, consumer, shared);
  const { rows: pathRows } = await client.query<{ path: string }>(
    "SELECT current_setting('search_path') AS path",
  );
  const restore = () =>
    client.query("SELECT set_config('search_path', $1, false)", [pathRows[0]?.path ?? ""]);
  await client.query("SELECT set_config('search_path', $1, false)", [DESCRIBE_SEARCH_PATH]);
  const definitions = {} as Record<ConsumerDefinitionSection, string[]>;
  try {
    for (const section of CONSUMER_DEFINITION_SECTIONS) {
      const { rows } = await client.query<{ line: string }>(
        `SELECT line FROM (${DEFINITIONS_SQL[section]}) AS s(line)`,
        [schemas],
      );
      const lines = rows.map((r) => oneLine(r.line));
      // Columns keep their table's order (a reordered table is a change); the rest is a set.
      definitions[section] = section === "columns" ? lines : lines.sort(byCodePoint);
    }
  } catch (error) {
    // In an aborted transaction the restore fails too; the read's error is the one to report.
    await restore().catch(() => {});
    throw error;
  }
  await restore();
  return { consumer, role: consumerRoleName(consumer), schemas, shared, catalog, definitions };
}

/** The description of the consumer's schemas in `snapshot`. Pure. */
export function describeConsumerSchema(snapshot: ConsumerCatalogSnapshot): ConsumerSchemaDescription {
  const { catalog, role, schemas, shared = [] } = snapshot;
  const mine = <T extends { readonly schema: string }>(rows: readonly T[]) =>
    rows.filter((row) => schemas.includes(row.schema));
  const sorted = (lines: string[]) => lines.sort(byCodePoint);
  // The migrator's name differs between environments (a test superuser, the deployed migrator):
  // what matters is whether an object is the migrator's or someone else's.
  const owner = (name: string) => (name === catalog.migrator ? "migrator" : sqlIdentifier(name));
  const privileges = mine(catalog.privileges);
  const ofTarget = (...targets: CatalogPrivilege["target"][]) =>
    sorted(privileges.filter((p) => targets.includes(p.target)).map(privilegeLine));
  const roleRow = catalog.roles.find((r) => r.name === role);
  const registered = catalog.consumerRoles?.find((r) => r.role === role);
  return {
    consumer: snapshot.consumer,
    sections: {
      schemas: sorted(
        catalog.schemas
          .filter((s) => schemas.includes(s.name))
          .map((s) => `${s.name} owner=${owner(s.owner)}`),
      ),
      relations: sorted(mine(catalog.relations).map((r) => `${r.name} ${r.kind} owner=${owner(r.owner)}`)),
      ...snapshot.definitions,
      "security definer functions": sorted(
        mine(catalog.functions)
          .filter((f) => f.securityDefiner)
          .map(definerLine),
      ),
      "row level security": sorted(
        mine(catalog.relations)
          .filter((r) => r.rowSecurity || r.forceRowSecurity)
          .map(rowSecurityLine),
      ),
      policies: sorted(
        catalog.policies.filter((p) => schemas.some((s) => p.table.startsWith(`${s}.`))).map(policyLine),
      ),
      "table privileges": ofTarget("table", "sequence"),
      "column privileges": ofTarget("column"),
      "function privileges": ofTarget("function"),
      "schema privileges": ofTarget("schema"),
      role: sorted([
        roleRow ? roleLine(roleRow) : `${role} missing`,
        // What the role is a member of, not who is a member of it: its members are the logins of
        // one deployment, which the migrations do not create. Grantors are the migrator's name.
        ...dedupe(
          catalog.memberships
            .filter((m) => m.member === role)
            .map(
              (m) => `${role} member of ${sqlIdentifier(m.role)}${m.adminOption ? " WITH ADMIN OPTION" : ""}`,
            ),
        ),
        registered ? `${role} registered for consumer ${registered.consumer}` : `${role} not registered`,
      ]),
      "role privileges elsewhere": sorted(
        catalog.privileges
          .filter((p) => p.grantee === role && !schemas.includes(p.schema) && !shared.includes(p.schema))
          // The database's name is the environment's: its privileges are named by kind alone.
          .map((p) => (p.target === "database" ? { ...p, object: "DATABASE" } : p))
          .map(privilegeLine),
      ),
    },
  };
}

function dedupe(lines: readonly string[]): string[] {
  return [...new Set(lines)];
}

/** The description as the committed text: a title line, then `## <section>`, its lines, a blank line. */
export function renderConsumerSchema(description: ConsumerSchemaDescription): string {
  return [
    `# consumer ${description.consumer}`,
    "",
    ...CONSUMER_SCHEMA_SECTIONS.flatMap((section) => [`## ${section}`, ...description.sections[section], ""]),
  ].join("\n");
}

/**
 * The committed-text description of `consumer`'s schemas in the database `client` is connected
 * to: read, described and rendered, ready for a file snapshot
 * (of the consumer's `functions/<name>/schema.txt`).
 */
export async function consumerSchemaText(
  client: Queryable,
  consumer: string,
  shared: readonly string[] = [],
): Promise<string> {
  return renderConsumerSchema(
    describeConsumerSchema(await readConsumerCatalog(client, consumer, undefined, shared)),
  );
}

/** Reads the committed text back (`# consumer <name>`, then its sections); throws on another shape. */
export function parseConsumerSchema(text: string): ConsumerSchemaDescription {
  const [title = "", ...rest] = text.split("\n");
  const consumer = /^# consumer (\S+)$/.exec(title)?.[1];
  if (consumer === undefined) {
    throw new Error(`consumer schema description: the first line must be "# consumer <name>", not ${title}`);
  }
  return {
    consumer,
    sections: parseSections(
      rest.join("\n"),
      CONSUMER_SCHEMA_SECTIONS,
      `consumer ${consumer}'s schema description`,
    ),
  };
}

/**
 * The committed description in `file` (a consumer's `schema.txt`); undefined when there is no such
 * file (the consumer's description was never committed). Throws on a file it cannot read or parse.
 */
export function loadConsumerSchema(file: string): ConsumerSchemaDescription | undefined {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    if ((error as { code?: unknown }).code === "ENOENT") return undefined;
    throw error;
  }
  return parseConsumerSchema(text);
}

/**
 * What identifies a fact of a consumer's description across a change (see `factKey`, which it
 * extends): a schema's, relation's, type's or view's name; the role's attributes, and its
 * registration, one fact each. Memberships and privileges have none: each is a fact of its own.
 */
export function consumerFactKey(section: ConsumerSchemaSection, line: string): string | undefined {
  const firstWord = () => (line.indexOf(" ") < 0 ? undefined : line.slice(0, line.indexOf(" ")));
  switch (section) {
    case "schemas":
    case "relations":
    case "types":
    case "views":
      return firstWord();
    case "role":
      if (/ (login=|missing$)/.test(line)) return "attributes";
      if (/ (registered for consumer \S+|not registered)$/.test(line)) return "registration";
      return undefined;
    case "role privileges elsewhere":
      return undefined;
    default:
      return factKey(section satisfies CatalogSection, line);
  }
}
