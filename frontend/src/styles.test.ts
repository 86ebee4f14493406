import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

// The dashboard's one stylesheet, as its text (jsdom lays nothing out to measure); tests run in frontend/.
const css = readFileSync('src/styles.css', 'utf8');

function rule(selector: string): string | undefined {
  const m = css.match(new RegExp(`(^|\\n)${selector}\\s*\\{([^}]*)\\}`));
  return m?.[2];
}

/** The declarations of the rule whose selector list names `selector` (".a, .b { ... }"). */
function ruleFor(selector: string): string | undefined {
  for (const m of css.matchAll(/(^|\n)([^{}\n]+)\{([^}]*)\}/g)) {
    if (m[2].split(',').map((x) => x.trim()).includes(selector)) return m[3];
  }
  return undefined;
}

function prop(decls: string | undefined, name: string): string | undefined {
  return decls?.match(new RegExp(`(^|;)\\s*${name}:\\s*([^;]+)`))?.[2].trim();
}

describe('styles', () => {
  it("draws a pruned trial's badge in amber and a complete one's in green, never alike", () => {
    const complete = ruleFor('.pill-complete');
    const pruned = ruleFor('.pill-pruned');
    expect(prop(complete, 'color')).toBe('var(--ok)');
    expect(prop(pruned, 'color')).toMatch(/^#f[0-9a-f]b[0-9a-f]{3}$/); // amber: much red, less green, little blue
    expect(prop(pruned, 'background')).not.toBe(prop(complete, 'background'));
    expect(prop(pruned, 'color')).not.toBe(prop(complete, 'color'));
  });

  it('gives fieldsets the theme border instead of the browser default, white on the dark theme', () => {
    expect(rule('fieldset')).toMatch(/border:\s*1px solid var\(--line\)/);
  });
});
