// Every entry point of the package, type-checked with skipLibCheck off: jobfence's declarations
// must read under this TypeScript, whatever the repository is built with.
export type * as Main from "jobfence";
export type * as Cdk from "jobfence/cdk";
export type * as Middy from "jobfence/middy";
export type * as Testing from "jobfence/testing";
