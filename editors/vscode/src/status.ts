// What the status bar item says. Plain data in, text out (unit-tested without VS Code).

export type Phase = 'starting' | 'loading' | 'ready' | 'disabled' | 'error' | 'stopped';

export interface StatusState {
  phase: Phase;
  percentage?: number; // model loading progress, 0..100
  message?: string; // progress message or error
  lastLatencyMs?: number; // round trip of the last answered inline completion request
  shown: number; // suggestions VS Code showed (see shown.ts for what counts)
  accepted: number; // suggestions accepted (Tab)
}

export function initialStatus(): StatusState {
  return { phase: 'starting', shown: 0, accepted: 0 };
}

/** Share of shown suggestions that were accepted, as a whole percentage (undefined before any). */
export function acceptanceRate(s: StatusState): number | undefined {
  return s.shown > 0 ? Math.round((100 * s.accepted) / s.shown) : undefined;
}

/** What clicking the item does: the log when the server is not running, else the stats. */
export const SHOW_STATS = 'specfill.showStats';
export const SHOW_LOG = 'specfill.showLog';

export function statusText(s: StatusState): { text: string; tooltip: string; command: string } {
  return { ...statusLabel(s), command: s.phase === 'error' || s.phase === 'stopped' ? SHOW_LOG : SHOW_STATS };
}

function statusLabel(s: StatusState): { text: string; tooltip: string } {
  switch (s.phase) {
    case 'starting':
      return { text: '$(loading~spin) specfill', tooltip: 'specfill: starting the server' };
    case 'loading': {
      const pct = s.percentage !== undefined ? ` ${Math.round(s.percentage)}%` : '';
      return {
        text: `$(loading~spin) specfill${pct}`,
        tooltip: `specfill: loading models${s.message ? ` (${s.message})` : ''}`,
      };
    }
    case 'disabled':
      return { text: '$(circle-slash) specfill', tooltip: 'specfill: disabled (specfill.enable is off)' };
    case 'error':
      return {
        text: `$(error) specfill error: ${s.message ?? 'unknown'}`,
        tooltip: `specfill error: ${s.message ?? 'unknown'}. Click to see the log; run "specfill: Restart Server" to try again`,
      };
    case 'stopped':
      return { text: '$(debug-stop) specfill', tooltip: 'specfill: server stopped. Click to see the log; run "specfill: Restart Server" to start it' };
    case 'ready': {
      const parts: string[] = [];
      const tips = ['specfill: ready'];
      if (s.lastLatencyMs !== undefined) {
        parts.push(`${Math.round(s.lastLatencyMs)} ms`);
        tips.push(`last latency ${Math.round(s.lastLatencyMs)} ms`);
      }
      const rate = acceptanceRate(s);
      if (rate !== undefined) {
        parts.push(`${rate}% accepted`);
        tips.push(`accepted ${s.accepted} of ${s.shown} suggestions`);
      }
      tips.push('click for stats');
      return {
        text: `$(check) specfill${parts.length ? ' ' + parts.join(' · ') : ''}`,
        tooltip: tips.join(' · '),
      };
    }
  }
}
