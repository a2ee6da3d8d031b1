/** What the doctor reports: one finding per thing that differs from what jobfence intends. */

/** The checks, each a kind of finding. */
export const CHECK = {
  /** `core` differs from the committed description of what the migrations create (shared/db/core-catalog.txt). */
  coreCatalog: "core-catalog",
  /**
   * A registered consumer's schemas differ from the committed description of what its migrations
   * create (functions/<consumer>/schema.txt), or it has none committed.
   */
  consumerSchema: "consumer-schema",
  /** A migration set's history differs from the migrations this code ships. */
  migrations: "migrations",
  /** A consumer's group role, or a login in a jobfence role, may log in when it should not, or is privileged. */
  roleAttributes: "role-attributes",
  /** A login is not a member of exactly one group role (or is of `jobfence_consumer` itself, or with ADMIN OPTION). */
  loginMemberships: "login-memberships",
  /** A group role is a member of a role it should not be (or a registered consumer's role is missing or not one of jobfence_consumer). */
  groupRoleMemberships: "group-role-memberships",
  /** A role other than a login, a consumer's group role or the migrator's admin grant is a member of a jobfence role. */
  foreignMembers: "foreign-members",
  /** A shared role (ops, cleanup, the base consumer role) holds a privilege outside `core`. */
  sharedRoleOutsideCore: "shared-role-outside-core",
  /** A consumer's role holds a privilege outside core that its consumer does not declare (its definition's `data`). */
  undeclaredPrivilege: "undeclared-privilege",
  /** A table or schema a consumer declares it works on does not exist. */
  declaredDataMissing: "declared-data-missing",
  /** A consumer's role lacks a privilege its consumer declares (or USAGE on a declared table's schema, or the role itself). */
  declaredPrivilegeMissing: "declared-privilege-missing",
  /** Several consumers' roles hold privileges on one object, and one of them does not declare it shared with the others. */
  undeclaredSharing: "undeclared-sharing",
  /**
   * A consumer reaches an object it does not declare (or another consumer's own, not shared with it)
   * through one that runs as another role: a SECURITY DEFINER function it may execute, a view
   * (not security_invoker) or a table with a rule it holds privileges on, a SECURITY DEFINER trigger of a table it writes,
   * a foreign key whose ON DELETE / ON UPDATE action changes another table as that table's owner.
   */
  reachAsAnotherRole: "reach-as-another-role",
  /** A table a consumer reads or writes has an inheritance child (or a partition elsewhere) it does not declare. */
  inheritedReach: "inherited-reach",
  /** PUBLIC holds a privilege outside core that a consumer may therefore use and does not declare. */
  publicReach: "public-reach",
  /** A consumer's role, or PUBLIC, holds a privilege on PostgreSQL's own objects granted after initdb, or on a large object. */
  systemPrivileges: "system-privileges",
  /** A login holds a privilege directly, not through its group role. */
  loginPrivileges: "login-privileges",
  /** PUBLIC holds a privilege in a consumer's schema: every role, every other consumer's included, has it. */
  publicPrivileges: "public-privileges",
  /** A role other than the migrator may create objects (CREATE on a schema or the database). */
  createPrivileges: "create-privileges",
  /** A SECURITY DEFINER function does not pin its search_path. */
  definerSearchPath: "definer-search-path",
  /** A SECURITY DEFINER function may be executed by PUBLIC. */
  definerPublicExecute: "definer-public-execute",
  /** An object in `core` is not the migrator's, or a jobfence role or login owns an object. */
  ownership: "ownership",
  /** A consumer's source queue or backstop does not exist. */
  queueMissing: "queue-missing",
  /** A queue's MessageRetentionPeriod differs from the consumer's validated configuration. */
  queueRetention: "queue-retention",
  /** A source queue's VisibilityTimeout differs from the consumer's validated configuration. */
  queueVisibility: "queue-visibility",
  /** A source queue does not redrive to its backstop after the validated maxReceiveCount. */
  queueRedrive: "queue-redrive",
  /**
   * A consumer's source queue is not the queue registered for replaying its dead letters
   * (core.consumer_roles.queues): none registered leaves replays unrestricted by queue.
   */
  replayQueues: "replay-queues",
} as const;
export type CheckId = (typeof CHECK)[keyof typeof CHECK];

/** One difference between the live system and what jobfence intends. */
export interface Finding {
  readonly check: CheckId;
  /** The object it is about: `role jobfence_ops`, `table core.processed_jobs`, `queue award-points`. */
  readonly where: string;
  /** What is wrong, in a sentence. */
  readonly what: string;
  /** What to do about it: a statement to run, or where to change the configuration. */
  readonly todo: string;
}

/** A check the doctor could not run, and why. */
export interface Skipped {
  readonly check: CheckId;
  readonly reason: string;
}

/** The doctor's result. */
export interface DoctorReport {
  readonly findings: readonly Finding[];
  readonly skipped: readonly Skipped[];
  /** The database role the catalogs were read as. */
  readonly readAs: string;
}

/** A finding as three lines of text: where and the check, what, and what to do. */
export function formatFinding(finding: Finding): string {
  return [`${finding.where} [${finding.check}]`, `  ${finding.what}`, `  → ${finding.todo}`].join("\n");
}
