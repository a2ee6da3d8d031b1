/**
 * Which roles of a cluster are jobfence's, and as what. Roles are cluster-wide while a database
 * registers only its own consumers, so a consumer's group role is one registered here or, for a
 * database beside this one, any role named like one (`jobfence_consumer_…`) that is a member of
 * `jobfence_consumer`. Pure.
 */
import type { CatalogSnapshot } from "../db/catalog.ts";
import { CONSUMER_BASE_ROLE, SHARED_ROLES } from "../db/queries/provision-login.ts";

const CONSUMER_ROLE_PREFIX = `${CONSUMER_BASE_ROLE}_`;

/** The jobfence roles of a snapshot. */
export interface RoleKinds {
  /** The owner of `core`; its admin memberships in the roles it created are expected. */
  readonly migrator: string | undefined;
  /** `jobfence_ops`, `jobfence_cleanup` and `jobfence_consumer`: no consumer's, every deployment's. */
  readonly shared: ReadonlySet<string>;
  /** Each consumer's group role (existing ones). */
  readonly consumerRoles: ReadonlySet<string>;
  /** Registered here: group role → consumer. */
  readonly registered: ReadonlyMap<string, string>;
  /** The shared roles and the consumers' roles. */
  readonly groupRoles: ReadonlySet<string>;
  /** Roles that may log in and are members of a group role (the migrator aside). */
  readonly logins: ReadonlySet<string>;
}

/** Sorts the roles of `snapshot` into {@link RoleKinds}. */
export function classifyRoles(snapshot: CatalogSnapshot): RoleKinds {
  const existing = new Map(snapshot.roles.map((r) => [r.name, r]));
  const shared = new Set([...SHARED_ROLES, CONSUMER_BASE_ROLE].filter((name) => existing.has(name)));
  const registered = new Map((snapshot.consumerRoles ?? []).map((c) => [c.role, c.consumer]));
  const consumerRoles = new Set<string>([...registered.keys()].filter((name) => existing.has(name)));
  for (const m of snapshot.memberships) {
    if (m.role === CONSUMER_BASE_ROLE && m.member.startsWith(CONSUMER_ROLE_PREFIX)) {
      if (existing.get(m.member)?.canLogin === false) consumerRoles.add(m.member);
    }
  }
  const groupRoles = new Set([...shared, ...consumerRoles]);
  const logins = new Set<string>();
  for (const m of snapshot.memberships) {
    if (!groupRoles.has(m.role) || m.member === snapshot.migrator || groupRoles.has(m.member)) continue;
    if (existing.get(m.member)?.canLogin) logins.add(m.member);
  }
  return { migrator: snapshot.migrator, shared, consumerRoles, registered, groupRoles, logins };
}

/** The distinct roles `member` is a direct member of, sorted. */
export function membershipsOf(snapshot: CatalogSnapshot, member: string): string[] {
  return [...new Set(snapshot.memberships.filter((m) => m.member === member).map((m) => m.role))].sort();
}
