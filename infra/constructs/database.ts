/**
 * How jobfence's functions reach PostgreSQL. Each function logs in as a database user of its own
 * kind — one per consumer (its function and its backstop drain), one for the ops functions, one
 * for the TTL cleanup, and the migrator — whose credentials live in a Secrets Manager secret
 * (`username`, `password`, as RDS writes them).
 *
 * The functions' environment holds no credential: only the endpoint (host, port, database name,
 * sslmode) and the ARN of the login's secret, which the function may read and reads at run time
 * (shared/db/credentials.ts). A rotated password therefore reaches the functions without a
 * deploy, and `lambda:GetFunctionConfiguration` reveals nothing secret.
 */
import * as ec2 from "aws-cdk-lib/aws-ec2";
import type * as lambda from "aws-cdk-lib/aws-lambda";
import type * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import { DATABASE_ENV } from "../../shared/config/fields.ts";
import type { SslMode } from "../../shared/db/credentials.ts";
import { consumerIdentifier } from "../../shared/db/queries/provision-login.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { DATABASE_DEFAULTS } from "../defaults.ts";

/** The database users shared by every deployment, by login; each consumer has its own besides. */
export const DATABASE_LOGINS = Object.freeze({
  /** The dead-letter API, the bulk-operations worker and escalation; granted `jobfence_ops`. */
  ops: "jobfence_ops_login",
  /** TTL cleanup; granted `jobfence_cleanup`. */
  cleanup: "jobfence_cleanup_login",
  /** Applies migrations and owns every object. */
  migrator: "jobfence_migrator",
});

/** One of the shared logins. */
export type SharedDatabaseLogin = keyof typeof DATABASE_LOGINS;

/** Which login a function uses: a shared one, or a consumer's (granted the consumer's group role). */
export type DatabaseLogin = SharedDatabaseLogin | { readonly consumer: string };

const CONSUMER_LOGIN_PREFIX = "jobfence_login_";

/**
 * The database user of `consumer`'s login: `jobfence_login_` and the name with `-` as `_`
 * (`award-points` → `jobfence_login_award_points`); a name longer than 35 characters is
 * shortened with a digest (`consumerIdentifier`: one-to-one, and a short name never takes a long
 * one's user). The prefix is one no group role and no shared login has (group roles are
 * `jobfence_consumer_…`, a prefix `core.provision_login` refuses for logins), so a consumer called
 * `ops` cannot take the ops login's name.
 */
export function consumerLoginName(consumer: string): string {
  return consumerIdentifier(CONSUMER_LOGIN_PREFIX, consumer);
}

/** A login's name as people read it (security group descriptions, errors). */
export function describeLogin(login: DatabaseLogin): string {
  return typeof login === "string" ? login : `consumer ${login.consumer}`;
}

/** One secret per login: the shared ones, and one per consumer by consumer name. */
export interface DatabaseSecrets<Secret extends secretsmanager.ISecret = secretsmanager.ISecret> {
  readonly migrator: Secret;
  readonly ops: Secret;
  readonly cleanup: Secret;
  /** By consumer name (`award-points`); every deployed consumer needs one. */
  readonly consumers: Readonly<Record<string, Secret>>;
}

/** Every secret of `secrets`, shared logins first, then the consumers' by name. */
export function allSecrets<Secret extends secretsmanager.ISecret>(
  secrets: DatabaseSecrets<Secret>,
): Secret[] {
  return [
    secrets.migrator,
    secrets.ops,
    secrets.cleanup,
    ...Object.keys(secrets.consumers)
      .sort()
      .map((name) => secrets.consumers[name] as Secret),
  ];
}

/** An existing PostgreSQL (Aurora, RDS, or an RDS Proxy in front of either). */
export interface DatabaseAccessProps {
  /** The VPC the functions must run in to reach the database. */
  readonly vpc: ec2.IVpc;
  /**
   * Subnets for the functions; they need a route to SQS, EventBridge and Secrets Manager (NAT or
   * VPC endpoints).
   * @default the VPC's private subnets with egress
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /** The security group of the endpoint: each function's group is allowed in on `port`. */
  readonly securityGroup: ec2.ISecurityGroup;
  /** Host name of the endpoint (an RDS Proxy endpoint, or the cluster's writer endpoint). */
  readonly endpoint: string;
  /** @default 5432 */
  readonly port?: number;
  /** @default "jobfence" */
  readonly databaseName?: string;
  /** One secret per login, each with `username` and `password` fields. */
  readonly secrets: DatabaseSecrets;
  /**
   * libpq `sslmode` the functions connect with.
   * @default "verify-full"
   */
  readonly sslMode?: SslMode;
}

/** Access to the database, handed to every construct that deploys a function. */
export class DatabaseAccess {
  /** Describes an existing database. */
  static fromAttributes(props: DatabaseAccessProps): DatabaseAccess {
    return new DatabaseAccess(props);
  }

  readonly vpc: ec2.IVpc;
  readonly vpcSubnets: ec2.SubnetSelection;
  readonly securityGroup: ec2.ISecurityGroup;
  readonly endpoint: string;
  readonly port: number;
  readonly databaseName: string;
  readonly secrets: DatabaseSecrets;
  readonly sslMode: SslMode;

  private constructor(props: DatabaseAccessProps) {
    this.vpc = props.vpc;
    this.vpcSubnets = props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS };
    this.securityGroup = props.securityGroup;
    this.endpoint = props.endpoint;
    this.port = props.port ?? DATABASE_DEFAULTS.port;
    this.databaseName = props.databaseName ?? DATABASE_DEFAULTS.databaseName;
    this.secrets = props.secrets;
    this.sslMode = props.sslMode ?? DATABASE_DEFAULTS.sslMode;
  }

  /** The secret of `login`; a consumer without one is refused, saying what to add. */
  secretOf(login: DatabaseLogin): secretsmanager.ISecret {
    if (typeof login === "string") return this.secrets[login];
    const secret = this.secrets.consumers[login.consumer];
    if (!secret) {
      throw new ConfigurationError("database access", [
        `no login secret for consumer "${login.consumer}": add secrets.consumers["${login.consumer}"] ` +
          "(a secret with its username and password)",
      ]);
    }
    return secret;
  }

  /**
   * Connects `fn` as `login`: the endpoint and the login's secret ARN in its environment (the
   * function reads the secret itself), read access to that secret only, the RDS certificate
   * bundle, and the endpoint's security group opened to the function's.
   */
  connect(fn: lambda.Function, login: DatabaseLogin): void {
    const secret = this.secretOf(login);
    fn.addEnvironment(DATABASE_ENV.dbSecretArn, secret.secretArn);
    fn.addEnvironment(DATABASE_ENV.dbHost, this.endpoint);
    fn.addEnvironment(DATABASE_ENV.dbPort, String(this.port));
    fn.addEnvironment(DATABASE_ENV.dbName, this.databaseName);
    fn.addEnvironment(DATABASE_ENV.dbSslMode, this.sslMode);
    fn.addEnvironment("NODE_EXTRA_CA_CERTS", DATABASE_DEFAULTS.extraCaCertsPath);
    secret.grantRead(fn);
    // An ingress rule on the endpoint's group only: the function's group already allows all egress.
    for (const group of fn.connections.securityGroups) {
      this.securityGroup.addIngressRule(
        group,
        ec2.Port.tcp(this.port),
        `${describeLogin(login)} login to PostgreSQL`,
      );
    }
  }
}
