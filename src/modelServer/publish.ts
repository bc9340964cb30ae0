import { ModelServerClient } from './client';

export interface Publication {
  address: string;
  published: string[];
  failed: { url: string; error: string }[];
}

/**
 * Publishes a trained step to every sampling server under its address, `policy@step-3` (vLLM's
 * load_lora_adapter; the checkpoint lies on storage they share), and drops the step two before it, which no
 * rollout asks for any more (step N+1 samples from step N). A server that does not take it is skipped: the
 * pool sends that step's requests to the servers that list it. Throws when no server took it.
 */
export async function publishStep(
  urls: string[],
  token: string | undefined,
  v: { adapter: string; step: number; checkpoint: string },
): Promise<Publication> {
  const address = `${v.adapter}@step-${v.step}`;
  const outcomes = await Promise.all(
    urls.map(async (url) => {
      try {
        await loadVersion(url, token, address, v.checkpoint);
        const server = new ModelServerClient({ url, token, attempts: 2, timeoutMs: 60_000 });
        if (v.step >= 2) await server.unloadAdapter(`${v.adapter}@step-${v.step - 2}`).catch(() => {});
        return { url };
      } catch (err) {
        return { url, error: (err as Error).message };
      }
    }),
  );
  const failed = outcomes.flatMap((o) => (o.error === undefined ? [] : [{ url: o.url, error: o.error }]));
  if (failed.length === urls.length)
    throw new Error(
      `no sampling server took ${address}: ${failed.map((f) => `${f.url}: ${f.error}`).join('; ')}`,
    );
  return { address, published: outcomes.filter((o) => o.error === undefined).map((o) => o.url), failed };
}

/**
 * Loads a version on one sampling server (vLLM's load_lora_adapter), in place: a name the server already holds,
 * from a retried publication or planted there by someone else, is loaded again from the run's own checkpoint.
 */
export async function loadVersion(
  url: string,
  token: string | undefined,
  address: string,
  checkpoint: string,
) {
  const server = new ModelServerClient({ url, token, attempts: 2, timeoutMs: 60_000 });
  await server.loadAdapter(address, checkpoint, true);
}
