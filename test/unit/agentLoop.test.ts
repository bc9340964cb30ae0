import path from 'node:path';
import OpenAI, { APIError } from 'openai';
import { agentLoop, BadSamplingRequest, type LoopSettings } from '../../src/env/agentLoop';
import { afterThinking } from '../../src/env/thinking';
import { stageInput } from '../../src/grpo/stage';
import { runEpisode } from '../../src/env/emailAgent';
import type { Mailbox } from '../../src/mail/search';
import { judge } from '../../src/reward/judge';
import { loadSkills } from '../../src/reward/skills';
import { parseRunSpec } from '../../src/runSpec';
import { availableVerifiers } from '../../src/reward/verifiers';
import { episodeFacts } from '../episodeFacts';

/** An endpoint that answers each call with the next scripted reply: tool calls, or an HTTP error. */
type Call = { name: string; arguments: string };
function scripted(replies: (Call[] | APIError)[]): OpenAI {
  let turn = 0;
  const create = async () => {
    const reply = replies[Math.min(turn++, replies.length - 1)];
    if (reply instanceof APIError) throw reply;
    return {
      choices: [
        {
          finish_reason: 'tool_calls',
          message: {
            content: null,
            tool_calls: reply.map((f: Call, i: number) => ({
              id: `c${turn}_${i}`,
              type: 'function',
              function: f,
            })),
          },
        },
      ],
    };
  };
  return { chat: { completions: { create } } } as unknown as OpenAI;
}

/** An endpoint that records each request's body and answers every call with `content` and no tool call. */
function answering(content: string, asked: Record<string, unknown>[] = []): OpenAI {
  const create = async (body: Record<string, unknown>) => {
    asked.push(body);
    return { choices: [{ finish_reason: 'stop', message: { content } }] };
  };
  return { chat: { completions: { create } } } as unknown as OpenAI;
}

const settings: LoopSettings = {
  model: 'judge',
  maxTurns: 3,
  contextTokens: 2048,
  maxTokensPerTurn: 64,
  temperature: 0,
  topP: 1,
  timeoutMs: 1000,
};
const apiError = (status: number, message: string) =>
  new APIError(status, { message }, message, new Headers());

describe('the agent loop', () => {
  it('ends on a context overflow, and names a setting the sampler refuses instead of ending quietly', async () => {
    const overflow = scripted([
      apiError(400, "max_tokens: prompt (2000 tokens) + max_tokens (64) exceeds the model's context"),
    ]);
    const ended = await agentLoop(overflow, [], [], settings, { call: async () => ({ content: '' }) });
    expect(ended.ending).toBe('context_budget');
    const refused = scripted([apiError(400, 'temperature: must be at most 5')]);
    await expect(
      agentLoop(refused, [], [], settings, { call: async () => ({ content: '' }) }),
    ).rejects.toThrow(BadSamplingRequest);
  });

  it("asks for the sampled tokens and records them from vLLM's shape of reply, with the version", async () => {
    let asked: Record<string, unknown> = {};
    const create = async (body: Record<string, unknown>) => {
      asked = body;
      return {
        model: 'policy@step-2',
        prompt_token_ids: [1, 2, 3],
        usage: { total_tokens: 5 },
        choices: [
          {
            finish_reason: 'stop',
            message: { content: 'done', tool_calls: [] },
            token_ids: [7, 8],
            logprobs: {
              content: [
                { token: 'do', logprob: -0.5 },
                { token: 'ne', logprob: -0.25 },
              ],
            },
          },
        ],
      };
    };
    const vllm = { chat: { completions: { create } } } as unknown as OpenAI;
    const loop = await agentLoop(vllm, [{ role: 'user', content: 'x' }], [], settings, {
      call: async () => ({ content: '' }),
      text: () => ({ content: '', done: true }),
    });
    expect(asked).toMatchObject({ logprobs: true, return_token_ids: true });
    expect(loop.turns[0]).toMatchObject({
      model: 'policy@step-2',
      promptTokenIds: [1, 2, 3],
      tokenIds: [7, 8],
      logprobs: [-0.5, -0.25],
    });
  });

  it("sends the spec's thinking switch with every request: off unless the spec turns it on with a budget", async () => {
    const stage = { steps: 1, tasksPerStep: 1, groupSize: 2 };
    const minimal = {
      name: 'x',
      seed: 1,
      models: { policy: { adapter: 'p' }, rewardModel: { adapter: 'rm' } },
      stages: { rewardModel: stage, policy: stage },
    };
    /** The first request a loop with these settings sends. */
    const firstRequest = async (s: LoopSettings) => {
      const asked: Record<string, unknown>[] = [];
      await agentLoop(answering('x', asked), [], [], s, { call: async () => ({ content: '' }) });
      return [asked[0].chat_template_kwargs, asked[0].max_tokens];
    };
    /** The policy's and its judge's first requests under a spec. */
    const requests = async (spec: unknown) => {
      const env = stageInput(parseRunSpec(spec), 'r', 'policy').env;
      if (env.kind !== 'policy') throw new Error('expected the policy stage');
      return [
        await firstRequest({ ...env.agent, model: 'p' }),
        await firstRequest({ ...env.judge.settings, model: 'j' }),
      ];
    };
    expect(await requests(minimal)).toEqual([
      [{ enable_thinking: false }, 256],
      [{ enable_thinking: false }, 192],
    ]);
    expect(await requests({ ...minimal, thinking: { budgetTokens: 1024 } })).toEqual([
      [{ enable_thinking: true }, 256 + 1024],
      [{ enable_thinking: true }, 192 + 1024],
    ]);
    // A stage started before the switch existed has no `thinking`: off, as Qwen3 must be told.
    expect(await firstRequest(settings)).toEqual([{ enable_thinking: false }, 64]);
  });

  it('sends a turn sampled without thinking back with its empty think block, one with thinking as it came', async () => {
    const history = async (thinking: boolean) => {
      const asked: { messages: { role: string; reasoning?: string }[] }[] = [];
      const create = async (body: (typeof asked)[number]) => {
        asked.push(structuredClone(body));
        return {
          choices: [
            {
              finish_reason: 'tool_calls',
              message: {
                content: thinking ? '<think>\nsearch first\n</think>\n\n' : null,
                tool_calls: [{ id: 'c', type: 'function', function: { name: 'search', arguments: '{}' } }],
              },
            },
          ],
        };
      };
      const llm = { chat: { completions: { create } } } as unknown as OpenAI;
      await agentLoop(
        llm,
        [{ role: 'user', content: 'q' }],
        [],
        { ...settings, maxTurns: 2, thinking },
        {
          call: async () => ({ content: 'hits' }),
        },
      );
      return asked[1].messages.find((m) => m.role === 'assistant');
    };
    // "\n" is what Qwen3's template renders as the empty block the prompt held (src/env/thinking.ts).
    expect(await history(false)).toMatchObject({ reasoning: '\n' });
    expect(await history(true)).not.toHaveProperty('reasoning');
  });
});

