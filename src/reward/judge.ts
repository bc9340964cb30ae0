import type OpenAI from 'openai';
import type pg from 'pg';
import { z } from 'zod';
import type { Trajectory, Turn } from '../env/trajectory';
import { recoverToolCalls } from '../env/recoverToolCalls';
import { readEmail, type MailboxScope } from '../mail/search';
import type { ChatMessage, ToolCall } from '../modelServer/schemas';
import { aggregate, verdictSchema, type Verdict } from './aggregate';
import { readResource, type Skill } from './skills';
import { runVerifier, VERIFIERS, type VerifierResult } from './verifiers';

export type JudgeMode = 'baseline' | 'skill';

export interface JudgeSettings {
  model: string;
  mode: JudgeMode;
  maxTurns: number;
  maxTokensPerTurn: number;
  temperature: number;
  seed?: number;
  /** Unparseable verdicts are sent back this many times before the judgement is a flagged failure. */
  retries: number;
  timeoutMs: number;
}

export interface JudgeInput {
  question: string;
  reference: string;
  scope: MailboxScope;
  trajectory: Trajectory;
}

export interface Judgement {
  mode: JudgeMode;
  score: number;
  failed: boolean;
  failure: string | null;
  verdict: Verdict | null;
  evidence: VerifierResult[];
  skillsUsed: string[];
  resourcesRead: string[];
  applied: string[];
  /** The judge's own episode, with sampled tokens: the reward-model stage trains on it. */
  messages: ChatMessage[];
  turns: Turn[];
}

const fn = (name: string, description: string, schema: z.ZodType) => ({
  type: 'function' as const,
  function: { name, description, parameters: z.toJSONSchema(schema) },
});
const verdictTool = fn('final_answer', 'Give the verdict; ends the judgement.', verdictSchema);
const SKILL_TOOLS = [
  fn('list_skills', 'List the evaluation skills.', z.object({})),
  fn('load_skill', 'Read a skill: its procedure, verifiers and resources.', z.object({ name: z.string() })),
  fn(
    'read_resource',
    "Read one of a skill's resources.",
    z.object({ skill: z.string(), resource: z.string() }),
  ),
  fn('run_verifier', 'Run a verifier on the episode; returns its evidence.', z.object({ name: z.string() })),
  fn('read_email', 'Read an email of the inbox (evidence).', z.object({ message_id: z.string() })),
  verdictTool,
];

const BASELINE_RUBRIC =
  'Score how well the final answer answers the question: is it correct against the reference, supported by the ' +
  'emails the agent read, and honestly stated? Count the criteria you checked (total_count) and those met (satisfied_count).';

function episodeSummary(input: JudgeInput): string {
  const calls = input.trajectory.messages
    .flatMap((m) => m.tool_calls ?? [])
    .map((c) => `${c.function.name}(${c.function.arguments.slice(0, 200)})`);
  const f = input.trajectory.facts;
  return [
    `Question: ${input.question}`,
    `Reference answer: ${input.reference}`,
    `Agent's final answer: ${f.answer ?? '(none)'}`,
    `Cited sources: ${f.sources.join(', ') || '(none)'}`,
    `Episode ending: ${f.ending}, ${f.turns} turn(s); tool calls: ${calls.join('; ') || '(none)'}`,
  ].join('\n');
}

/**
 * Skill-RM: the reward model as an agent. In `skill` mode it picks skills, reads their resources, runs
 * verifiers and reads emails, then closes with final_answer; in `baseline` mode it judges directly. Its
 * verdict's counts go through the explicit aggregation policy with the verifier evidence. A judge that never
 * produces a valid verdict is a flagged failure with score 0, never a crash.
 */
