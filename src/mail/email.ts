import { z } from 'zod';

/** Messages over this size are rejected unread (a mail server's limit is 25–50 MB; Enron's largest is ~2 MB). */
export const MAX_MESSAGE_BYTES = 25 * 2 ** 20;

/** Text PostgreSQL can store and index: no NUL, and a header no longer than a mail line may be (RFC 5322). */
const storable = (max: number) =>
  z
    .string()
    .max(max, `longer than ${max} characters`)
    .refine((s) => !s.includes('\u0000'), 'contains a NUL character');
export const HEADER = 998;
const address = z.object({
  address: storable(HEADER).pipe(z.string().min(1, 'missing address')),
  name: storable(HEADER).default(''),
});

/** A parsed email as evalrl stores it; also the shape of one line of a JSONL ingest. */
export const emailSchema = z.object({
  messageId: storable(HEADER).pipe(z.string().trim().min(1, 'missing Message-ID')),
  subject: storable(HEADER).default(''),
  from: address,
  // An unparseable Date header, or one outside years 1000–9999 (which YYYY-MM-DD cannot write), rejects the message.
  date: z.coerce
    .date()
    .refine((d) => !Number.isNaN(d.getTime()), 'invalid date')
    .refine(
      (d) => d.getUTCFullYear() >= 1000 && d.getUTCFullYear() <= 9999,
      'date out of range (years 1000–9999)',
    ),
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
export type RawMessage = MessageOrigin &
  ({ raw: Uint8Array } | { json: unknown; bytes?: number } | { oversize: number; reason?: string });

/** `notes`: what was changed to keep a message storable (a field truncated, NULs stripped); recorded in the ledger. */
export type ParseResult =
  | (MessageOrigin & { ok: true; email: Email; notes?: string[] })
  | (MessageOrigin & { ok: false; reason: string });

/**
 * Repairs, in place, what need not cost a message: a subject or display name over a mail line is truncated
 * to HEADER characters, and NULs (which PostgreSQL cannot store) are stripped from the subject, the names
 * and the body. Identity (Message-ID, addresses) is never changed: there a NUL or an overlong value still
 * rejects the message. Returns a note per change.
 */
export function repairEmail(candidate: unknown): string[] {
  const notes: string[] = [];
  if (typeof candidate !== 'object' || candidate === null) return notes;
  const fix = (holder: Record<string, unknown>, key: string, label: string, max: number) => {
    const value = holder[key];
    if (typeof value !== 'string') return;
    let fixed = value;
    if (fixed.includes('\u0000')) {
      const count = fixed.split('\u0000').length - 1;
      fixed = fixed.replaceAll('\u0000', '');
      notes.push(`${label}: ${count} NUL character${count === 1 ? '' : 's'} stripped`);
    }
    if (fixed.length > max) {
      notes.push(`${label}: truncated from ${fixed.length} to ${max} characters`);
      fixed = fixed.slice(0, max);
    }
    holder[key] = fixed;
  };
  const email = candidate as Record<string, unknown>;
  fix(email, 'subject', 'subject', HEADER);
  fix(email, 'body', 'body', MAX_MESSAGE_BYTES);
  const name = (a: unknown, label: string) => {
    if (typeof a === 'object' && a !== null)
      fix(a as Record<string, unknown>, 'name', `${label}.name`, HEADER);
  };
  name(email.from, 'from');
  for (const kind of ['to', 'cc', 'bcc'])
    if (Array.isArray(email[kind])) (email[kind] as unknown[]).forEach((a, i) => name(a, `${kind}.${i}`));
  return notes;
}
