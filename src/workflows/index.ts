export { policyStage } from './policyStage';
export { stackCheck } from './stackCheck';