describe('a think block', () => {
  it('is skipped, closed, cut off by the token limit, or opened by the prompt; in one pass', () => {
    expect(afterThinking('<think>\nhmm {"a": 1}\n</think>\n\n{"b": 2}')).toBe('\n\n{"b": 2}');
    expect(afterThinking('  <think>\nstill going {"a": 1}')).toBe('');
    expect(afterThinking('prefilled reasoning\n</think>\n{"b": 2}')).toBe('\n{"b": 2}');
    expect(afterThinking('{"b": 2}')).toBe('{"b": 2}');
    const hostile = '<think>' + '<think><'.repeat(200_000);
    const t0 = Date.now();
    expect(afterThinking(hostile)).toBe('');
    expect(Date.now() - t0).toBeLessThan(1000);
  });
});

describe('the judge', () => {
  const skills = loadSkills(
    path.resolve(__dirname, '../../skills'),
    availableVerifiers(true),
    availableVerifiers(false),
  );
  const mailbox: Mailbox = { search: async () => [], read: async () => null };
  const input = {
    question: 'Who sent the budget?',
    reference: 'jane@example.com',
    scope: { inbox: 'me' },
    trajectory: { messages: [], turns: [], facts: episodeFacts({ answer: 'x' }), wallMs: 0 },
  };

  it('answers prototype-named tools, skills and verifiers with errors, never an exception', async () => {
    const hostile = ['constructor', '__proto__', 'toString', 'hasOwnProperty'];
    const llm = scripted([
      [
        ...hostile.map((name) => ({ name, arguments: '{}' })),
        ...hostile.map((v) => ({ name: 'run_verifier', arguments: JSON.stringify({ verifier: v }) })),
        ...hostile.map((s) => ({ name: 'load_skill', arguments: JSON.stringify({ skill: s }) })),
        { name: 'read_resource', arguments: '{"skill": "__proto__", "resource": "constructor"}' },
        { name: 'read_email', arguments: '{"message_id": "constructor"}' },
      ],
      [{ name: 'final_answer', arguments: '{"reason": "r", "constructor": 1}' }],
    ]);
    const j = await judge(llm, mailbox, skills, input, {
      ...settings,
      mode: 'skill',
      reference: 'hidden',
      retries: 0,
    });
    expect(j).toMatchObject({ failed: true, score: 0, evidence: [], skillsUsed: [] });
    const results = j.messages.filter((m) => m.role === 'tool').map((m) => m.content ?? '');
    expect(results).toHaveLength(hostile.length * 3 + 3);
    for (const r of results.slice(0, -1)) expect(r).toMatch(/^Error: /);
    expect(results.join('\n')).not.toMatch(/\[native code\]|function \w*\(|\[object Object\]/); // no internals leak
  });

  it('takes a verdict written as plain JSON after its reasoning, and none from reasoning the token limit cut off', async () => {
    const verdict = { reason: 'r', satisfied_count: 1, total_count: 1, score: 1, confidence: 0.9 };
    const judgeWith = (content: string) =>
      judge(answering(content), mailbox, skills, input, {
        ...settings,
        mode: 'baseline',
        reference: 'hidden',
        retries: 0,
      });
    const thought = await judgeWith(
      `<think>\nIs {"score": 0} right? No.\n</think>\n\n${JSON.stringify(verdict)}`,
    );
    expect(thought).toMatchObject({ failed: false, verdict: { satisfied_count: 1, total_count: 1 } });
    const cut = await judgeWith(`<think>\nStill weighing ${JSON.stringify(verdict)}`);
    expect(cut).toMatchObject({ failed: true, verdict: null });
  });

  it('stores why an episode ended as model_error with its facts', async () => {
    const noChoice = {
      chat: { completions: { create: async () => ({ choices: [] }) } },
    } as unknown as OpenAI;
    const question = { question: 'q?', inbox: 'a', inboxAddress: null, queryDate: new Date('2001-06-01') };
    const episode = await runEpisode(noChoice, {} as Mailbox, question, {
      ...settings,
      demonstration: false,
      searchHits: 2,
      bodyChars: 100,
    });
    expect(episode.facts.ending).toBe('model_error');
    expect(episode.facts.modelError).toBe('the endpoint returned no choice');
  });
});
