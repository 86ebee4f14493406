import type { ReactNode } from 'react';
import { BrowserRouter } from 'react-router-dom';

/**
 * The dashboard's router. Location changes are applied at once, not in a React
 * transition (React Router's default): filters are controlled inputs bound to the
 * URL (status, owner, "Only mine"), and in a transition a click or a keystroke is
 * undone first and redone only when the transition renders, so a checkbox did not
 * change when clicked and typed letters could be lost on a busy machine.
 */
export function AppRouter({ children }: { children: ReactNode }) {
  return <BrowserRouter useTransitions={false}>{children}</BrowserRouter>;
}
