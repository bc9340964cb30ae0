import fs from 'node:fs';
import path from 'node:path';
import {
  hyperparametersJsonSchema,
  hyperparametersSchema,
  parseHyperparameterChange,
} from '../../src/hyperparameters';

const EXPORTED = path.resolve(__dirname, '../../trainer/hyperparameters.schema.json');

it('the exported schema the Python server is checked against is the schema itself', () => {
  // On a change: node -e "console.log(JSON.stringify(require('./dist/src/hyperparameters').hyperparametersJsonSchema(), null, 2))" > trainer/hyperparameters.schema.json
  expect(JSON.parse(fs.readFileSync(EXPORTED, 'utf8'))).toEqual(hyperparametersJsonSchema());
});

it('fills defaults, refuses unknown keys and values out of the server bounds, naming them', () => {
  expect(hyperparametersSchema.parse({})).toEqual({
    learning_rate: 1e-5,
    clip_low: 0.2,
    clip_high: 0.28,
    kl_coef: 0,
    max_grad_norm: 1,
    loss_aggregation: 'token-mean',
    tis_imp_ratio_cap: 0,
  });
  expect(() => parseHyperparameterChange({ learning_rate: 0 })).toThrow(/learning_rate: Too small/);
  expect(() => parseHyperparameterChange({ lr: 1e-5 })).toThrow(/lr: Unrecognized key/);
  expect(() => parseHyperparameterChange({ loss_aggregation: 'mean' })).toThrow(/loss_aggregation/);
  expect(parseHyperparameterChange({ clip_high: 0.3 })).toEqual({ clip_high: 0.3 });
});
