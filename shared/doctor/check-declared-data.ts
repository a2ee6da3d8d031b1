/**
 * Consumers' privileges outside `core` against what each declares (declared-data.ts). jobfence
 * owns only `core`; a consumer works on its own schema (the one named after it, which its own
 * migration set made, compared with its schema.txt) and on the service's tables it declares:
 *
 * - a privilege a consumer's role holds that its consumer does not declare is a finding (and every
 *   privilege of a role whose consumer declares nothing);
 * - a declared table or schema that does not exist, or a declared privilege (with USAGE on the
 *   table's schema) its role lacks, is a finding;
 * - an object that several consumers' roles hold privileges on is a finding only when one of them
 *   does not declare it shared with the others. Declared sharing is not a finding.
 *
 * - a privilege on an object in another consumer's own schema, which that consumer does not declare
 *   shared with the holder, is a finding even when its own role holds nothing on it.
 *
 * PUBLIC's privileges, counted as every consumer's, are check-public-reach.ts's; what a consumer
 * reaches through objects that run as another role, check-reach.ts's. Pure.
 */
import type { CatalogPrivilege, CatalogSnapshot } from "../db/catalog.ts";
import { sqlIdentifier } from "../db/catalog-description.ts";
import { consumerRoleName } from "../db/queries/provision-login.ts";
import { revokeStatement } from "./check-privileges.ts";
import {
  type Coverage,
  consumersOf,
  declaredSharing,
  ownerSharing,
  sharesWith,
} from "./consumer-coverage.ts";
import type { DeclaredConsumerData } from "./declared-data.ts";
import { CHECK, type Finding } from "./findings.ts";

/** Inputs of {@link checkDeclaredData}. */
export interface DeclaredDataInput {
  readonly snapshot: CatalogSnapshot;
  /** Each consumer's declaration; a consumer not listed declares nothing. */
  readonly declarations: readonly DeclaredConsumerData[];
  /** Consumers known besides the declaring and registered ones (those of the migration sets). */
  readonly consumers?: readonly string[];
}

/** Every finding about consumers' privileges outside core against their declarations. */
export function checkDeclaredData(input: DeclaredDataInput): Finding[] {
  const { snapshot, declarations } = input;
  const { kinds, consumerOf, coverage, ownSchemas } = consumersOf(snapshot, declarations, input.consumers);
  const outside = snapshot.privileges.filter(
    (p) => p.target !== "database" && p.schema !== "core" && kinds.consumerRoles.has(p.grantee),
  );
  return [
    ...undeclared(outside, consumerOf, coverage),
    ...missingDeclared(snapshot, declarations, new Set(snapshot.roles.map((r) => r.name))),
    ...undeclaredSharing(outside, consumerOf, coverage),
    ...inOtherConsumersSchemas(outside, consumerOf, coverage, ownSchemas),
  ];
}

function where(p: CatalogPrivilege): string {
  return p.target === "column" ? `column ${p.object}.${p.column}` : `${p.target} ${p.object}`;
}

function undeclared(
  privileges: readonly CatalogPrivilege[],
  consumerOf: ReadonlyMap<string, string>,
  coverage: ReadonlyMap<string, Coverage>,
): Finding[] {
  const findings: Finding[] = [];
  for (const p of privileges) {
    const consumer = consumerOf.get(p.grantee);
    const cover = consumer === undefined ? undefined : coverage.get(consumer);
    if (declaredSharing(cover, p) !== null) continue;
    const whose = consumer === undefined ? undefined : `consumer ${consumer}`;
    const declare =
      whose === undefined
        ? `give the doctor the definition of ${p.grantee}'s consumer, declaring it in its data`
        : p.target === "function"
          ? `declare its schema in ${whose}'s data (schemas: { ${p.schema}: {} })`
          : p.target === "schema"
            ? `declare a table of ${p.schema} in ${whose}'s data`
            : `declare it in ${whose}'s data (tables: { "${p.object}": { privileges: ["${p.privilege}"] } })`;
    findings.push({
      check: CHECK.undeclaredPrivilege,
      where: where(p),
      what:
        `${p.grantee} holds ${p.privilege}${p.grantable ? " WITH GRANT OPTION" : ""}, which ` +
        `${whose === undefined ? "no consumer the doctor was given declares" : `${whose} does not declare`}: ` +
        "only what a consumer declares is known to be its to reach",
      todo: `${declare}, or ${revokeStatement(p)}`,
    });
  }
  return findings;
}

