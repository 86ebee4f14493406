import { act, render, screen, waitFor } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it, vi } from 'vitest';
import { api } from '../api/client';
import { SignIn, useAuthRequired } from './SignIn';

function Gate() {
  return useAuthRequired() ? <SignIn onSignedIn={() => undefined} /> : <p>content</p>;
}

describe('SignIn', () => {
  it('appears after a 401 and posts the token for a session cookie', async () => {
    const fetchMock = vi.spyOn(globalThis, 'fetch').mockResolvedValueOnce(new Response(JSON.stringify({ detail: 'sign in first' }), { status: 401 }));
    render(<Gate />);
    expect(screen.getByText('content')).toBeInTheDocument();
    await act(() => api.get('/trainings').catch(() => undefined));
    expect(screen.getByRole('dialog', { name: 'Sign in' })).toBeInTheDocument();

    fetchMock.mockResolvedValueOnce(new Response(JSON.stringify({ detail: 'unknown or revoked token' }), { status: 401 }));
    await userEvent.type(screen.getByLabelText('Token'), 'gf_bad');
    await userEvent.click(screen.getByRole('button', { name: 'Sign in' }));
    await waitFor(() => expect(screen.getByRole('alert')).toHaveTextContent('unknown or revoked token'));
    const [url, init] = fetchMock.mock.calls[1];
    expect(url).toBe('/api/v1/auth/sign-in');
    expect(init?.body).toBe('{"token":"gf_bad"}');
  });
});
