import { act } from 'react';
import { createRoot } from 'react-dom/client';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { endpoints } from './api/endpoints';
import { AppRouter } from './AppRouter';
import { TrainingsPage } from './pages/trainings/TrainingsPage';

type ActEnv = { IS_REACT_ACT_ENVIRONMENT?: boolean };

afterEach(() => {
  (globalThis as ActEnv).IS_REACT_ACT_ENVIRONMENT = true;
  vi.restoreAllMocks();
  window.history.replaceState(null, '', '/');
});

describe('AppRouter', () => {
  it('applies a filter bound to the URL in the click itself, as a browser does', async () => {
    vi.spyOn(endpoints, 'whoami').mockResolvedValue({ name: 'carol', role: 'user', via: 'token', auth_required: true } as never);
    vi.spyOn(endpoints, 'trainings').mockResolvedValue({ data: [], count: 0 });
    window.history.replaceState(null, '', '/trainings');
    const host = document.createElement('div');
    document.body.append(host);
    const root = createRoot(host);
    await act(async () => root.render(<AppRouter><TrainingsPage /></AppRouter>));
    const mine = [...host.querySelectorAll('label')].find((l) => l.textContent?.includes('Only mine'))!.querySelector('input')!;
    await vi.waitFor(() => expect(mine.disabled).toBe(false));
    // A real click, outside act(): what a person (or Playwright) sees right after it.
    (globalThis as ActEnv).IS_REACT_ACT_ENVIRONMENT = false;
    mine.click();
    expect(mine.checked).toBe(true);
    expect(window.location.search).toBe('?owner=carol');
    (globalThis as ActEnv).IS_REACT_ACT_ENVIRONMENT = true;
    await act(async () => root.unmount());
    host.remove();
  });
});
