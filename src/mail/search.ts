import { z } from 'zod';

/** What the environment fixes for an episode: whose mailbox, and "today" (mail after it is invisible). */
export interface MailboxScope {
  inbox: string;
  queryDate?: Date;
}

// A date as the model writes it. Checked with a refinement, not a pattern: zod's ISO patterns would put
// hundreds of regex characters into every prompt's tool listing.
const isoDate = z
  .string()
  .max(40)
  .refine((s) => /^\d{4}-\d{2}-\d{2}/.test(s) && !Number.isNaN(Date.parse(s)), 'expected a date, YYYY-MM-DD');

/** Arguments the model gives to search_emails (the inbox and query date come from the scope, not the model). */
export const searchArgsSchema = z.object({
  keywords: z.array(z.string().max(200)).max(20).describe('words that must all appear in the email'),
  from: z.string().max(320).optional().describe('sender address'),
  to: z.string().max(320).optional().describe('recipient address (to, cc or bcc)'),
  sent_after: isoDate.optional().describe('YYYY-MM-DD'),
  sent_before: isoDate.optional().describe('YYYY-MM-DD'),
  limit: z.number().int().min(1).max(10).default(10),
});
export type SearchArgs = z.input<typeof searchArgsSchema>;

export const readArgsSchema = z.object({
  message_id: z.string().min(1).max(998).describe('the id of a search result, e.g. m1'),
});

export interface SearchHit {
  message_id: string;
  subject: string;
  from: string;
  date: string;
  snippet: string;
}

export interface FullEmail {
  message_id: string;
  subject: string;
  from: string;
  date: string;
  to: string[];
  cc: string[];
  bcc: string[];
  body: string;
}

/** What the agent's and the judge's tools read mail through (src/store/mailbox.ts implements it). */
export interface Mailbox {
  search(scope: MailboxScope, args: SearchArgs): Promise<SearchHit[]>;
  read(scope: MailboxScope, messageId: string): Promise<FullEmail | null>;
}