export async function judge(
  llm: OpenAI,
  pool: pg.Pool,
  skills: Map<string, Skill>,
  input: JudgeInput,
  s: JudgeSettings,
): Promise<Judgement> {
  const tools = s.mode === 'skill' ? SKILL_TOOLS : [verdictTool];
  const intro =
    s.mode === 'skill'
      ? 'You are a reward model. Evaluate the email agent episode below with the evaluation skills: list them, load the ones that apply, run their verifiers and read their resources, then call final_answer.'
      : `You are a reward model. Evaluate the email agent episode below and call final_answer. ${BASELINE_RUBRIC}`;
  const messages: ChatMessage[] = [
    { role: 'system', content: intro },
    { role: 'user', content: episodeSummary(input) },
  ];
  const j: Judgement = {
    mode: s.mode,
    score: 0,
    failed: true,
    failure: null,
    verdict: null,
    evidence: [],
    skillsUsed: [],
    resourcesRead: [],
    applied: [],
    messages,
    turns: [],
  };
  const ctx = { pool, scope: input.scope, reference: input.reference, facts: input.trajectory.facts };
  let badVerdicts = 0;

  for (let turn = 0; turn < s.maxTurns; turn++) {
    const t0 = Date.now();
    const completion = await llm.chat.completions.create(
      {
        model: s.model,
        messages: messages as OpenAI.Chat.Completions.ChatCompletionMessageParam[],
        tools: tools as OpenAI.Chat.Completions.ChatCompletionTool[],
        temperature: s.temperature,
        max_tokens: s.maxTokensPerTurn,
        seed: s.seed === undefined ? undefined : s.seed + turn,
      },
      { timeout: s.timeoutMs, maxRetries: 0 },
    );
    const choice = completion.choices[0];
    const sampled = completion as unknown as {
      prompt_token_ids?: number[];
      choices: { token_ids?: number[]; token_logprobs?: number[] }[];
    };
    const content = choice.message.content ?? null;
    const calls = (choice.message.tool_calls as ToolCall[] | undefined)?.length
      ? (choice.message.tool_calls as ToolCall[])
      : (recoverToolCalls(content ?? '') ?? []).map((c, i) => ({
          id: `j${turn}_${i}`,
          type: 'function' as const,
          function: c,
        }));
    messages.push({ role: 'assistant', content, ...(calls.length ? { tool_calls: calls } : {}) });
    const t1 = Date.now();
    j.turns.push({
      promptTokenIds: sampled.prompt_token_ids,
      tokenIds: sampled.choices[0]?.token_ids,
      logprobs: sampled.choices[0]?.token_logprobs,
      finishReason: choice.finish_reason,
      modelMs: t1 - t0,
      toolMs: 0,
    });

    if (calls.length === 0) {
      const verdict = verdictSchema.safeParse(parseJson(content ?? ''));
      if (verdict.success) return finish(j, verdict.data);
      if (++badVerdicts > s.retries)
        return fail(j, `no valid verdict after ${badVerdicts} unparseable replies`);
      messages.push({
        role: 'user',
        content:
          'Error: reply with a tool call; end with final_answer {score, satisfied_count, total_count, confidence, used_resources, reason}.',
      });
      continue;
    }
    for (const call of calls) {
      const args = parseJson(call.function.arguments) ?? {};
      if (call.function.name === 'final_answer') {
        const verdict = verdictSchema.safeParse(args);
        if (verdict.success) return finish(j, verdict.data);
        if (++badVerdicts > s.retries)
          return fail(j, `invalid final_answer: ${verdict.error.issues[0].message}`);
        messages.push({
          role: 'tool',
          tool_call_id: call.id,
          content: `Error: invalid final_answer at "${verdict.error.issues[0].path.join('.')}": ${verdict.error.issues[0].message}`,
        });
        continue;
      }
      const result =
        s.mode === 'skill'
          ? await runSkillTool(call.function.name, args as Record<string, unknown>, skills, ctx, j)
          : `Error: unknown tool "${call.function.name}"`;
      messages.push({ role: 'tool', tool_call_id: call.id, content: result });
    }
    j.turns[j.turns.length - 1].toolMs = Date.now() - t1;
  }
  return fail(j, `no verdict within ${s.maxTurns} turns`);
}

async function runSkillTool(
  name: string,
  args: Record<string, unknown>,
  skills: Map<string, Skill>,
  ctx: Parameters<typeof runVerifier>[1],
  j: Judgement,
): Promise<string> {
  const str = (key: string) => (typeof args[key] === 'string' ? (args[key] as string) : '');
  switch (name) {
    case 'list_skills':
      return JSON.stringify(
        [...skills.values()].map((k) => ({
          name: k.name,
          description: k.description,
          when_to_use: k.when_to_use,
        })),
      );
    case 'load_skill': {
      const skill = skills.get(str('name'));
      if (!skill) return `Error: no skill "${str('name')}"; see list_skills`;
      if (!j.skillsUsed.includes(skill.name)) j.skillsUsed.push(skill.name);
      return `${skill.instructions}\n\nVerifiers: ${skill.verifiers.join(', ') || 'none'}\nResources: ${skill.resources.join(', ') || 'none'}`;
    }
    case 'read_resource': {
      const skill = skills.get(str('skill'));
      const text = skill ? readResource(skill, str('resource')) : null;
      if (text === null) return `Error: no resource "${str('resource')}" in skill "${str('skill')}"`;
      j.resourcesRead.push(`${skill!.name}/${str('resource')}`);
      return text;
    }
    case 'run_verifier': {
      if (!(str('name') in VERIFIERS))
        return `Error: no verifier "${str('name')}"; registered: ${Object.keys(VERIFIERS).join(', ')}`;
      const result = await runVerifier(str('name'), ctx);
      j.evidence.push(result);
      return JSON.stringify(result);
    }
    case 'read_email': {
      const email = await readEmail(ctx.pool, ctx.scope, str('message_id'));
      return email
        ? JSON.stringify({ ...email, body: email.body.slice(0, 4000) })
        : `Error: no email ${str('message_id')} in this inbox`;
    }
    default:
      return `Error: unknown tool "${name}"`;
  }
}

function finish(j: Judgement, verdict: Verdict): Judgement {
  const { score, applied } = aggregate(verdict, j.evidence);
  return { ...j, verdict, score, applied, failed: false, failure: null };
}

function fail(j: Judgement, failure: string): Judgement {
  return { ...j, score: 0, failed: true, failure, applied: ['judge failure: score 0'] };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
