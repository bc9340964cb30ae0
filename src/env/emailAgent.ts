import type OpenAI from 'openai';
import type pg from 'pg';
import type { ChatMessage, ToolCall } from '../modelServer/schemas';
import { EMAIL_TOOLS, runEmailTool } from './emailTools';
import { recoverToolCalls } from './recoverToolCalls';
import { initialFacts, type Trajectory, type Turn } from './trajectory';

export interface EpisodeQuestion {
  question: string;
  inbox: string;
  inboxAddress: string | null;
  queryDate: Date;
}

export interface AgentSettings {
  model: string;
  maxTurns: number;
  /** The model's context window: no request may ask for more. */
  contextTokens: number;
  maxTokensPerTurn: number;
  temperature: number;
  topP: number;
  /** Turn t samples with seed + t, so a replayed episode asks for the same samples. */
  seed?: number;
  timeoutMs: number;
  /** Put the worked example before the question. */
  demonstration: boolean;
}

/** Extra fields the model server adds to a completion (absent from hosted APIs). */
interface SampledTokens {
  prompt_token_ids?: number[];
  choices: { token_ids?: number[]; token_logprobs?: number[] }[];
}

const MALFORMED_IN_A_ROW = 2;
const CHARS_PER_TOKEN = 3; // a cautious estimate for text not yet tokenised by the server

export function systemPrompt(q: EpisodeQuestion): string {
  return [
    `You are an email search agent working in the mailbox of ${q.inboxAddress ?? q.inbox}.`,
    `Today is ${q.queryDate.toISOString().slice(0, 10)}.`,
    'Use search_emails and read_email to find the answer to the user question, then call return_final_answer',
    'with a short answer and the message ids of the emails it comes from. If you cannot find it, answer',
    '"I don\'t know". Always reply with exactly one tool call.',
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
    content:
      '[{"message_id": "<example.1@mail>", "subject": "Budget draft", "from": "jane@example.com", "date": "2001-03-05T10:00:00.000Z", "snippet": "attached is the **budget** **draft**"}]',
  },
  call('example_2', 'read_email', { message_id: '<example.1@mail>' }),
  {
    role: 'tool',
    tool_call_id: 'example_2',
    content:
      '{"message_id": "<example.1@mail>", "subject": "Budget draft", "from": "jane@example.com", "date": "2001-03-05T10:00:00.000Z", "to": ["me@example.com"], "cc": [], "bcc": [], "body": "Hi, attached is the budget draft. Jane"}',
  },
  call('example_3', 'return_final_answer', { answer: '2001-03-05', sources: ['<example.1@mail>'] }),
  { role: 'tool', tool_call_id: 'example_3', content: 'Example finished. Now the real task.' },
];

function call(id: string, name: string, args: object): ChatMessage {
  return {
    role: 'assistant',
    content: null,
    tool_calls: [{ id, type: 'function', function: { name, arguments: JSON.stringify(args) } }],
  };
}

/**
 * One ReAct episode: the model calls tools until it answers, runs out of turns or of context. Malformed
 * replies, unknown tools and bad arguments go back to the model as errors and are counted.
 */
