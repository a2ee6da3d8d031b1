/** record-payment: a payment against an invoice, applied once however often SQS delivers it. */
import { type ConsumerDefinition, PermanentJobError } from "jobfence";
import { z } from "zod";

export const paymentPayload = z.object({
  invoice_id: z.string().min(1).max(64),
  amount_cents: z.number().int().positive(),
});

export const recordPayment = {
  name: "record-payment",
  payload: paymentPayload,
  // What it works on outside core, granted by the service's own migration: jobfence doctor checks it.
  data: { tables: { "billing.invoices": { privileges: ["SELECT", "UPDATE"] } } },
  work: async (job, tx) => {
    const { rowCount } = await tx.query(
      "UPDATE billing.invoices SET paid_cents = paid_cents + $2 WHERE id = $1",
      [job.payload.invoice_id, job.payload.amount_cents],
    );
    if (rowCount === 0) throw new PermanentJobError(`no invoice ${job.payload.invoice_id}`);
  },
} satisfies ConsumerDefinition<typeof paymentPayload>;
