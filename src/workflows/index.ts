export { evaluation } from './evaluation';
export { experimentLadder } from './experimentLadder';
export { grpoStage } from './grpoStage';
export { stackCheck } from './stackCheck';
export { trainingRun } from './trainingRun';
