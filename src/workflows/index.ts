export { stackCheck } from './stackCheck';
