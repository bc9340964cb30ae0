/**
 * Tool calls written as text, for endpoints that return them as content: the Qwen/Hermes
 * `<tool_call>{…}</tool_call>` form or a bare JSON object. (The model server already parses its own output;
 * hosted models and raw completions may not.)
 */
export interface TextToolCall {
  name: string;
  arguments: string;
}

const TAGGED = /<tool_call>\s*([\s\S]*?)\s*(?:<\/tool_call>|$)/g;

function asCall(value: unknown): TextToolCall | null {
  if (typeof value !== 'object' || value === null) return null;
  const { name, arguments: args, parameters } = value as Record<string, unknown>;
  const a = args ?? parameters ?? {};
  if (typeof name !== 'string') return null;
  if (typeof a === 'string') return { name, arguments: a };
  return typeof a === 'object' && a !== null && !Array.isArray(a)
    ? { name, arguments: JSON.stringify(a) }
    : null;
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Calls found in the text; null when the text holds something that looks like a call but is broken. */
export function recoverToolCalls(text: string): TextToolCall[] | null {
  const tagged = [...text.matchAll(TAGGED)].map((m) => m[1]);
  if (tagged.length > 0) {
    const calls = tagged.map((t) => asCall(parse(t)));
    return calls.every((c) => c !== null) ? (calls as TextToolCall[]) : null;
  }
  const stripped = text.trim().replace(/^```(?:json)?\s*([\s\S]*?)\s*```$/, '$1');
  if (!stripped.startsWith('{')) return [];
  const call = asCall(parse(stripped));
  return call ? [call] : null;
}
