import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import type { z } from 'zod';
import { redact } from '../redact';

/** An OpenAI-compatible teacher. Sampling settings left unset are left out of requests: the model's defaults apply. */
export interface TeacherEndpoint {
  url: string;
  model: string;
  apiKey?: string;
  /** Reasoning models (o-series, gpt-5) accept only their default. */
  temperature?: number;
  maxCompletionTokens?: number;
}

/** The teacher refused the request itself (a 4xx other than timeouts and rate limits): retrying cannot help. */
export class BadTeacherRequest extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BadTeacherRequest';
  }
}

/** The variable behind each request parameter the user sets, so a refusal can say which one to change. */
const SETTING_OF_PARAM: Record<string, string> = {
  temperature: 'EVALRL_TEACHER_TEMPERATURE',
  max_completion_tokens: 'EVALRL_TEACHER_MAX_COMPLETION_TOKENS',
};

/** Statuses the OpenAI client already retries: passing; every other 4xx is the request's own fault. */
const TRANSIENT_4XX = [408, 409, 429];

/**
 * Asks the teacher one prompt for a reply in `schema`'s shape (strict structured outputs) and returns the reply's
 * text, for parseTeacherReply. Throws BadTeacherRequest when the teacher refuses the request.
 */
export async function askTeacher(
  teacher: TeacherEndpoint,
  prompt: string,
  schema: z.ZodType,
  name: string,
): Promise<string> {
  const client = new OpenAI({ baseURL: teacher.url, apiKey: teacher.apiKey ?? 'unused', timeout: 120_000 });
  try {
    const completion = await client.chat.completions.create({
      model: teacher.model,
      messages: [{ role: 'user', content: prompt }],
      response_format: zodResponseFormat(schema, name),
      // undefined values are left out of the request body
      temperature: teacher.temperature,
      max_completion_tokens: teacher.maxCompletionTokens,
    });
    return completion.choices[0]?.message.content ?? '';
  } catch (err) {
    throw refusal(err, teacher) ?? err;
  }
}

function refusal(err: unknown, teacher: TeacherEndpoint): BadTeacherRequest | undefined {
  if (!(err instanceof OpenAI.APIError) || err.status === undefined) return undefined;
  if (err.status < 400 || err.status >= 500 || TRANSIENT_4XX.includes(err.status)) return undefined;
  const setting = SETTING_OF_PARAM[err.param ?? ''];
  const hint = setting ? `; unset ${setting} to leave it to the model's default` : '';
  return new BadTeacherRequest(
    redact(`teacher ${teacher.model} at ${teacher.url} refused the request: ${err.message}${hint}`),
  );
}

/** The reply as `schema` reads it, or undefined; a JSON object inside text too, for endpoints that ignore response_format. */
export function parseTeacherReply<T>(text: string, schema: z.ZodType<T>): T | undefined {
  try {
    const parsed = schema.safeParse(JSON.parse(text.slice(text.indexOf('{'), text.lastIndexOf('}') + 1)));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined; // not JSON at all
  }
}