function holds(snapshot: CatalogSnapshot, role: string, object: string, privilege: string): boolean {
  return snapshot.privileges.some(
    (p) =>
      p.object === object &&
      p.privilege === privilege &&
      p.target !== "database" &&
      (p.grantee === role || p.grantee === "PUBLIC"),
  );
}

function missingDeclared(
  snapshot: CatalogSnapshot,
  declarations: readonly DeclaredConsumerData[],
  roles: ReadonlySet<string>,
): Finding[] {
  const findings: Finding[] = [];
  const schemas = new Set(snapshot.schemas.map((s) => s.name));
  const relations = new Set(snapshot.relations.map((r) => r.name));
  for (const { consumer, data } of declarations) {
    const role = consumerRoleName(consumer);
    if (!roles.has(role)) {
      findings.push({
        check: CHECK.declaredPrivilegeMissing,
        where: `role ${role}`,
        what: `consumer ${consumer} declares tables it works on, and its group role does not exist: it holds none of them`,
        todo: `run \`jobfence migrate\` with consumer ${consumer} (it creates the role), then the service's migrations that grant to it`,
      });
      continue;
    }
    const usage = new Set<string>();
    for (const [table, use] of Object.entries(data.tables ?? {}).sort(([a], [b]) => (a < b ? -1 : 1))) {
      usage.add(table.split(".")[0] as string);
      if (!relations.has(table)) {
        findings.push({
          check: CHECK.declaredDataMissing,
          where: `table ${table}`,
          what: `consumer ${consumer} declares it works on it, and it does not exist`,
          todo: `create it with the service's own migrations (run before the consumer starts), or remove it from ${consumer}'s data`,
        });
        continue;
      }
      for (const privilege of use.privileges) {
        if (holds(snapshot, role, table, privilege)) continue;
        findings.push({
          check: CHECK.declaredPrivilegeMissing,
          where: `table ${table}`,
          what: `consumer ${consumer} declares ${privilege} on it, which its role ${role} does not hold: its work would be refused`,
          todo: `GRANT ${privilege} ON ${table} TO ${sqlIdentifier(role)}, in the service's migrations (or remove ${privilege} from ${consumer}'s data)`,
        });
      }
    }
    for (const schema of Object.keys(data.schemas ?? {})) usage.add(schema);
    for (const schema of [...usage].sort()) {
      if (!schemas.has(schema)) {
        if (Object.hasOwn(data.schemas ?? {}, schema)) {
          findings.push({
            check: CHECK.declaredDataMissing,
            where: `schema ${schema}`,
            what: `consumer ${consumer} declares it works on it, and it does not exist`,
            todo: `create it with the service's own migrations, or remove it from ${consumer}'s data`,
          });
        }
        continue;
      }
      if (holds(snapshot, role, schema, "USAGE")) continue;
      findings.push({
        check: CHECK.declaredPrivilegeMissing,
        where: `schema ${schema}`,
        what: `consumer ${consumer} declares tables in it, and its role ${role} does not hold USAGE on it: it reaches none of them`,
        todo: `GRANT USAGE ON SCHEMA ${schema} TO ${sqlIdentifier(role)}, in the service's migrations`,
      });
    }
  }
  return findings;
}

