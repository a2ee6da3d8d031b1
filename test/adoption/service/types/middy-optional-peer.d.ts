// @middy/core's declarations import a type from an optional peer dependency this service does not
// use; with skipLibCheck off, it must be declared. Nothing of jobfence's needs it.
declare module "@aws/durable-execution-sdk-js" {
  export interface DurableContext {}
}
