import { z } from 'zod';
import { readArgsSchema, searchArgsSchema, type Mailbox, type MailboxScope } from '../mail/search';
import type { ToolSpec } from './agentLoop';

export const finalAnswerSchema = z.object({
  answer: z.string().max(2000).describe('the answer, or "I don\'t know"'),
  sources: z
    .array(z.string().max(998))
    .max(20)
    .default([])
    .describe('ids of the emails the answer comes from'),
});

/**
 * Short, episode-local names for messages ("m1", "m2", …) in what the model sees and writes. Message-IDs
 * are long (`<12894499.1075861197577.JavaMail.evans@thyme>`) and a small model copies them wrong; the
 * episode's facts keep the real ids. An id the model writes out in full is accepted too (it reads the first
 * email stored under it). A handle names one stored email: two different emails of an inbox that share a
 * Message-ID get two handles, each read back as itself, while the facts record their common Message-ID.
 */
export class MessageHandles {
  private readonly targets = new Map<string, { messageId: string; emailId?: string }>();
  private readonly handles = new Map<string, string>(); // messageId, or messageId NUL emailId → handle
  private readonly firstOf = new Map<string, string>(); // messageId → the first handle it was given

  /** The handle of an email (`emailId` tells apart emails sharing the Message-ID; without it, its first handle). */
  handle(messageId: string, emailId?: string): string {
    if (emailId === undefined) {
      const first = this.firstOf.get(messageId);
      if (first) return first;
    }
    const key = emailId === undefined ? messageId : `${messageId}\u0000${emailId}`;
    let h = this.handles.get(key);
    if (!h) {
      h = `m${this.targets.size + 1}`;
      this.handles.set(key, h);
      this.targets.set(h, { messageId, emailId });
      if (!this.firstOf.has(messageId)) this.firstOf.set(messageId, h);
    }
    return h;
  }

  /** The Message-ID a reference names: a handle's, else the text itself (a full id, or an invention). */
  resolve(reference: string): string {
    return this.target(reference).messageId;
  }

  /** The email a reference names: its Message-ID and, for a handle, which stored email it is. */
  target(reference: string): { messageId: string; emailId?: string } {
    return this.targets.get(reference.trim()) ?? { messageId: reference.trim() };
  }
}

const TOOLS = {
  search_emails: {
    schema: searchArgsSchema,
    description:
      'Search the inbox; every keyword must appear. Returns emails with id, subject, sender, date, snippet.',
  },
  read_email: { schema: readArgsSchema, description: 'Read one email of the inbox by its message id.' },
  return_final_answer: {
    schema: finalAnswerSchema,
    description: 'Give the final answer with the message ids it comes from. Ends the task.',
  },
};
export type ToolName = keyof typeof TOOLS;
const isTool = (name: string): name is ToolName => Object.hasOwn(TOOLS, name);

/** The tools in OpenAI's format, their parameters generated from the same zod schemas that check the calls. */
export const EMAIL_TOOLS: ToolSpec[] = (Object.keys(TOOLS) as ToolName[]).map((name) => ({
  type: 'function',
  function: {
    name,
    description: TOOLS[name].description,
    parameters: z.toJSONSchema(TOOLS[name].schema, { io: 'input' }),
  },
}));

/** How much of the mailbox one tool result shows: what a small model's context can hold. */
export interface ToolLimits {
  searchHits: number;
  bodyChars: number;
}

export type ToolOutcome =
  | { kind: 'result'; content: string; searchedIds?: string[]; readId?: string }
  | { kind: 'final'; answer: string; sources: string[] }
  | { kind: 'unknown_tool' | 'bad_arguments'; content: string };

/**
 * Runs one tool call against the mailbox, always inside the episode's scope (its inbox and query date): the
 * model chooses keywords and ids, never whose mail it reads. Bad calls come back as an error for the model.
 * Messages appear under their episode handles, as plain text (one line per search hit; an email as its
 * headers and body): fewer tokens than JSON, and the form a language model has read most of. Outcomes carry
 * the real ids.
 */
export async function runEmailTool(
  mailbox: Mailbox,
  scope: MailboxScope,
  name: string,
  args: Record<string, unknown>,
  limits: ToolLimits,
  handles: MessageHandles,
): Promise<ToolOutcome> {
  if (!isTool(name))
    return {
      kind: 'unknown_tool',
      content: `Error: unknown tool "${name.slice(0, 80)}". Available: ${Object.keys(TOOLS).join(', ')}.`,
    };
  const parsed = TOOLS[name].schema.safeParse(args);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return {
      kind: 'bad_arguments',
      content: `Error in ${name} arguments at "${issue.path.join('.')}": ${issue.message}`,
    };
  }
  if (name === 'return_final_answer') {
    const { answer, sources } = parsed.data as z.infer<typeof finalAnswerSchema>;
    return { kind: 'final', answer, sources: sources.map((s) => handles.resolve(s)) };
  }
  if (name === 'search_emails') {
    const search = parsed.data as z.infer<typeof searchArgsSchema>;
    const hits = await mailbox.search(scope, { ...search, limit: Math.min(search.limit, limits.searchHits) });
    const content = hits.length
      ? hits
          .map(
            (h) =>
              `${handles.handle(h.message_id, h.email_id)} | ${h.date.slice(0, 10)} | ${h.from} | ${h.subject} | ${h.snippet}`,
          )
          .join('\n')
      : 'No email matches every keyword.';
    return { kind: 'result', content, searchedIds: hits.map((h) => h.message_id) };
  }
  const { message_id } = parsed.data as z.infer<typeof readArgsSchema>;
  const target = handles.target(message_id);
  const email = await mailbox.read(scope, target.messageId, target.emailId);
  if (!email)
    return { kind: 'result', content: `Error: no email with id ${message_id.slice(0, 200)} in this inbox.` };
  const body =
    email.body.length > limits.bodyChars
      ? `${email.body.slice(0, limits.bodyChars)}\n[truncated]`
      : email.body;
  const content = [
    `id: ${handles.handle(email.message_id, email.email_id)}`,
    `from: ${email.from}`,
    `to: ${[...email.to].join(', ')}`,
    ...(email.cc.length ? [`cc: ${email.cc.join(', ')}`] : []),
    `date: ${email.date}`,
    `subject: ${email.subject}`,
    '',
    body,
  ].join('\n');
  return { kind: 'result', content, readId: email.message_id };
}
