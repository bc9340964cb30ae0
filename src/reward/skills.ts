import fs from 'node:fs';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

const frontMatterSchema = z.object({
  name: z.string().regex(/^[a-z][a-z0-9-]*$/, 'lower-case words joined by -'),
  description: z.string().min(10),
  when_to_use: z.string().optional(),
  /** Judges the answer against the reference: not offered to a reference-free judge. */
  needs_reference: z.boolean().default(false),
  verifiers: z.array(z.string()).default([]),
  resources: z.array(z.string()).default([]),
});

/** A reward-evaluation skill package: SKILL.md (front matter + procedure + scoring contract) and its files. */
export interface Skill extends z.infer<typeof frontMatterSchema> {
  folder: string;
  instructions: string;
}

/**
 * Loads every skill folder; a malformed package is an error naming its file and field. A skill that runs a
 * verifier needing the reference answer (not in `referenceFree`) must say so (`needs_reference`).
 */
export function loadSkills(
  root: string,
  knownVerifiers: string[],
  referenceFree: string[] = knownVerifiers,
): Map<string, Skill> {
  const skills = new Map<string, Skill>();
  for (const entry of fs
    .readdirSync(root, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .sort((a, b) => a.name.localeCompare(b.name))) {
    const folder = path.join(root, entry.name);
    const file = path.join(folder, 'SKILL.md');
    if (!fs.existsSync(file)) throw new Error(`${file}: missing (every skill folder needs a SKILL.md)`);
    const text = fs.readFileSync(file, 'utf8');
    const match = /^---\n([\s\S]*?)\n---\n([\s\S]*)$/.exec(text);
    if (!match) throw new Error(`${file}: no front matter (--- name/description … ---)`);
    const parsed = frontMatterSchema.safeParse(parseYaml(match[1]));
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new Error(`${file}: front matter field "${issue.path.join('.')}": ${issue.message}`);
    }
    const skill = { ...parsed.data, folder, instructions: match[2].trim() };
    for (const v of skill.verifiers) {
      if (!knownVerifiers.includes(v))
        throw new Error(`${file}: unknown verifier "${v}"; registered: ${knownVerifiers.join(', ')}`);
      if (!skill.needs_reference && !referenceFree.includes(v))
        throw new Error(`${file}: verifier "${v}" needs the reference answer; set needs_reference: true`);
    }
    for (const r of skill.resources) {
      if (!fs.existsSync(path.join(folder, r)))
        throw new Error(`${file}: resource "${r}" not found in ${folder}`);
    }
    if (skills.has(skill.name)) throw new Error(`${file}: a second skill named "${skill.name}"`);
    skills.set(skill.name, skill);
  }
  return skills;
}

/** A resource's text, only if the skill lists it (no path escapes the package). */
export function readResource(skill: Skill, resource: string): string | null {
  return skill.resources.includes(resource)
    ? fs.readFileSync(path.join(skill.folder, resource), 'utf8')
    : null;
}
