import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { z } from 'zod';

/**
 * The part of a chat-completions request this double insists on: a strict structured-outputs format
 * (https://platform.openai.com/docs/guides/structured-outputs, `response_format: {type: "json_schema", ...}`).
 */
const requestSchema = z.looseObject({
  model: z.string(),
  messages: z.array(z.looseObject({ role: z.string(), content: z.string() })).min(1),
  response_format: z.object({
    type: z.literal('json_schema'),
    json_schema: z.object({
      name: z.string(),
      strict: z.literal(true),
      schema: z.looseObject({ type: z.literal('object'), additionalProperties: z.literal(false) }),
    }),
  }),
});
export type ChatRequest = z.infer<typeof requestSchema>;

export interface OpenAITeacherDouble {
  /** The base URL an OpenAI client takes (…/v1). */
  url: string;
  /** Every request body received, in order, as sent. */
  requests: Record<string, unknown>[];
  close(): Promise<void>;
}

interface Answer {
  status: number;
  body: object;
}

/** OpenAI's error body for a request it refuses (the shape of the examples cited below). */
const invalid = (message: string, param: string | null, code: string | null): Answer => ({
  status: 400,
  body: { error: { message, type: 'invalid_request_error', param, code } },
});

/** What OpenAI answers a request a reasoning model (o-series, gpt-5) refuses, or undefined. */
function refusal(body: Record<string, unknown>): Answer | undefined {
  // Reasoning models accept only the default temperature (https://platform.openai.com/docs/guides/reasoning);
  // the error body as the API returns it, e.g. https://github.com/tmc/langchaingo/issues/1355 (gpt-5).
  if (body.temperature !== undefined && body.temperature !== 1)
    return invalid(
      `Unsupported value: 'temperature' does not support ${String(body.temperature)} with this model. Only the default (1) value is supported.`,
      'temperature',
      'unsupported_value',
    );
  // API reference, chat/create: max_tokens "is now deprecated in favor of max_completion_tokens, and is not
  // compatible with o-series models" (https://platform.openai.com/docs/api-reference/chat/create); the error
  // as returned for gpt-5, e.g. https://github.com/softwaremill/sttp-ai/issues/490.
  if (body.max_tokens !== undefined)
    return invalid(
      "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
      'max_tokens',
      'unsupported_parameter',
    );
  return undefined;
}

function answer(body: Record<string, unknown>, reply: (request: ChatRequest) => string): Answer {
  const refused = refusal(body);
  if (refused) return refused;
  const parsed = requestSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return invalid(`Invalid request: ${issue.message}`, issue.path.join('.'), null);
  }
  return { status: 200, body: completion(parsed.data.model, reply(parsed.data)) };
}

/** A chat completion object (https://platform.openai.com/docs/api-reference/chat/object) carrying `content`. */
function completion(model: string, content: string): object {
  return {
    id: 'chatcmpl-double',
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content, refusal: null },
        finish_reason: 'stop',
        logprobs: null,
      },
    ],
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
  };
}

/**
 * An OpenAI endpoint serving a reasoning model on 127.0.0.1 (a random port): it refuses what OpenAI refuses for
 * such models and otherwise replies with what `reply` makes of the request, so the test decides the verdict.
 */
export async function startOpenAITeacher(
  reply: (request: ChatRequest) => string,
): Promise<OpenAITeacherDouble> {
  const requests: Record<string, unknown>[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const send = ({ status, body }: Answer) =>
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      if (req.method !== 'POST' || req.url !== '/v1/chat/completions')
        return send({
          ...invalid(`Unknown request URL: ${req.method} ${req.url}`, null, 'unknown_url'),
          status: 404,
        });
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
      requests.push(body);
      send(answer(body, reply));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () => new Promise((resolve, reject) => server.close((err) => (err ? reject(err) : resolve()))),
  };
}
