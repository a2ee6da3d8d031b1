/** The Lambda entry point: the consumer prepared from the environment at init, the service's chain around it. */
import { prepareConsumer } from "jobfence/middy";
import { paymentChain } from "./chain.js";
import { recordPayment } from "./consumer.js";

export const handler = paymentChain(prepareConsumer(recordPayment));
