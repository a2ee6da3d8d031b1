/**
 * A jobfence Lambda function: one of the entry points in `functions/`, bundled by esbuild into an
 * ESM `.mjs` for Node 24 on arm64, in the database's VPC, logging in as its own database user.
 */
import { execFileSync } from "node:child_process";
import { dirname } from "node:path";
import { AssetHashType, DockerImage, type Duration } from "aws-cdk-lib";
import * as lambda from "aws-cdk-lib/aws-lambda";
import * as nodejs from "aws-cdk-lib/aws-lambda-nodejs";
import * as logs from "aws-cdk-lib/aws-logs";
import { Construct } from "constructs";
import { BUNDLING_DEFAULTS, FUNCTION_DEFAULTS, PROJECT_ROOT } from "../defaults.ts";
import type { DatabaseAccess, DatabaseLogin } from "./database.ts";

/** Props of {@link JobfenceFunction}. */
export interface JobfenceFunctionProps {
  /** The entry point, relative to the repository root, e.g. `functions/fence-cleanup/handler.ts`. */
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
   * Bundle with `infra/bundling/bundle-with-files.ts` instead of NodejsFunction's esbuild run:
   * for an entry whose modules read files beside themselves (the migration sets).
   * @default false
   */
  readonly bundleWithFiles?: boolean;
}

const BUNDLE_WITH_FILES = `${PROJECT_ROOT}/infra/bundling/bundle-with-files.ts`;

/** Builds the function; the construct is its log group's and function's scope. */
export class JobfenceFunction extends Construct {
  /** The Lambda function. */
  readonly function: lambda.Function;
  /** Its log group (retention from FUNCTION_DEFAULTS). */
  readonly logGroup: logs.LogGroup;

  constructor(scope: Construct, id: string, props: JobfenceFunctionProps) {
    super(scope, id);
    this.logGroup = new logs.LogGroup(this, "Logs", { retention: FUNCTION_DEFAULTS.logRetention });
    const common = {
      description: props.description,
      runtime: FUNCTION_DEFAULTS.runtime,
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
          code: lambda.Code.fromAsset(`${PROJECT_ROOT}/${dirname(props.entry)}`, {
            assetHashType: AssetHashType.OUTPUT,
            bundling: {
              // Never used: the local bundling below always succeeds or throws.
              image: DockerImage.fromRegistry("public.ecr.aws/docker/library/node:24"),
              local: {
                tryBundle(outputDir: string): boolean {
                  execFileSync(process.execPath, [BUNDLE_WITH_FILES, props.entry, outputDir], {
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
          entry: `${PROJECT_ROOT}/${props.entry}`,
          handler: "handler",
          projectRoot: PROJECT_ROOT,
          depsLockFilePath: `${PROJECT_ROOT}/package-lock.json`,
          bundling: BUNDLING_DEFAULTS,
        });
    props.database.connect(this.function, props.login);
  }
}