export async function runEpisode(
  llm: OpenAI,
  pool: pg.Pool,
  q: EpisodeQuestion,
  s: AgentSettings,
): Promise<Trajectory> {
  const started = Date.now();
  const scope = { inbox: q.inbox, queryDate: q.queryDate };
  const messages: ChatMessage[] = [
    { role: 'system', content: systemPrompt(q) },
    ...(s.demonstration ? DEMONSTRATION : []),
    { role: 'user', content: q.question },
  ];
  const turns: Turn[] = [];
  const facts = initialFacts();
  let knownTokens = 0; // prompt + completion tokens of the last call, as the server counted them
  let unknownChars =
    messages.reduce((n, m) => n + (m.content?.length ?? 0), 0) + JSON.stringify(EMAIL_TOOLS).length;
  let malformedInARow = 0;

  while (facts.turns < s.maxTurns) {
    const promptEstimate = knownTokens + Math.ceil(unknownChars / CHARS_PER_TOKEN);
    const maxTokens = Math.min(s.maxTokensPerTurn, s.contextTokens - promptEstimate);
    if (maxTokens < 16) {
      facts.ending = 'context_budget';
      break;
    }
    const t0 = Date.now();
    let completion: OpenAI.Chat.Completions.ChatCompletion;
    try {
      completion = await llm.chat.completions.create(
        {
          model: s.model,
          messages: messages as OpenAI.Chat.Completions.ChatCompletionMessageParam[],
          tools: EMAIL_TOOLS as OpenAI.Chat.Completions.ChatCompletionTool[],
          temperature: s.temperature,
          top_p: s.topP,
          max_tokens: maxTokens,
          seed: s.seed === undefined ? undefined : s.seed + facts.turns,
        },
        { timeout: s.timeoutMs, maxRetries: 0 },
      );
    } catch (err) {
      if ((err as { status?: number }).status === 400) {
        facts.ending = 'context_budget'; // the server refused the length: end, never hang or loop
        break;
      }
      throw err;
    }
    const modelMs = Date.now() - t0;
    facts.turns++;
    const choice = completion.choices[0];
    const sampled = completion as unknown as SampledTokens;
    knownTokens = completion.usage?.total_tokens ?? knownTokens;
    unknownChars = 0;

    const content = choice.message.content ?? null;
    const calls = toolCallsOf(choice.message.tool_calls as ToolCall[] | undefined, content, facts.turns);
    messages.push({ role: 'assistant', content, ...(calls && calls.length ? { tool_calls: calls } : {}) });
    const t1 = Date.now();
    if (!calls || calls.length === 0) {
      facts.malformedCalls++;
      const error =
        'Error: reply with exactly one tool call (search_emails, read_email or return_final_answer).';
      messages.push({ role: 'user', content: error });
      unknownChars += error.length;
      turns.push(turnRecord(sampled, choice.finish_reason, modelMs, Date.now() - t1));
      if (++malformedInARow >= MALFORMED_IN_A_ROW) {
        facts.ending = 'malformed';
        break;
      }
      continue;
    }
    malformedInARow = 0;
    for (const call of calls) {
      const outcome = await runEmailTool(pool, scope, call.function.name, call.function.arguments);
      if (outcome.kind === 'final') {
        facts.answer = outcome.answer;
        facts.sources = outcome.sources;
        facts.ending = 'answered';
        break;
      }
      if (outcome.kind === 'unknown_tool') facts.unknownTools++;
      if (outcome.kind === 'bad_arguments') facts.badArguments++;
      if (outcome.kind === 'result') {
        facts.searchedIds.push(...(outcome.searchedIds ?? []));
        if (outcome.readId) facts.readIds.push(outcome.readId);
      }
      messages.push({ role: 'tool', content: outcome.content, tool_call_id: call.id });
      unknownChars += outcome.content.length;
    }
    turns.push(turnRecord(sampled, choice.finish_reason, modelMs, Date.now() - t1));
    if (facts.ending === 'answered') break;
  }
  facts.searchedIds = [...new Set(facts.searchedIds)];
  facts.readIds = [...new Set(facts.readIds)];
  return { messages, turns, facts, wallMs: Date.now() - started };
}

/** Tool calls from the API's field, or recovered from the text; null when the text holds a broken call. */
function toolCallsOf(
  apiCalls: ToolCall[] | undefined,
  content: string | null,
  turn: number,
): ToolCall[] | null {
  if (apiCalls && apiCalls.length > 0) return apiCalls;
  const recovered = recoverToolCalls(content ?? '');
  return recovered?.map((c, i) => ({ id: `turn${turn}_call${i}`, type: 'function', function: c })) ?? null;
}

function turnRecord(sampled: SampledTokens, finishReason: string, modelMs: number, toolMs: number): Turn {
  return {
    promptTokenIds: sampled.prompt_token_ids,
    tokenIds: sampled.choices[0]?.token_ids,
    logprobs: sampled.choices[0]?.token_logprobs,
    finishReason,
    modelMs,
    toolMs,
  };
}
