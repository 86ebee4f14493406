import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

// The dashboard's one stylesheet, as its text (jsdom lays nothing out to measure); tests run in frontend/.
const css = readFileSync('src/styles.css', 'utf8');

function rule(selector: string): string | undefined {
  const m = css.match(new RegExp(`(^|\\n)${selector}\\s*\\{([^}]*)\\}`));
  return m?.[2];
}

describe('styles', () => {
  it('gives fieldsets the theme border instead of the browser default, white on the dark theme', () => {
    expect(rule('fieldset')).toMatch(/border:\s*1px solid var\(--line\)/);
  });
});