function undeclaredSharing(
  privileges: readonly CatalogPrivilege[],
  consumerOf: ReadonlyMap<string, string>,
  coverage: ReadonlyMap<string, Coverage>,
): Finding[] {
  // The objects themselves (a schema's USAGE is not sharing its tables): who holds what on each.
  const byObject = new Map<string, { target: string; holders: Map<string, CatalogPrivilege> }>();
  for (const p of privileges) {
    if (p.target === "schema") continue;
    const entry = byObject.get(p.object) ?? { target: p.target, holders: new Map() };
    if (!entry.holders.has(p.grantee)) entry.holders.set(p.grantee, p);
    byObject.set(p.object, entry);
  }
  const findings: Finding[] = [];
  for (const [object, { target, holders }] of [...byObject].sort(([a], [b]) => (a < b ? -1 : 1))) {
    if (holders.size < 2) continue;
    for (const [role, p] of holders) {
      const consumer = consumerOf.get(role);
      const sharing = declaredSharing(consumer === undefined ? undefined : coverage.get(consumer), p);
      // Not declared at all: the undeclared privilege is the finding.
      if (sharing === null || sharing === true) continue;
      // An other holder that declares nothing is its own finding (undeclared) already.
      const others = [...holders].filter(([r, q]) => {
        const other = consumerOf.get(r);
        return (
          r !== role && declaredSharing(other === undefined ? undefined : coverage.get(other), q) !== null
        );
      });
      const refused = others
        .map(([r]) => r)
        .filter((r) => {
          const other = consumerOf.get(r);
          return sharing === undefined || other === undefined || !sharing.includes(other);
        });
      if (refused.length === 0) continue;
      const named = refused.map((r) => consumerOf.get(r) ?? r).sort();
      findings.push({
        check: CHECK.undeclaredSharing,
        where: `${target === "column" ? "table" : target} ${object}`,
        what: `${refused.sort().join(", ")} ${refused.length === 1 ? "holds" : "hold"} privileges on it too, and consumer ${consumer} does not declare sharing it with ${named.join(", ")}`,
        todo: `if the sharing is meant, declare it in ${consumer}'s data (shared: [${named.map((n) => `"${n}"`).join(", ")}], or true); otherwise revoke the others' privileges`,
      });
    }
  }
  return findings;
}

/**
 * A consumer's privilege on an object in another consumer's own schema, which it declares: a finding
 * unless that other consumer declares it shared with this one, whether or not its role holds anything
 * on it (when it does, {@link undeclaredSharing} reports it from its side).
 */
function inOtherConsumersSchemas(
  privileges: readonly CatalogPrivilege[],
  consumerOf: ReadonlyMap<string, string>,
  coverage: ReadonlyMap<string, Coverage>,
  ownSchemas: ReadonlyMap<string, string>,
): Finding[] {
  const findings: Finding[] = [];
  const seen = new Set<string>();
  for (const p of privileges) {
    const consumer = consumerOf.get(p.grantee);
    const owner = ownSchemas.get(p.schema);
    if (consumer === undefined || owner === undefined || owner === consumer || p.target === "schema")
      continue;
    // Not declared by the holder: the undeclared privilege is the finding.
    if (declaredSharing(coverage.get(consumer), p) === null) continue;
    const ownerRole = [...consumerOf].find(([, name]) => name === owner)?.[0];
    if (privileges.some((q) => q.object === p.object && q.grantee === ownerRole)) continue;
    if (sharesWith(ownerSharing(coverage.get(owner), p.object), consumer)) continue;
    const key = `${p.object} ${p.grantee}`;
    if (seen.has(key)) continue;
    seen.add(key);
    findings.push({
      check: CHECK.undeclaredSharing,
      where: `${p.target === "column" ? "table" : p.target} ${p.object}`,
      what:
        `${p.grantee} holds ${p.privilege} on it, in consumer ${owner}'s own schema, and ${owner} does not ` +
        `declare sharing it with ${consumer}: one consumer reaching another's own data acts as it`,
      todo: `if the sharing is meant, declare it in ${owner}'s data (tables: { "${p.object}": { privileges: [...], shared: ["${consumer}"] } }); otherwise ${revokeStatement(p)}`,
    });
  }
  return findings;
}
