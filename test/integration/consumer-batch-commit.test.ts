/** The consumer suite (consumer-suite.ts) in batch-commit mode: every guarantee of per-record mode. */
import { consumerSuite } from "./consumer-suite.ts";

consumerSuite("batch");
