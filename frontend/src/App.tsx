import { NavLink, Route, Routes } from 'react-router-dom';
import { useLiveStatus } from './api/useLive';
import { SignIn, useAuthRequired } from './components/SignIn';
import { CalendarPage } from './pages/calendar/CalendarPage';
import { useFleet } from './pages/fleet/useFleet';
import { FleetPage } from './pages/fleet/FleetPage';
import { GpuPage } from './pages/fleet/GpuPage';
import { HistoryPage } from './pages/history/HistoryPage';
import { CreateTrainingPage } from './pages/trainings/CreateTrainingPage';
import { TrainingDetailPage } from './pages/trainings/TrainingDetailPage';
import { TrainingsPage } from './pages/trainings/TrainingsPage';
import { NewSessionPage } from './pages/sessions/NewSessionPage';
import { SessionsPage } from './pages/sessions/SessionsPage';
import { SweepDetailPage } from './pages/sweeps/SweepDetailPage';
import { NewSweepPage } from './pages/sweeps/NewSweepPage';
import { SweepsPage } from './pages/sweeps/SweepsPage';
import { TeamPage } from './pages/team/TeamPage';
import { UsagePage } from './pages/usage/UsagePage';

function LiveBadge() {
  const status = useLiveStatus();
  if (status === 'idle') return null;
  const text = status === 'open' ? 'live' : status === 'connecting' ? 'connecting…' : 'offline';
  return (
    <span className={`live live-${status}`} role="status" aria-live="polite" title="Live updates over WebSocket">
      <span className="live-dot" aria-hidden /> {text}
    </span>
  );
}

function SimulatedBanner() {
  // A slow poll: only whether the fleet is simulated, which rarely changes.
  const { simulated } = useFleet(60_000);
  if (!simulated) return null;
  return (
    <div className="banner banner-sim" data-testid="simulated-banner">
      Simulated fleet: these GPUs are not real hardware (GPUFLEET_SIMULATE). Trainings run on the CPU.
    </div>
  );
}

function AppRoutes() {
  return (
    <Routes>
      <Route path="/" element={<FleetPage />} />
      <Route path="/gpus/:host/:index" element={<GpuPage />} />
      <Route path="/history" element={<HistoryPage />} />
      <Route path="/trainings" element={<TrainingsPage />} />
      <Route path="/trainings/new" element={<CreateTrainingPage />} />
      <Route path="/trainings/:id" element={<TrainingDetailPage />} />
      <Route path="/sessions" element={<SessionsPage />} />
      <Route path="/sessions/new" element={<NewSessionPage />} />
      <Route path="/sweeps" element={<SweepsPage />} />
      <Route path="/sweeps/new" element={<NewSweepPage />} />
      <Route path="/sweeps/:id" element={<SweepDetailPage />} />
      <Route path="/calendar" element={<CalendarPage />} />
      <Route path="/usage" element={<UsagePage />} />
      <Route path="/team" element={<TeamPage />} />
      <Route
        path="*"
        element={
          <div className="page">
            <h2>Page not found</h2>
            <p>
              <NavLink to="/">Back to the fleet</NavLink>
            </p>
          </div>
        }
      />
    </Routes>
  );
}

export function App() {
  const needSignIn = useAuthRequired();
  return (
    <div className="app">
      <header className="topbar">
        <a className="brand" href="/">
          gpufleet
        </a>
        <nav aria-label="Main">
          <NavLink to="/" end>
            Fleet
          </NavLink>
          <NavLink to="/history">History</NavLink>
          <NavLink to="/trainings" end>
            Trainings
          </NavLink>
          <NavLink to="/trainings/new">New training</NavLink>
          <NavLink to="/sessions" end>
            Sessions
          </NavLink>
          <NavLink to="/sessions/new">New session</NavLink>
          <NavLink to="/sweeps" end>
            Sweeps
          </NavLink>
          <NavLink to="/sweeps/new">New sweep</NavLink>
          <NavLink to="/calendar">Calendar</NavLink>
          <NavLink to="/usage">Usage</NavLink>
          <NavLink to="/team">Team</NavLink>
        </nav>
        <LiveBadge />
      </header>
      <SimulatedBanner />
      <main>
        {needSignIn ? <SignIn /> : <AppRoutes />}
      </main>
    </div>
  );
}
