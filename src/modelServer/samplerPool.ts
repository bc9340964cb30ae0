/**
 * The sampling pool: several servers (vLLM, or evalrl model servers) behind one OpenAI client, as its `fetch`.
 * Each request goes to a live server that holds the model it names — the least loaded, then the least used —
 * and to any live server when none lists it (an evalrl model server loads a step's checkpoint on demand). A
 * server that does not answer, or answers 502/503, is taken out for a while and the request goes to the next;
 * one that answers 404 for a model it listed forgets it. What each server holds comes from its /v1/models,
 * read at the first request and again (at most every REREAD_MS) whenever no live server lists a requested model
 * (a step just published).
 */
import { z } from 'zod';

export interface PoolServer {
  url: string;
  inFlight: number;
  served: number;
  models: Set<string> | null; // null: not read yet, or unreadable
  downUntil: number;
}

/** A server is out for this long after it failed to answer. */
export const DOWN_MS = 30_000;
const REREAD_MS = 2_000;

const modelListSchema = z.object({ data: z.array(z.object({ id: z.string() })) });

/** The server a request for `model` goes to, among those not yet tried; undefined when none is live. */
export function chooseServer(servers: PoolServer[], model: string, now: number): PoolServer | undefined {
  const live = servers.filter((s) => s.downUntil <= now);
  const holders = live.filter((s) => s.models?.has(model));
  const candidates = holders.length > 0 ? holders : live;
  return candidates.reduce<PoolServer | undefined>(
    (best, s) =>
      !best || s.inFlight < best.inFlight || (s.inFlight === best.inFlight && s.served < best.served)
        ? s
        : best,
    undefined,
  );
}

export interface SamplerPool {
  servers: PoolServer[];
  fetch: typeof fetch;
}

export function createSamplerPool(urls: string[], token?: string): SamplerPool {
  const servers: PoolServer[] = urls.map((url) => ({
    url,
    inFlight: 0,
    served: 0,
    models: null,
    downUntil: 0,
  }));
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  const takeOut = (s: PoolServer) => (s.downUntil = Date.now() + DOWN_MS);

  const readModels = (s: PoolServer) =>
    fetch(new URL('/v1/models', s.url), { headers, signal: AbortSignal.timeout(5000) })
      .then(async (r) => {
        s.models = new Set(modelListSchema.parse(await r.json()).data.map((m) => m.id));
      })
      .catch(() => {
        s.models = null;
        takeOut(s);
      });

  const listed = (model: string) => servers.some((s) => s.downUntil <= Date.now() && s.models?.has(model));
  let readAt = -Infinity;
  const reread = () => {
    readAt = Date.now();
    return Promise.all(servers.map(readModels));
  };

  const poolFetch = async (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    const target = new URL(input instanceof Request ? input.url : input);
    const model = requestedModel(init.body);
    if (model !== undefined && !listed(model) && Date.now() - readAt >= REREAD_MS) await reread();
    const tried = new Set<PoolServer>();
    let last: Response | Error | undefined;
    for (;;) {
      const server = chooseServer(
        servers.filter((s) => !tried.has(s)),
        model ?? '',
        Date.now(),
      );
      if (!server) {
        if (last instanceof Response) return last; // every server refused: the caller reads the last refusal
        throw new Error(`no sampling server answered (${urls.join(', ')})${last ? `: ${last.message}` : ''}`);
      }
      tried.add(server);
      server.inFlight++;
      try {
        const response = await fetch(new URL(target.pathname + target.search, server.url), init);
        if (response.status === 502 || response.status === 503) {
          takeOut(server);
          last = response;
          continue;
        }
        if (response.status === 404 && model !== undefined) {
          server.models?.delete(model);
          last = response;
          continue;
        }
        server.served++;
        return response;
      } catch (err) {
        if (init.signal?.aborted) throw err; // the caller gave up: not the server's fault
        takeOut(server);
        last = err as Error;
      } finally {
        server.inFlight--;
      }
    }
  };
  return { servers, fetch: poolFetch as typeof fetch };
}

function requestedModel(body: RequestInit['body']): string | undefined {
  if (typeof body !== 'string') return undefined;
  try {
    const model = (JSON.parse(body) as { model?: unknown }).model;
    return typeof model === 'string' ? model : undefined;
  } catch {
    return undefined;
  }
}
