import { z } from 'zod';

/** Messages over this size are rejected unread (a mail server's limit is 25–50 MB; Enron's largest is ~2 MB). */
export const MAX_MESSAGE_BYTES = 25 * 2 ** 20;

/** Text PostgreSQL can store and index: no NUL, and a header no longer than a mail line may be (RFC 5322). */
const storable = (max: number) =>
  z
    .string()
    .max(max, `longer than ${max} characters`)
    .refine((s) => !s.includes('\u0000'), 'contains a NUL character');
const HEADER = 998;
const address = z.object({
  address: storable(HEADER).pipe(z.string().min(1, 'missing address')),
  name: storable(HEADER).default(''),
});

/** A parsed email as evalrl stores it; also the shape of one line of a JSONL ingest. */
export const emailSchema = z.object({
  messageId: storable(HEADER).pipe(z.string().trim().min(1, 'missing Message-ID')),
  subject: storable(HEADER).default(''),
  from: address,
  date: z.coerce.date().refine((d) => !Number.isNaN(d.getTime()), 'invalid date'),
  to: z.array(address).default([]),
  cc: z.array(address).default([]),
  bcc: z.array(address).default([]),
  body: storable(MAX_MESSAGE_BYTES),
});
export type Email = z.infer<typeof emailSchema>;
export type Address = z.infer<typeof address>;

/** Where a message came from: its owner mailbox, folder, and a source id unique within the corpus. */
export interface MessageOrigin {
  inbox: string;
  folder: string;
  source: string;
}

/**
 * A message read from disk, not parsed yet (maildir, mbox), already structured (JSONL), or too big to read
 * (`oversize`: its size in bytes, rejected by the parser).
 */
export type RawMessage = MessageOrigin & ({ raw: Uint8Array } | { json: unknown } | { oversize: number });

export type ParseResult =
  (MessageOrigin & { ok: true; email: Email }) | (MessageOrigin & { ok: false; reason: string });
