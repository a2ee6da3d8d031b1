/** The consumer suite (consumer-suite.ts) in per-record commit mode, the default. */
import { consumerSuite } from "./consumer-suite.ts";

consumerSuite("per-record");
