import { samplingUsageBetween } from '../../src/stack/modelServer';

const reading = (
  prefill: number,
  decode: number,
  tokens: number,
  hit: number,
  computed: number,
  shared = 0,
) => ({
  sampling: { prefill_s: prefill, decode_s: decode, decoded_tokens: tokens, shared_samples: shared },
  prefix_cache: { hit_tokens: hit, computed_tokens: computed },
});

describe("a job's sampling usage", () => {
  it("is what the server counted since the job began, not an earlier job's share", () => {
    expect(
      samplingUsageBetween(
        reading(316.6, 664.1, 16428, 85678, 51561, 3),
        reading(1500.25, 2900.1, 90000, 300000, 150000, 19),
      ),
    ).toEqual({
      prefill_s: 1183.7,
      decode_s: 2236,
      decoded_tokens: 73572,
      shared_samples: 16,
      prompt_tokens_cached: 214322,
      prompt_tokens_computed: 98439,
    });
  });

  it('is everything the server counted when it started with the job', () => {
    expect(samplingUsageBetween(null, reading(10, 20, 30, 40, 50))).toEqual({
      prefill_s: 10,
      decode_s: 20,
      decoded_tokens: 30,
      shared_samples: 0,
      prompt_tokens_cached: 40,
      prompt_tokens_computed: 50,
    });
  });
});
