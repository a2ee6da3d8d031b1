/**
 * Which consumer each consumer role is, and what each consumer may reach outside `core`: its own
 * schema (named after it), the schemas it declares whole and the tables it declares, each with whom
 * it shares them (declared-data.ts). The checks of declared data and of reach read it. Pure.
 */
import type { CatalogPrivilege, CatalogSnapshot } from "../db/catalog.ts";
import { consumerSchemaName } from "../db/consumer-catalog.ts";
import { consumerRoleName } from "../db/queries/provision-login.ts";
import type { DeclaredConsumerData, Sharing, TableUse } from "./declared-data.ts";
import { classifyRoles, type RoleKinds } from "./role-kinds.ts";

/** What a consumer may hold outside core: its declared tables, and schemas it works on whole. */
export interface Coverage {
  readonly tables: ReadonlyMap<string, TableUse>;
  /** Declared schemas, and its own (named after it, not shared). */
  readonly schemas: ReadonlyMap<string, { readonly shared?: Sharing }>;
}

/** The consumers a snapshot is checked against. */
export interface Consumers {
  readonly kinds: RoleKinds;
  /** Group role → consumer name, for every consumer known (registered, declaring, or of a set). */
  readonly consumerOf: ReadonlyMap<string, string>;
  /** Consumer name → what it may reach. */
  readonly coverage: ReadonlyMap<string, Coverage>;
  /** A consumer's own schema's name → the consumer. */
  readonly ownSchemas: ReadonlyMap<string, string>;
}

/** The consumers of `snapshot`: registered ones, `declarations`' and the `others` known. */
export function consumersOf(
  snapshot: CatalogSnapshot,
  declarations: readonly DeclaredConsumerData[],
  others: readonly string[] = [],
): Consumers {
  const kinds = classifyRoles(snapshot);
  const consumerOf = new Map(kinds.registered);
  for (const name of [...declarations.map((d) => d.consumer), ...others]) {
    consumerOf.set(consumerRoleName(name), name);
  }
  const coverage = new Map<string, Coverage>();
  for (const name of consumerOf.values()) coverage.set(name, coverageOf(name, undefined));
  for (const d of declarations) coverage.set(d.consumer, coverageOf(d.consumer, d));
  const ownSchemas = new Map([...coverage.keys()].map((name) => [consumerSchemaName(name), name]));
  return { kinds, consumerOf, coverage, ownSchemas };
}

function coverageOf(consumer: string, declared: DeclaredConsumerData | undefined): Coverage {
  const schemas = new Map<string, { readonly shared?: Sharing }>([[consumerSchemaName(consumer), {}]]);
  for (const [name, use] of Object.entries(declared?.data.schemas ?? {})) schemas.set(name, use);
  return { tables: new Map(Object.entries(declared?.data.tables ?? {})), schemas };
}

const RELATION_TARGETS: ReadonlySet<CatalogPrivilege["target"]> = new Set(["table", "sequence", "column"]);

/** The sharing a consumer declares for what `p` is on, or null when it does not declare it at all. */
export function declaredSharing(
  cover: Coverage | undefined,
  p: CatalogPrivilege,
): Sharing | undefined | null {
  if (cover === undefined) return null;
  // A table of its own schema may be declared, to share it: its declaration is the one that counts.
  const table = RELATION_TARGETS.has(p.target) ? cover.tables.get(p.object) : undefined;
  if (table?.privileges.includes(p.privilege as TableUse["privileges"][number])) return table.shared;
  const schema = cover.schemas.get(p.schema);
  if (schema !== undefined) return schema.shared;
  if (p.target === "schema") {
    const inIt = [...cover.tables.keys()].some((t) => t.startsWith(`${p.object}.`));
    return p.privilege === "USAGE" && inIt ? true : null;
  }
  if (!RELATION_TARGETS.has(p.target)) return null;
  const use = cover.tables.get(p.object);
  return use?.privileges.includes(p.privilege as TableUse["privileges"][number]) ? use.shared : null;
}

/** Whether `sharing` lets `consumer` hold it too. */
export function sharesWith(sharing: Sharing | undefined, consumer: string): boolean {
  return sharing === true || (sharing?.includes(consumer) ?? false);
}

/**
 * The sharing the consumer whose own schema holds `relation` declares for it: its table's, else its
 * schema's (its own is not shared unless it declares it whole).
 */
export function ownerSharing(cover: Coverage | undefined, relation: string): Sharing | undefined {
  const schema = relation.split(".")[0] as string;
  return cover?.tables.get(relation)?.shared ?? cover?.schemas.get(schema)?.shared;
}

/**
 * Why `consumer` may not reach `relation` (`schema.name`), or undefined when it may: it is in
 * another consumer's own schema and that consumer does not share it with this one, or it is not
 * in anything `consumer` declares (nor its own schema). Whatever privilege: the ways of reaching
 * it the reach checks follow (a view, a trigger, a parent, a foreign key) are not per privilege.
 */
export function reachProblem(consumers: Consumers, consumer: string, relation: string): string | undefined {
  const schema = relation.split(".")[0] as string;
  const owner = consumers.ownSchemas.get(schema);
  if (owner !== undefined && owner !== consumer) {
    return sharesWith(ownerSharing(consumers.coverage.get(owner), relation), consumer)
      ? undefined
      : `it is in consumer ${owner}'s own schema, and ${owner} does not declare sharing it with ${consumer}`;
  }
  const cover = consumers.coverage.get(consumer);
  if (cover?.schemas.has(schema) || cover?.tables.has(relation)) return undefined;
  return `consumer ${consumer} does not declare it`;
}

/** Each relation's privileges (its table's and its columns'), by object: read once per snapshot. */
const relationPrivileges = new WeakMap<CatalogSnapshot, Map<string, CatalogPrivilege[]>>();

function privilegesByRelation(snapshot: CatalogSnapshot): Map<string, CatalogPrivilege[]> {
  const known = relationPrivileges.get(snapshot);
  if (known !== undefined) return known;
  const index = new Map<string, CatalogPrivilege[]>();
  for (const p of snapshot.privileges) {
    if (!RELATION_TARGETS.has(p.target)) continue;
    const list = index.get(p.object);
    if (list === undefined) index.set(p.object, [p]);
    else list.push(p);
  }
  relationPrivileges.set(snapshot, index);
  return index;
}

/** The privileges `role` holds on `object` (a relation: its table's and its columns'), PUBLIC's included. */
export function privilegesOn(snapshot: CatalogSnapshot, role: string, object: string): Set<string> {
  return new Set(
    (privilegesByRelation(snapshot).get(object) ?? [])
      .filter((p) => p.grantee === role || p.grantee === "PUBLIC")
      .map((p) => p.privilege),
  );
}
