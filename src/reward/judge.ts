import type OpenAI from 'openai';
import { z } from 'zod';
import { agentLoop, type LoopSettings, type ToolSpec } from '../env/agentLoop';
import { afterThinking } from '../env/thinking';
import type { Trajectory, Turn } from '../env/trajectory';
import type { Mailbox, MailboxScope } from '../mail/search';
import type { ChatMessage } from '../modelServer/schemas';
import { aggregate, verdictSchema, type Verdict } from './aggregate';
import { readResource, type Skill } from './skills';
import { availableVerifiers, isVerifier, runVerifier, type VerifierResult } from './verifiers';

export type JudgeMode = 'baseline' | 'skill';

export interface JudgeSettings extends LoopSettings {
  mode: JudgeMode;
  /** "visible": the judge sees the reference answer and may run verifiers against it; "hidden": it judges
   * from the trajectory and the mailbox alone (what makes a trained reward model worth having). */
  reference: 'visible' | 'hidden';
  /** Invalid verdicts are sent back this many times before the judgement is a flagged failure. */
  retries: number;
}

/** Judge settings without the model and seed: each step picks the adapter version and the seeds. */
export type JudgeTemplate = Omit<JudgeSettings, 'model' | 'seed'>;

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

const fn = (name: string, description: string, schema: z.ZodType): ToolSpec => ({
  type: 'function',
  function: { name, description, parameters: z.toJSONSchema(schema) },
});
export const VERDICT_TOOL = fn('final_answer', 'Give the verdict; ends the judgement.', verdictSchema);
export const SKILL_TOOLS: ToolSpec[] = [
  fn('list_skills', 'List the evaluation skills.', z.object({})),
  fn('load_skill', 'Read a skill: its procedure, verifiers and resources.', z.object({ skill: z.string() })),
  fn(
    'read_resource',
    "Read one of a skill's resources.",
    z.object({ skill: z.string(), resource: z.string() }),
  ),
  // Arguments are not called `name`: a small model copies the call's own `name` key into them.
  fn(
    'run_verifier',
    'Run a verifier on the episode; returns its evidence.',
    z.object({ verifier: z.string() }),
  ),
  fn('read_email', 'Read an email of the inbox (evidence).', z.object({ message_id: z.string() })),
  VERDICT_TOOL,
];

const BASELINE_RUBRIC =
  'Score how well the final answer answers the question: is it correct, supported by the emails the agent read, ' +
  'and honestly stated? Count the criteria you checked (total_count) and those met (satisfied_count).';

/** The skills a judge may use: all, or without the reference only those that need none. */
export function skillsFor(skills: Map<string, Skill>, reference: JudgeSettings['reference']): Skill[] {
  return [...skills.values()].filter((k) => reference === 'visible' || !k.needs_reference);
}

/** What load_skill shows: the procedure and scoring contract, the verifiers and resources. */
export const skillText = (k: Skill) =>
  `${k.instructions}\n\nVerifiers: ${k.verifiers.join(', ') || 'none'}\nResources: ${k.resources.join(', ') || 'none'}`;

export function judgeSystemPrompt(skills: Skill[], mode: JudgeMode): string {
  if (mode === 'baseline')
    return `You are a reward model. Evaluate the email agent episode below and call final_answer. ${BASELINE_RUBRIC}`;
  const listing = skills.map((k) => `${k.name} (verifiers: ${k.verifiers.join(', ') || 'none'})`).join('; ');
  return [
    'You are a reward model. Evaluate the email agent episode below with the evaluation skills:',
    `${listing}.`,
    'Load the skills that apply and run their verifiers (several calls in one reply are fine), then call final_answer with',
    "satisfied_count/total_count counted by the skill's scoring contract.",
  ].join(' ');
}

export function episodeSummary(input: JudgeInput, reference: JudgeSettings['reference']): string {
  const calls = input.trajectory.messages
    .flatMap((m) => m.tool_calls ?? [])
    .map((c) => `${c.function.name}(${c.function.arguments.slice(0, 200)})`);
  const f = input.trajectory.facts;
  return [
    `Question: ${input.question}`,
    ...(reference === 'visible' ? [`Reference answer: ${input.reference}`] : []),
    `Agent's final answer: ${f.answer ?? '(none)'}`,
    `Cited sources: ${f.sources.join(', ') || '(none)'}`,
    `Episode ending: ${f.ending}, ${f.turns} turn(s); tool calls: ${calls.join('; ') || '(none)'}`,
  ].join('\n');
}

/**
 * Skill-RM: the reward model as an agent. In `skill` mode it loads skills, reads their resources, runs
 * verifiers and reads emails, then closes with final_answer; in `baseline` mode it judges directly. Its
 * verdict's counts go through the explicit aggregation policy with the verifier evidence. A judge that never
 * produces a valid verdict is a flagged failure with score 0, never a crash.
 */
