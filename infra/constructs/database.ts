/**
 * How jobfence's functions reach PostgreSQL. Each function logs in as its own database user,
 * granted one of the roles the migrations create (SPEC §9), whose credentials live in a Secrets
 * Manager secret (`username`, `password`, as RDS writes them).
 *
 * The functions read a `DATABASE_URL`. It is assembled here from CloudFormation dynamic
 * references (`{{resolve:secretsmanager:…}}`): the template and the cloud assembly never hold a
 * password; CloudFormation resolves it at deploy time. See docs/deploy.md for the trade-offs
 * (the resolved value is visible in the function's configuration; a rotated password reaches the
 * functions on the next deploy).
 */
import * as ec2 from "aws-cdk-lib/aws-ec2";
import type * as lambda from "aws-cdk-lib/aws-lambda";
import type * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import { DATABASE_DEFAULTS } from "../defaults.ts";

/** The database users of a deployment, one per kind of function (SPEC §9). */
export const DATABASE_LOGINS = Object.freeze({
  /** Consumers and backstop drains; granted `jobfence_consumer`. */
  consumer: "jobfence_consumer_login",
  /** The dead-letter API and escalation; granted `jobfence_ops`. */
  ops: "jobfence_ops_login",
  /** TTL cleanup; granted `jobfence_cleanup`. */
  cleanup: "jobfence_cleanup_login",
  /** Applies migrations and owns every object. */
  migrator: "jobfence_migrator",
});

/** Which login a function uses. */
export type DatabaseLogin = keyof typeof DATABASE_LOGINS;

/** An existing PostgreSQL (Aurora, RDS, or an RDS Proxy in front of either). */
export interface DatabaseAccessProps {
  /** The VPC the functions must run in to reach the database. */
  readonly vpc: ec2.IVpc;
  /**
   * Subnets for the functions; they need a route to SQS and EventBridge (NAT or VPC endpoints).
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
  readonly secrets: Readonly<Record<DatabaseLogin, secretsmanager.ISecret>>;
  /**
   * libpq `sslmode` in the connection string.
   * @default "verify-full"
   */
  readonly sslMode?: "verify-full" | "verify-ca" | "require" | "disable";
  /**
   * Any text; changing it makes the next deploy update every function, so CloudFormation resolves
   * the credentials' dynamic references again (it does not when only the secret changed).
   * @default none
   */
  readonly credentialsRevision?: string;
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
  readonly secrets: Readonly<Record<DatabaseLogin, secretsmanager.ISecret>>;
  readonly sslMode: string;
  readonly credentialsRevision: string | undefined;

  private constructor(props: DatabaseAccessProps) {
    this.vpc = props.vpc;
    this.vpcSubnets = props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS };
    this.securityGroup = props.securityGroup;
    this.endpoint = props.endpoint;
    this.port = props.port ?? DATABASE_DEFAULTS.port;
    this.databaseName = props.databaseName ?? DATABASE_DEFAULTS.databaseName;
    this.secrets = props.secrets;
    this.sslMode = props.sslMode ?? DATABASE_DEFAULTS.sslMode;
    this.credentialsRevision = props.credentialsRevision;
  }

  /**
   * The `DATABASE_URL` of `login`: user and password are dynamic references resolved by
   * CloudFormation, so the synthesized template holds none. Passwords must be URL-safe (the
   * reference database's generated ones exclude every character a URL would need to escape).
   */
  connectionString(login: DatabaseLogin): string {
    const secret = this.secrets[login];
    const user = secret.secretValueFromJson("username").unsafeUnwrap();
    const password = secret.secretValueFromJson("password").unsafeUnwrap();
    return `postgres://${user}:${password}@${this.endpoint}:${this.port}/${this.databaseName}?sslmode=${this.sslMode}`;
  }

  /**
   * Connects `fn` as `login`: `DATABASE_URL`, the secret's ARN (`JOBFENCE_DB_SECRET_ARN`, for
   * code that reads the secret itself), read access to that secret only, and the endpoint's
   * security group opened to the function's.
   */
  connect(fn: lambda.Function, login: DatabaseLogin): void {
    const secret = this.secrets[login];
    fn.addEnvironment("DATABASE_URL", this.connectionString(login));
    fn.addEnvironment("JOBFENCE_DB_SECRET_ARN", secret.secretArn);
    fn.addEnvironment("NODE_EXTRA_CA_CERTS", DATABASE_DEFAULTS.extraCaCertsPath);
    if (this.credentialsRevision !== undefined) {
      fn.addEnvironment("JOBFENCE_DB_CREDENTIALS_REVISION", this.credentialsRevision);
    }
    secret.grantRead(fn);
    // An ingress rule on the endpoint's group only: the function's group already allows all egress.
    for (const group of fn.connections.securityGroups) {
      this.securityGroup.addIngressRule(group, ec2.Port.tcp(this.port), `${login} login to PostgreSQL`);
    }
  }
}
