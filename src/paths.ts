import fs from 'node:fs';
import path from 'node:path';

/** The repository root, found from this file whether it runs from src/ (tests) or dist/src/ (the CLI). */
export function repoRoot(): string {
  for (let dir = __dirname; dir !== path.dirname(dir); dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'package.json')) && fs.existsSync(path.join(dir, 'trainer'))) return dir;
  }
  throw new Error(`cannot find the evalrl repository above ${__dirname}`);
}

export const paths = {
  /** The Skill-RM skill packages shipped with evalrl. */
  skills: () => path.join(repoRoot(), 'skills'),
};
