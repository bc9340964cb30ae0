/**
 * Demonstrations for the warm start: complete episodes written by a script, with the token ids the model
 * server's template gives them, so that a supervised step teaches a small model the protocol before RL.
 * The policy's come from train questions (search with words of the gold email, read it, answer with its id);
 * the judge's from labelled train candidates (load a skill, run its verifiers, a verdict that follows them).
 */
import type { ModelServerClient } from '../modelServer/client';
import type { ChatMessage } from '../modelServer/schemas';
import type { Judgement, JudgeSettings } from '../reward/judge';
import { episodeSummary, judgeSystemPrompt, skillsFor, skillText } from '../reward/judge';
import { aggregate } from '../reward/aggregate';
import { addressesIn, datesIn, normalise, shiftDay } from '../reward/answerMatch';
import type { Skill } from '../reward/skills';
import { runVerifier, type VerifierResult } from '../reward/verifiers';
import type { QuestionContext } from '../store/questions';
import type { Mailbox, SearchArgs } from '../mail/search';
import type { LoopSettings, ToolSpec } from './agentLoop';
import { call, episodeStart, toolCall, type AgentSettings } from './emailAgent';
import { MessageHandles, runEmailTool } from './emailTools';
import type { EpisodeWithQuestion } from './episodes';
import { chatTemplateKwargs, sentBack } from './thinking';
import { initialFacts, type Trajectory, type Turn } from './trajectory';

const STOP = new Set(
  'a an the of to in on at for by with from and or is was were be it this that what who when which me my sent email subject date given mentioned amount dollar re fw fwd fyi please thanks'.split(
    ' ',
  ),
);
const words = (text: string) => [
  ...new Set(
    normalise(text)
      .split(' ')
      .filter((w) => /^[a-z0-9][a-z0-9'&.-]{1,}$/.test(w) && !STOP.has(w)),
  ),
];
const nextDay = (day: string) => shiftDay(day, 1);

/**
 * Searches an agent could make from the question alone, most specific first: the words of the subject it
 * quotes, its other words that the email contains, and (with `filters`) the sender and day it names.
 */
export function searchCandidates(
  question: string,
  gold: { subject: string; body: string },
  filters = true,
): SearchArgs[] {
  const inGold = new Set(words(`${gold.subject} ${gold.body}`));
  const quoted = [...question.matchAll(/"([^"]{2,200})"/g)].flatMap((m) => [
    words(m[1]).filter((w) => inGold.has(w)),
  ]);
  const loose = words(
    question
      .replace(/"[^"]*"/g, ' ')
      .split(/\s+/)
      .filter((w) => !w.includes('@'))
      .join(' '),
  ).filter((w) => inGold.has(w) && !/^\d{4}-\d{2}-\d{2}$/.test(w));
  const [day] = datesIn(question);
  const candidates: SearchArgs[] = [];
  for (const k of [...quoted, loose])
    for (const n of [3, 2, 1]) if (k.length >= n) candidates.push({ keywords: k.slice(0, n) });
  if (!filters) return candidates;
  for (const from of addressesIn(question))
    candidates.push(
      day && nextDay(day)
        ? { keywords: [], from, sent_after: day, sent_before: nextDay(day) ?? undefined }
        : { keywords: [], from },
    );
  return candidates;
}

/**
 * The policy's demonstration for a question: the messages of a scripted episode — a search an agent could
 * make from the question, reading the gold email, answering with its id — whose tool results are the real
 * tools' answers. Null when no such search finds the gold email, or the answer is not in what the tools show
 * (no honest demonstration exists within the spec's limits).
 */
export async function policyDemonstration(
  mailbox: Mailbox,
  q: QuestionContext,
  agent: AgentSettings,
  filters = true,
): Promise<{ messages: ChatMessage[]; trajectory: Trajectory } | null> {
  const goldId = q.gold.messageIds[0];
  const gold = await mailbox.read(q.scope, goldId);
  if (!gold) return null;
  for (const args of searchCandidates(q.question, gold, filters)) {
    const handles = new MessageHandles();
    const search = await runEmailTool(mailbox, q.scope, 'search_emails', { ...args }, agent, handles);
    if (search.kind !== 'result' || !search.searchedIds?.includes(goldId)) continue;
    const handle = handles.handle(goldId);
    const read = await runEmailTool(mailbox, q.scope, 'read_email', { message_id: handle }, agent, handles);
    if (read.kind !== 'result' || !normalise(read.content).includes(normalise(q.gold.answer))) return null;
    const messages: ChatMessage[] = [
      ...episodeStart(q, agent.demonstration),
      call('demo_1', 'search_emails', args),
      { role: 'tool', tool_call_id: 'demo_1', content: search.content },
      call('demo_2', 'read_email', { message_id: handle }),
      { role: 'tool', tool_call_id: 'demo_2', content: read.content },
      call('demo_3', 'return_final_answer', { answer: q.gold.answer, sources: [handle] }),
      { role: 'tool', tool_call_id: 'demo_3', content: 'Answer recorded.' },
    ];
    const facts = {
      ...initialFacts(),
      answer: q.gold.answer,
      sources: [goldId],
      searchedIds: search.searchedIds,
      readIds: [goldId],
      turns: 3,
      ending: 'answered' as const,
    };
    return { messages, trajectory: { messages, turns: [], facts, wallMs: 0 } };
  }
  return null;
}

