/**
 * The sampling pool: several servers (vLLM, or evalrl model servers) behind one OpenAI client, as its `fetch`.
 * Each request goes to a live server that holds the model it names — the least loaded, then the least used —
 * and to any live server when none lists it (an evalrl model server loads a step's checkpoint on demand). A
 * server that does not answer, or answers 502/503, is taken out for a while and the request goes to the next;
 * one that answers 404 for a model it listed forgets it. What each server holds comes from its /v1/models,
 * read at the first request and again (at most every REREAD_MS) whenever no live server lists a requested model
 * (a step just published). A vLLM sampler forgets its loaded adapters when it restarts: given `republish`, a 404
 * for a trained version (`policy@step-3`) has it loaded there again from its checkpoint, and the request retried;
 * and while every server is out, a request waits (up to `waitForServersMs`) for one to answer again.
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

/** Loads a trained version (`policy@step-3`) on one server again; false when there is nothing to load. */
export type Republish = (url: string, model: string) => Promise<boolean>;

const VERSION = /^[A-Za-z][A-Za-z0-9_-]*@step-\d+$/;

export interface PoolOptions {
  token?: string;
  republish?: Republish;
  /** When every server is out, how long a request waits for one to answer again (a sampler restarting). */
  waitForServersMs?: number;
}

export function createSamplerPool(urls: string[], options: PoolOptions = {}): SamplerPool {
  const { token, republish, waitForServersMs = 180_000 } = options;
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
        s.downUntil = 0; // it answers: back in
      })
      .catch(() => {
        s.models = null;
        takeOut(s);
      });

  const listed = (model: string) => servers.some((s) => s.downUntil <= Date.now() && s.models?.has(model));
  // One load per server and version however many requests met the 404 together.
  const republishing = new Map<string, Promise<boolean>>();
  const publishAgain = (s: PoolServer, model: string): Promise<boolean> => {
    const key = `${s.url} ${model}`;
    let loading = republishing.get(key);
    if (!loading) {
      loading = republish!(s.url, model)
        .then((loaded) => (loaded && s.models?.add(model), loaded))
        .catch(() => false)
        .finally(() => republishing.delete(key));
      republishing.set(key, loading);
    }
    return loading;
  };
  /** Waits until an out server answers again (true), or until `deadline` (false). */
  const serverBack = async (deadline: number, signal?: AbortSignal | null): Promise<boolean> => {
    while (Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 1000));
      signal?.throwIfAborted();
      await Promise.all(servers.filter((s) => s.downUntil > Date.now()).map(readModels));
      if (servers.some((s) => s.downUntil <= Date.now())) return true;
    }
    return false;
  };
  let readAt = -Infinity;
  const reread = () => {
    readAt = Date.now();
    return Promise.all(servers.map(readModels));
  };

  const poolFetch = async (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    const target = new URL(input instanceof Request ? input.url : input);
    const model = requestedModel(init.body);
    if (model !== undefined && !listed(model) && Date.now() - readAt >= REREAD_MS) await reread();
    const waitUntil = Date.now() + waitForServersMs;
    const tried = new Set<PoolServer>();
    const republished = new Set<PoolServer>();
    let last: Response | Error | undefined;
    for (;;) {
      const server = chooseServer(
        servers.filter((s) => !tried.has(s)),
        model ?? '',
        Date.now(),
      );
      if (!server) {
        if (last instanceof Response) return last; // every server refused: the caller reads the last refusal
        if (await serverBack(waitUntil, init.signal)) {
          tried.clear(); // a server that was out answers again: every server may be asked again
          continue;
        }
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
          if (republish && VERSION.test(model) && !republished.has(server)) {
            republished.add(server);
            if (await publishAgain(server, model)) tried.delete(server); // ask it again
          }
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
