import { z } from 'zod';

const address = z.object({ address: z.string().min(1, 'missing address'), name: z.string().default('') });

/** A parsed email as evalrl stores it; also the shape of one line of a JSONL ingest. */
export const emailSchema = z.object({
  messageId: z.string().trim().min(1, 'missing Message-ID'),
  subject: z.string().default(''),
  from: address,
  date: z.coerce.date().refine((d) => !Number.isNaN(d.getTime()), 'invalid date'),
  to: z.array(address).default([]),
  cc: z.array(address).default([]),
  bcc: z.array(address).default([]),
  body: z.string(),
});
export type Email = z.infer<typeof emailSchema>;
export type Address = z.infer<typeof address>;

/** Where a message came from: its owner mailbox, folder, and a source id unique within the corpus. */
export interface MessageOrigin {
  inbox: string;
  folder: string;
  source: string;
}

/** A message read from disk, not parsed yet (maildir, mbox) or already structured (JSONL). */
export type RawMessage = MessageOrigin & ({ raw: Uint8Array } | { json: unknown });

export type ParseResult =
  (MessageOrigin & { ok: true; email: Email }) | (MessageOrigin & { ok: false; reason: string });
