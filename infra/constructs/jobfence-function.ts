/**
 * A jobfence Lambda function: a user's consumer or one of jobfence's own entry points
 * (./entries.ts), bundled by esbuild into an ESM `.mjs` for its runtime (Node 22 or 24) on arm64,
 * in the database's VPC, logging in as its own database user. The cdk-nag findings every such
 * function carries (AWS's managed policies for logs and VPC access, X-Ray's wildcard) are
 * acknowledged here, on its role, so any app using the constructs synthesizes clean.
 */
import { execFileSync } from "node:child_process";
import { dirname } from "node:path";
import { AssetHashType, DockerImage, type Duration, Validations } from "aws-cdk-lib";
import * as lambda from "aws-cdk-lib/aws-lambda";
import * as nodejs from "aws-cdk-lib/aws-lambda-nodejs";
import * as logs from "aws-cdk-lib/aws-logs";
import { Construct, type IConstruct } from "constructs";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { bundlingProject, entryProblems } from "../bundling/project.ts";
import { BUNDLING_DEFAULTS, FUNCTION_DEFAULTS } from "../defaults.ts";
import type { DatabaseAccess, DatabaseLogin } from "./database.ts";
import { BUNDLE_WITH_FILES } from "./entries.ts";
import { esbuildTarget } from "./runtime.ts";

/** Props of {@link JobfenceFunction}. */
export interface JobfenceFunctionProps {
  /** The entry point, an absolute path (`.ts`, `.js` or `.mjs`) exporting `handler`. */
  readonly entry: string;
  /** Shown in the console. */
  readonly description: string;
  readonly timeout: Duration;
  /** The database, and which login the function uses. */
  readonly database: DatabaseAccess;
  readonly login: DatabaseLogin;
  /** Variables besides the database's. @default none */
  readonly environment?: Readonly<Record<string, string>>;
  /** @default FUNCTION_DEFAULTS.memorySize */
  readonly memorySize?: number;
  /**
   * Node 22 or Node 24 (anything else is refused); the bundle is built for it.
   * @default FUNCTION_DEFAULTS.runtime (Node 24)
   */
  readonly runtime?: lambda.Runtime;
  /**
   * The folder esbuild resolves the entry's packages from.
   * @default the nearest folder above the entry holding a lock file (infra/bundling/project.ts)
   */
  readonly projectRoot?: string;
  /** @default the lock file found with {@link projectRoot} */
  readonly depsLockFilePath?: string;
  /**
   * Bundle with `infra/bundling/bundle-with-files` instead of NodejsFunction's esbuild run:
   * for an entry whose modules read files beside themselves (the migration sets).
   * @default false
   */
  readonly bundleWithFiles?: boolean;
}

/** Builds the function; the construct is its log group's and function's scope. */
export class JobfenceFunction extends Construct {
  /** The Lambda function. */
  readonly function: lambda.Function;
  /** Its log group (retention from FUNCTION_DEFAULTS). */
  readonly logGroup: logs.LogGroup;
  /** The esbuild target its bundle is built for: its runtime's (`node22`, `node24`). */
  readonly esbuildTarget: string;

  constructor(scope: Construct, id: string, props: JobfenceFunctionProps) {
    super(scope, id);
    const problems = entryProblems(props.entry);
    if (problems.length > 0) throw new ConfigurationError(`function ${this.node.path}`, problems);
    const runtime = props.runtime ?? FUNCTION_DEFAULTS.runtime;
    const target = esbuildTarget(runtime);
    this.esbuildTarget = target;
    this.logGroup = new logs.LogGroup(this, "Logs", { retention: FUNCTION_DEFAULTS.logRetention });
    const common = {
      description: props.description,
      runtime,
      architecture: FUNCTION_DEFAULTS.architecture,
      memorySize: props.memorySize ?? FUNCTION_DEFAULTS.memorySize,
      timeout: props.timeout,
      logGroup: this.logGroup,
      loggingFormat: lambda.LoggingFormat.JSON,
      tracing: lambda.Tracing.ACTIVE,
      vpc: props.database.vpc,
      vpcSubnets: props.database.vpcSubnets,
      environment: { NODE_OPTIONS: "--enable-source-maps", ...props.environment },
    } satisfies Partial<lambda.FunctionProps>;
    this.function = props.bundleWithFiles
      ? new lambda.Function(this, "Function", {
          ...common,
          handler: "index.handler",
          code: lambda.Code.fromAsset(dirname(props.entry), {
            assetHashType: AssetHashType.OUTPUT,
            bundling: {
              // Never used: the local bundling below always succeeds or throws.
              image: DockerImage.fromRegistry("public.ecr.aws/docker/library/node:24"),
              local: {
                tryBundle(outputDir: string): boolean {
                  execFileSync(process.execPath, [BUNDLE_WITH_FILES, props.entry, outputDir, target], {
                    stdio: "inherit",
                  });
                  return true;
                },
              },
            },
          }),
        })
      : new nodejs.NodejsFunction(this, "Function", {
          ...common,
          entry: props.entry,
          handler: "handler",
          ...bundlingProject(props.entry, {
            ...(props.projectRoot !== undefined ? { projectRoot: props.projectRoot } : {}),
            ...(props.depsLockFilePath !== undefined ? { depsLockFilePath: props.depsLockFilePath } : {}),
          }),
          bundling: { ...BUNDLING_DEFAULTS, target },
        });
    props.database.connect(this.function, props.login);
    this.acknowledgeFindings(runtime);
  }

  /**
   * The cdk-nag AwsSolutions findings every jobfence function's role carries by design, and the
   * runtime finding of a function deliberately kept on Node 22.
   */
  private acknowledgeFindings(runtime: lambda.Runtime): void {
    const acknowledge = (scope: IConstruct, id: string, reason: string) =>
      Validations.of(scope).acknowledge({ id, reason });
    if (runtime.name !== FUNCTION_DEFAULTS.runtime.name) {
      acknowledge(
        this.function,
        "AwsSolutions-L1",
        `${runtime.name} was chosen for this function (its consumer's runtime prop): jobfence supports Node 22 and Node 24, and a deployment may keep 22 (docs/deploy.md, Runtimes).`,
      );
    }
    const role = this.function.role;
    if (!role) return;
    acknowledge(
      role,
      "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
      "AWS's managed policy for writing the function's own logs; it grants nothing beyond CloudWatch Logs.",
    );
    acknowledge(
      role,
      "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]",
      "AWS's managed policy for a function in a VPC: creating and deleting its network interfaces.",
    );
    const policy = role.node.tryFindChild("DefaultPolicy");
    if (policy) {
      acknowledge(
        policy,
        "AwsSolutions-IAM5[Resource::*]",
        "X-Ray's PutTraceSegments and PutTelemetryRecords have no resource-level permissions; every other statement names its resource.",
      );
    }
  }
}
