/**
 * The reference stack's database: Aurora PostgreSQL Serverless v2 behind an RDS Proxy that
 * requires TLS, in the given VPC, with one generated secret per login: the migrator, ops, cleanup
 * and one per consumer. Production deployments that already have a database use
 * {@link DatabaseAccess.fromAttributes} instead.
 *
 * The cluster's master user is the migrator: it applies the migrations and owns every object.
 * The other logins' secrets are generated here and registered with the proxy; the migrate
 * trigger creates the PostgreSQL users from them (docs/deploy.md, "Database logins").
 */
import { Duration, RemovalPolicy, Validations } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as rds from "aws-cdk-lib/aws-rds";
import { Construct } from "constructs";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { DATABASE_DEFAULTS } from "../defaults.ts";
import {
  allSecrets,
  consumerLoginName,
  DATABASE_LOGINS,
  DatabaseAccess,
  type DatabaseSecrets,
  type SharedDatabaseLogin,
} from "./database.ts";

/** Props of {@link ReferenceDatabase}. */
export interface ReferenceDatabaseProps {
  readonly vpc: ec2.IVpc;
  /** The consumers deployed against it (their names): each gets a login and its secret. */
  readonly consumers: readonly string[];
  /** @default "jobfence" */
  readonly databaseName?: string;
  /** Aurora capacity units. @default 0.5 */
  readonly minCapacity?: number;
  /** @default 4 */
  readonly maxCapacity?: number;
  /**
   * Keep the cluster (snapshot) when the stack is deleted, and refuse deletion.
   * @default true
   */
  readonly retain?: boolean;
}

/** Aurora Serverless v2, its proxy and the per-login secrets. */
export class ReferenceDatabase extends Construct {
  readonly cluster: rds.DatabaseCluster;
  readonly proxy: rds.DatabaseProxy;
  /** Allows the functions in; the proxy's group. */
  readonly securityGroup: ec2.SecurityGroup;
  readonly secrets: DatabaseSecrets<rds.DatabaseSecret>;
  /** What the other constructs connect through (the proxy endpoint). */
  readonly access: DatabaseAccess;

  constructor(scope: Construct, id: string, props: ReferenceDatabaseProps) {
    super(scope, id);
    const databaseName = props.databaseName ?? DATABASE_DEFAULTS.databaseName;
    const retain = props.retain ?? true;
    const secret = (login: SharedDatabaseLogin) =>
      new rds.DatabaseSecret(this, `${login[0]?.toUpperCase()}${login.slice(1)}Secret`, {
        username: DATABASE_LOGINS[login],
        secretName: `jobfence/db/${login}`,
      });
    const migrator = secret("migrator");

    const clusterSecurityGroup = new ec2.SecurityGroup(this, "ClusterSg", {
      vpc: props.vpc,
      description: "jobfence Aurora cluster: reachable from its proxy only",
      allowAllOutbound: false,
    });
    this.cluster = new rds.DatabaseCluster(this, "Cluster", {
      engine: rds.DatabaseClusterEngine.auroraPostgres({ version: rds.AuroraPostgresEngineVersion.VER_17_7 }),
      credentials: rds.Credentials.fromSecret(migrator),
      defaultDatabaseName: databaseName,
      writer: rds.ClusterInstance.serverlessV2("Writer"),
      serverlessV2MinCapacity: props.minCapacity ?? 0.5,
      serverlessV2MaxCapacity: props.maxCapacity ?? 4,
      vpc: props.vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
      securityGroups: [clusterSecurityGroup],
      storageEncrypted: true,
      iamAuthentication: true,
      deletionProtection: retain,
      removalPolicy: retain ? RemovalPolicy.SNAPSHOT : RemovalPolicy.DESTROY,
      backup: { retention: Duration.days(7) },
      cloudwatchLogsExports: ["postgresql"],
      port: DATABASE_DEFAULTS.port,
    });
    const usernames = new Map<string, string>();
    const consumerSecrets: Record<string, rds.DatabaseSecret> = {};
    for (const consumer of props.consumers) {
      const username = consumerLoginName(consumer);
      const taken = usernames.get(username);
      if (taken !== undefined) {
        throw new ConfigurationError("ReferenceDatabase", [
          `consumers "${taken}" and "${consumer}" would share the login ${username}: rename one`,
        ]);
      }
      usernames.set(username, consumer);
      consumerSecrets[consumer] = new rds.DatabaseSecret(this, `ConsumerSecret-${consumer}`, {
        username,
        secretName: `jobfence/db/consumer/${consumer}`,
      });
    }
    this.secrets = {
      migrator,
      ops: secret("ops"),
      cleanup: secret("cleanup"),
      consumers: consumerSecrets,
    };
    for (const login of allSecrets(this.secrets)) {
      Validations.of(login).acknowledge({
        id: "AwsSolutions-SMG4",
        reason:
          "Rotation needs no deploy and no rotation function: the functions read this secret at run time and read it again when the database refuses a password, so a login is rotated by putting a new password in the secret and invoking the migrate function, which sets the login's password from the secret (docs/deploy.md). A scheduled rotation function would need network access to the cluster and its master secret, which the stack keeps to the migrate function.",
      });
    }

    this.securityGroup = new ec2.SecurityGroup(this, "ProxySg", {
      vpc: props.vpc,
      description: "jobfence RDS Proxy: the functions connect here",
      // The proxy reads its login secrets from Secrets Manager over HTTPS.
      allowAllOutbound: true,
    });
    this.proxy = this.cluster.addProxy("Proxy", {
      vpc: props.vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      securityGroups: [this.securityGroup],
      // RDS Proxy accepts only the users whose secrets it holds: every login's, consumers' too.
      secrets: allSecrets(this.secrets),
      requireTLS: true,
      clientPasswordAuthType: rds.ClientPasswordAuthType.POSTGRES_SCRAM_SHA_256,
    });
    clusterSecurityGroup.addIngressRule(
      this.securityGroup,
      ec2.Port.tcp(DATABASE_DEFAULTS.port),
      "proxy to Aurora",
    );

    this.access = DatabaseAccess.fromAttributes({
      vpc: props.vpc,
      securityGroup: this.securityGroup,
      endpoint: this.proxy.endpoint,
      port: DATABASE_DEFAULTS.port,
      databaseName,
      secrets: this.secrets,
    });
  }
}