/**
 * The judge's demonstration for a labelled candidate: load the grounding skill and run its verifiers in one
 * reply, then give the verdict the evidence supports (satisfied = verifiers passed). It teaches the procedure and
 * the contract, not the labels: what the verifiers miss is left for the reward-model stage to learn.
 */
export async function judgeDemonstration(
  mailbox: Mailbox,
  skills: Map<string, Skill>,
  candidate: EpisodeWithQuestion,
  settings: JudgeSettings,
): Promise<Judgement> {
  const skill = skillsFor(skills, settings.reference).find((k) => k.name === 'grounding');
  if (!skill) throw new Error('the warm start of the judge needs the "grounding" skill package');
  const { question, trajectory } = candidate;
  const input = {
    question: question.question,
    reference: question.gold.answer,
    scope: question.scope,
    trajectory,
  };
  const ctx = {
    mailbox,
    scope: question.scope,
    question: question.question,
    reference: settings.reference === 'visible' ? question.gold.answer : null,
    facts: trajectory.facts,
  };
  // One reply loads the skill and runs its verifiers (parallel calls), the next gives the verdict.
  const verifierCalls = skill.verifiers.map((name, i) =>
    toolCall(`judge_${i + 2}`, 'run_verifier', { verifier: name }),
  );
  const messages: ChatMessage[] = [
    { role: 'system', content: judgeSystemPrompt(skillsFor(skills, settings.reference), 'skill') },
    { role: 'user', content: episodeSummary(input, settings.reference) },
    {
      role: 'assistant',
      content: null,
      tool_calls: [toolCall('judge_1', 'load_skill', { skill: skill.name }), ...verifierCalls],
    },
    { role: 'tool', tool_call_id: 'judge_1', content: skillText(skill) },
  ];
  const evidence: VerifierResult[] = [];
  for (const c of verifierCalls) {
    const result = await runVerifier(JSON.parse(c.function.arguments).verifier, ctx);
    evidence.push(result);
    messages.push({ role: 'tool', tool_call_id: c.id, content: JSON.stringify(result) });
  }
  const passed = evidence.filter((e) => e.passed).length;
  // The reason comes first: a small model counts what it has just written out, not what it remembers.
  const verdict = {
    reason: evidence.map((e) => `${e.verifier} ${e.passed ? 'passed' : 'failed'}`).join('; '),
    satisfied_count: passed,
    total_count: evidence.length,
    score: Math.round((passed / evidence.length) * 100) / 100,
    confidence: 0.8,
    used_resources: [],
  };
  const last = 'judge_verdict';
  messages.push(call(last, 'final_answer', verdict), {
    role: 'tool',
    tool_call_id: last,
    content: 'Verdict recorded.',
  });
  const { score, applied } = aggregate(verdict, evidence);
  return {
    mode: 'skill',
    score,
    failed: false,
    failure: null,
    verdict,
    evidence,
    skillsUsed: [skill.name],
    resourcesRead: [],
    applied,
    messages,
    turns: [],
  };
}

/**
 * The assistant turns of a demonstration as the sampler would have produced them: for each assistant
 * message, the prompt the server renders before it and the tokens up to the end of its turn, in the sampler's
 * thinking mode and with the history sent back as the agent loop sends it (Qwen3's prompt without thinking
 * already holds the empty think block its closed turn renders, so the turn trains only what the model writes
 * after it). Each turn's prompt extends the previous turn's prompt and reply, so the turns train as one
 * sequence.
 */
export async function demonstrationTurns(
  modelServer: ModelServerClient,
  messages: ChatMessage[],
  tools: ToolSpec[],
  settings: Pick<LoopSettings, 'thinking'>,
): Promise<Turn[]> {
  const turns: Turn[] = [];
  const chat_template_kwargs = chatTemplateKwargs(settings);
  const history = messages.map((m) => sentBack(m, settings));
  for (const [k, m] of history.entries()) {
    if (m.role !== 'assistant') continue;
    const prompt = await modelServer.tokenize({
      messages: history.slice(0, k),
      tools,
      chat_template_kwargs,
    });
    const closed = await modelServer.tokenize({
      messages: history.slice(0, k + 1),
      tools,
      add_generation_prompt: false,
      chat_template_kwargs,
    });
    if (prompt.tokens.some((t, i) => closed.tokens[i] !== t))
      throw new Error('the chat template renders a closed turn that does not extend its prompt');
    const reply = closed.tokens.slice(prompt.tokens.length);
    const end = reply.findIndex((t) => closed.eos_token_ids.includes(t));
    const tokenIds = end === -1 ? reply : reply.slice(0, end + 1);
    turns.push({
      promptTokenIds: prompt.tokens,
      tokenIds,
      logprobs: tokenIds.map(() => 0), // unknown for a demonstration; the SFT objective does not use them
      finishReason: 'stop',
      modelMs: 0,
      toolMs: 0,
    });
  }
  return turns;
}
