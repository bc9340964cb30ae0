import type { ChatMessage } from '../modelServer/schemas';

/** Qwen3's thinking as a sampling loop has it; absent (a stage started before the switch existed): off. */
type Thinking = { thinking?: boolean };

/**
 * The chat template's variables in every request, vLLM's field and the model server's: Qwen3's template lets
 * the model think unless `enable_thinking` is false.
 */
export const chatTemplateKwargs = (s: Thinking) => ({ enable_thinking: s.thinking ?? false });

/**
 * An assistant turn as the history sends it back. Without thinking, Qwen3's prompt ends with the empty think
 * block the model writes its turn after, but its template renders an earlier turn without that block unless the
 * turn carries reasoning: no turn's prompt would extend the previous prompt and reply, and every turn of an
 * episode would train as a sequence of its own (bench/qwen3_sequences.py). Reasoning "\n" renders as exactly
 * that block (the template strips it); vLLM hands a message's `reasoning` to the template
 * (vllm/renderers/chat_utils/chat_message.py parse_chat_message_content), as the model server does. Thinking,
 * the reasoning is in the reply's content already.
 */
export function sentBack(message: ChatMessage, s: Thinking): ChatMessage {
  return s.thinking || message.role !== 'assistant' ? message : { ...message, reasoning: '\n' };
}

const OPEN = '<think>';
const CLOSE = '</think>';

/**
 * What a reply says after its leading reasoning block (Qwen3's `<think>…</think>`): nothing when the token limit
 * cut the block off; after the first `</think>` when the prompt already opened the block. Plain searches,
 * linear in the text (model output is untrusted: no backtracking regex).
 */
export function afterThinking(text: string): string {
  const start = text.length - text.trimStart().length;
  const end = text.indexOf(CLOSE, start);
  if (text.startsWith(OPEN, start)) return end === -1 ? '' : text.slice(end + CLOSE.length);
  if (end !== -1 && !text.slice(0, end).includes(OPEN)) return text.slice(end + CLOSE.length);
  return text;
}
