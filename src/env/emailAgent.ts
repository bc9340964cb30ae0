import type OpenAI from 'openai';
import type { Mailbox } from '../mail/search';
import type { ChatMessage, ToolCall } from '../modelServer/schemas';
import { agentLoop, type LoopSettings } from './agentLoop';
import { EMAIL_TOOLS, MessageHandles, runEmailTool, type ToolLimits } from './emailTools';
import { initialFacts, type Trajectory } from './trajectory';
import { isoDay } from '../reward/answerMatch';

export interface EpisodeQuestion {
  question: string;
  inbox: string;
  inboxAddress: string | null;
  queryDate: Date;
}

export interface AgentSettings extends LoopSettings, ToolLimits {
  /** Put the worked example before the question. */
  demonstration: boolean;
}

/** Agent settings without the model and seed: each step picks the adapter version and the seeds. */
export type AgentTemplate = Omit<AgentSettings, 'model' | 'seed'>;

/** The instructions, then what is particular to the episode (what all episodes share comes first: a cached prefix). */
export function systemPrompt(q: EpisodeQuestion): string {
  return [
    'You are an email search agent. Find the answer to the user question with search_emails and read_email,',
    'then call return_final_answer with a short answer and the ids of the emails it comes from. If you cannot',
    'find it, answer "I don\'t know". Always reply with exactly one tool call.',
    `The mailbox is ${q.inboxAddress ?? q.inbox}'s. Today is ${isoDay(q.queryDate) || 'unknown'}.`,
  ].join(' ');
}

/**
 * A worked example placed before the question: small models follow a demonstrated tool-call format far
 * more often than a described one (the harness comes first, then RL).
 */
export const DEMONSTRATION: ChatMessage[] = [
  { role: 'user', content: 'Example task: when did Jane send the budget draft?' },
  call('example_1', 'search_emails', { keywords: ['budget', 'draft'] }),
  {
    role: 'tool',
    tool_call_id: 'example_1',
    content: 'm1 | 2001-03-05 | jane@example.com | Budget draft | attached is the **budget** **draft**',
  },
  call('example_2', 'read_email', { message_id: 'm1' }),
  {
    role: 'tool',
    tool_call_id: 'example_2',
    content:
      'id: m1\nfrom: jane@example.com\nto: me@example.com\ndate: 2001-03-05T10:00:00.000Z\nsubject: Budget draft\n\nHi, attached is the budget draft. Jane',
  },
  call('example_3', 'return_final_answer', { answer: '2001-03-05', sources: ['m1'] }),
  { role: 'tool', tool_call_id: 'example_3', content: 'Example finished. Now the real task.' },
];

export function toolCall(id: string, name: string, args: object): ToolCall {
  return { id, type: 'function', function: { name, arguments: JSON.stringify(args) } };
}

/** An assistant message making one tool call. */
export function call(id: string, name: string, args: object): ChatMessage {
  return { role: 'assistant', content: null, tool_calls: [toolCall(id, name, args)] };
}

/** The messages an episode starts from. */
export function episodeStart(q: EpisodeQuestion, demonstration: boolean): ChatMessage[] {
  return [
    { role: 'system', content: systemPrompt(q) },
    ...(demonstration ? DEMONSTRATION : []),
    { role: 'user', content: q.question },
  ];
}

/**
 * One ReAct episode: the model searches and reads the inbox until it answers, or a turn or context budget
 * runs out. Malformed replies, unknown tools and bad arguments go back to the model as errors and are
 * counted in the episode's facts, which the deterministic reward layer reads.
 */
export async function runEpisode(
  llm: OpenAI,
  mailbox: Mailbox,
  q: EpisodeQuestion,
  s: AgentSettings,
  hooks: { onTurn?: (turn: number) => void; signal?: AbortSignal } = {},
): Promise<Trajectory> {
  const started = Date.now();
  const scope = { inbox: q.inbox, queryDate: q.queryDate };
  const facts = initialFacts();
  const handles = new MessageHandles();
  const loop = await agentLoop(
    llm,
    episodeStart(q, s.demonstration),
    EMAIL_TOOLS,
    s,
    {
      async call(name, args) {
        const outcome = await runEmailTool(mailbox, scope, name, args, s, handles);
        if (outcome.kind === 'final') {
          facts.answer = outcome.answer;
          facts.sources = outcome.sources;
          return { content: 'Answer recorded.', done: true };
        }
        if (outcome.kind === 'unknown_tool') facts.unknownTools++;
        if (outcome.kind === 'bad_arguments') facts.badArguments++;
        if (outcome.kind === 'result') {
          facts.searchedIds.push(...(outcome.searchedIds ?? []));
          if (outcome.readId) facts.readIds.push(outcome.readId);
        }
        return { content: outcome.content };
      },
      onTurn: hooks.onTurn,
    },
    hooks.signal,
  );
  facts.turns = loop.turns.length;
  facts.malformedCalls = loop.malformed;
  facts.ending = loop.ending === 'done' ? 'answered' : loop.ending;
  facts.modelError = loop.error;
  facts.searchedIds = [...new Set(facts.searchedIds)];
  facts.readIds = [...new Set(facts.readIds)];
  return { messages: loop.messages, turns: loop.turns, facts, wallMs: Date.now() - started };
}
