import type pg from 'pg';
import { z } from 'zod';
import { readArgsSchema, readEmail, searchArgsSchema, searchEmails, type MailboxScope } from '../mail/search';

export const finalAnswerSchema = z.object({
  answer: z.string().max(2000).describe('the answer, or "I don\'t know"'),
  sources: z
    .array(z.string())
    .max(20)
    .default([])
    .describe('message ids of the emails the answer comes from'),
});

const TOOL_DESCRIPTIONS = {
  search_emails:
    'Search the inbox. Every keyword must appear. Returns up to 10 emails with id, subject, sender, date and a snippet.',
  read_email: 'Read one email of the inbox by its message id.',
  return_final_answer:
    'Give the final answer with the message ids of the emails it comes from. Ends the task.',
} as const;
const SCHEMAS = {
  search_emails: searchArgsSchema,
  read_email: readArgsSchema,
  return_final_answer: finalAnswerSchema,
};
export type ToolName = keyof typeof SCHEMAS;

/** The tools in OpenAI's format, their parameters generated from the same zod schemas that check the calls. */
export const EMAIL_TOOLS = (Object.keys(SCHEMAS) as ToolName[]).map((name) => ({
  type: 'function' as const,
  function: {
    name,
    description: TOOL_DESCRIPTIONS[name],
    parameters: z.toJSONSchema(SCHEMAS[name], { io: 'input' }),
  },
}));

export type ToolOutcome =
  | { kind: 'result'; content: string; searchedIds?: string[]; readId?: string }
  | { kind: 'final'; answer: string; sources: string[] }
  | { kind: 'unknown_tool' | 'bad_arguments'; content: string };

const BODY_CHARS = 4000;

/**
 * Runs one tool call against the mailbox, always inside the episode's scope (its inbox and query date): the
 * model chooses keywords and ids, never whose mail it reads. Bad calls come back as an error for the model.
 */
export async function runEmailTool(
  pool: pg.Pool,
  scope: MailboxScope,
  name: string,
  rawArgs: string,
): Promise<ToolOutcome> {
  if (!(name in SCHEMAS)) {
    return {
      kind: 'unknown_tool',
      content: `Error: unknown tool "${name}". Available: ${Object.keys(SCHEMAS).join(', ')}.`,
    };
  }
  let json: unknown;
  try {
    json = JSON.parse(rawArgs || '{}');
  } catch {
    return { kind: 'bad_arguments', content: `Error: the arguments of ${name} are not valid JSON.` };
  }
  const parsed = SCHEMAS[name as ToolName].safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return {
      kind: 'bad_arguments',
      content: `Error in ${name} arguments at "${issue.path.join('.')}": ${issue.message}`,
    };
  }
  if (name === 'return_final_answer') {
    const args = parsed.data as z.infer<typeof finalAnswerSchema>;
    return { kind: 'final', answer: args.answer, sources: args.sources };
  }
  if (name === 'search_emails') {
    const hits = await searchEmails(pool, scope, parsed.data as z.infer<typeof searchArgsSchema>);
    return { kind: 'result', content: JSON.stringify(hits), searchedIds: hits.map((h) => h.message_id) };
  }
  const { message_id } = parsed.data as z.infer<typeof readArgsSchema>;
  const email = await readEmail(pool, scope, message_id);
  if (!email) return { kind: 'result', content: `Error: no email with id ${message_id} in this inbox.` };
  const body =
    email.body.length > BODY_CHARS ? `${email.body.slice(0, BODY_CHARS)}\n[truncated]` : email.body;
  return { kind: 'result', content: JSON.stringify({ ...email, body }), readId: email.message_id };
}