export async function judge(
  llm: OpenAI,
  mailbox: Mailbox,
  skills: Map<string, Skill>,
  input: JudgeInput,
  s: JudgeSettings,
  hooks: { onTurn?: (turn: number) => void; signal?: AbortSignal } = {},
): Promise<Judgement> {
  const offered = skillsFor(skills, s.reference);
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
    messages: [],
    turns: [],
  };
  const ctx = {
    mailbox,
    scope: input.scope,
    question: input.question,
    reference: s.reference === 'visible' ? input.reference : null,
    facts: input.trajectory.facts,
  };
  let verdict: Verdict | null = null;
  let badVerdicts = 0;
  const tryVerdict = (value: unknown) => {
    const parsed = verdictSchema.safeParse(value);
    if (parsed.success) {
      verdict = parsed.data;
      return { content: 'Verdict recorded.', done: true };
    }
    const issue = parsed.error.issues[0];
    // Out of retries: end the loop; the judgement is a flagged failure.
    return {
      content: `Error: invalid final_answer at "${issue.path.join('.')}": ${issue.message}`,
      done: ++badVerdicts > s.retries,
    };
  };
  const loop = await agentLoop(
    llm,
    [
      { role: 'system', content: judgeSystemPrompt(offered, s.mode) },
      { role: 'user', content: episodeSummary(input, s.reference) },
    ],
    s.mode === 'skill' ? SKILL_TOOLS : [VERDICT_TOOL],
    s,
    {
      call: async (name, args) =>
        name === 'final_answer'
          ? tryVerdict(args)
          : {
              content:
                s.mode === 'skill'
                  ? await skillTool(name, args, offered, ctx, j)
                  : `Error: unknown tool "${name.slice(0, 80)}"`,
            },
      // A verdict written as plain JSON, after the reasoning of a judge that thinks.
      text: (content) => {
        const answer = afterThinking(content);
        return looksLikeJson(answer) ? tryVerdict(parseJson(answer)) : null;
      },
      onTurn: hooks.onTurn,
    },
    hooks.signal,
  );
  j.messages = loop.messages;
  j.turns = loop.turns;
  if (verdict) return finish(j, verdict);
  return fail(
    j,
    loop.ending === 'done'
      ? `no valid verdict after ${badVerdicts} invalid one(s)`
      : `no verdict: ${loop.ending} after ${loop.turns.length} turn(s)${loop.error ? ` (${loop.error})` : ''}`,
  );
}

async function skillTool(
  name: string,
  args: Record<string, unknown>,
  skills: Skill[],
  ctx: Parameters<typeof runVerifier>[1],
  j: Judgement,
): Promise<string> {
  const str = (key: string) => (typeof args[key] === 'string' ? (args[key] as string).slice(0, 200) : '');
  const skill = (key: string) => skills.find((k) => k.name === str(key));
  switch (name) {
    case 'list_skills':
      return JSON.stringify(
        skills.map((k) => ({ name: k.name, description: k.description, when_to_use: k.when_to_use })),
      );
    case 'load_skill': {
      const k = skill('skill');
      if (!k) return `Error: no skill "${str('skill')}"; available: ${skills.map((x) => x.name).join(', ')}`;
      if (!j.skillsUsed.includes(k.name)) j.skillsUsed.push(k.name);
      return skillText(k);
    }
    case 'read_resource': {
      const k = skill('skill');
      const text = k ? readResource(k, str('resource')) : null;
      if (text === null) return `Error: no resource "${str('resource')}" in skill "${str('skill')}"`;
      j.resourcesRead.push(`${k!.name}/${str('resource')}`);
      return text;
    }
    case 'run_verifier': {
      const available = availableVerifiers(ctx.reference !== null);
      const verifier = str('verifier');
      if (!isVerifier(verifier) || !available.includes(verifier))
        return `Error: no verifier "${verifier}"; available: ${available.join(', ')}`;
      const result = await runVerifier(verifier, ctx);
      j.evidence.push(result);
      return JSON.stringify(result);
    }
    case 'read_email': {
      const email = await ctx.mailbox.read(ctx.scope, str('message_id'));
      if (!email) return `Error: no email ${str('message_id')} in this inbox`;
      // The judge sees Message-IDs only, never the store's row ids.
      return JSON.stringify({ ...email, email_id: undefined, body: email.body.slice(0, 2000) });
    }
    default:
      return `Error: unknown tool "${name.slice(0, 80)}"`;
  }
}

function finish(j: Judgement, verdict: Verdict): Judgement {
  const { score, applied } = aggregate(verdict, j.evidence);
  return { ...j, verdict, score, applied, failed: false, failure: null };
}

function fail(j: Judgement, failure: string): Judgement {
  return { ...j, score: 0, failed: true, failure, applied: ['judge failure: score 0'] };
}

const looksLikeJson = (text: string) => text.trim().startsWith('{');

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
