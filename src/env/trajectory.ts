import { z } from 'zod';
import { chatMessageSchema } from '../modelServer/schemas';

/** One model call of an episode: what was sent, what came back, with the sampled tokens when the server gives them. */
export const turnSchema = z.object({
  promptTokenIds: z.array(z.number().int()).optional(),
  tokenIds: z.array(z.number().int()).optional(),
  logprobs: z.array(z.number()).optional(),
  finishReason: z.string(),
  /** The version the server sampled from, `policy@step-3` (absent in turns stored before this field). */
  model: z.string().optional(),
  modelMs: z.number(),
  toolMs: z.number(),
});
export type Turn = z.infer<typeof turnSchema>;

/** What the agent did, beside the raw messages: the facts the deterministic reward layer reads. */
export const episodeFactsSchema = z.object({
  answer: z.string().nullable(),
  sources: z.array(z.string()),
  searchedIds: z.array(z.string()), // every message id any search returned
  readIds: z.array(z.string()), // every message id read_email returned
  malformedCalls: z.number().int(),
  unknownTools: z.number().int(),
  badArguments: z.number().int(),
  turns: z.number().int(),
  ending: z.enum(['answered', 'max_turns', 'context_budget', 'malformed', 'model_error']),
  /** Why the episode ended as model_error, stored with it (absent in episodes stored before this field). */
  modelError: z.string().nullable().optional(),
});
export type EpisodeFacts = z.infer<typeof episodeFactsSchema>;

export const trajectorySchema = z.object({
  messages: z.array(chatMessageSchema),
  turns: z.array(turnSchema),
  facts: episodeFactsSchema,
  wallMs: z.number(),
});
export type Trajectory = z.infer<typeof trajectorySchema>;

/** The facts of an episode before its first turn (it ends at max_turns unless something else ends it). */
export function initialFacts(): EpisodeFacts {
  return {
    answer: null,
    sources: [],
    searchedIds: [],
    readIds: [],
    malformedCalls: 0,
    unknownTools: 0,
    badArguments: 0,
    turns: 0,
    ending: 'max_turns',
    modelError: null,
  };
}
