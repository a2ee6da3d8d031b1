/**
 * Lambda entry point of the doctor as jobfence deploys it for any service: `core`, the consumers'
 * queues and the declarations its environment carries (the Doctor construct writes them from the
 * consumers' definitions).
 */
import { createDoctorHandler } from "./create-handler.ts";

export const handler = createDoctorHandler();
