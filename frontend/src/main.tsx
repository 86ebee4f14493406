import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { App } from './App';
import { adoptPageKeyFromFragment } from './api/client';
import { AppRouter } from './AppRouter';
import './styles.css';

// A sign-in link lands here with the session's page key in the fragment: keep it before any request is sent.
adoptPageKeyFromFragment();

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <AppRouter>
      <App />
    </AppRouter>
  </StrictMode>,
);
