import { z } from 'zod';
import { isCalendarDay } from '../reward/answerMatch';

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
  .refine((s) => {
    const m = /^(\d{4})-(\d{2})-(\d{2})/.exec(s); // a day that exists: V8 reads 2001-02-30 as March 2
    return !!m && isCalendarDay(Number(m[1]), Number(m[2]), Number(m[3])) && !Number.isNaN(Date.parse(s));
  }, 'expected a date, YYYY-MM-DD');

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
  /** Which stored email this is (two emails of one inbox can share a Message-ID); read_email takes it back. */
  email_id?: string;
  subject: string;
  from: string;
  date: string;
  snippet: string;
}

export interface FullEmail {
  message_id: string;
  email_id?: string;
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
  /** `emailId` (a hit's email_id) picks one of several emails sharing the Message-ID; else the first stored. */
  read(scope: MailboxScope, messageId: string, emailId?: string): Promise<FullEmail | null>;
}
