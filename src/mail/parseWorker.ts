import type { ParseResult, RawMessage } from './email';
import { parseMessage } from './parse';

/** Piscina task: parses a chunk of messages in a worker thread (parsing is the CPU-heavy part of ingest). */
export default function parseChunk(messages: RawMessage[]): Promise<ParseResult[]> {
  return Promise.all(messages.map(parseMessage));
}
