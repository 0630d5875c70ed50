// What the status bar item says. Plain data in, text out (unit-tested without VS Code).
import { SERVER_METHODS } from './serverCommands';

export type Phase = 'starting' | 'loading' | 'ready' | 'disabled' | 'error' | 'stopped' | 'restarting';

/** Why the server gives the active document no answers (its specfill/documentStatus). */
export interface Refused {
  kind: string; // too_large
  reason: string; // the server's one line
}

/** A remote target that fails, from the server's `specfill/status` notification. */
export interface TargetError {
  kind: string; // unreachable | auth | not_found | server_error | timeout | bad_response | ...
  message: string; // the one line the server's showMessage gave
  url: string;
}

export interface StatusState {
  phase: Phase;
  target?: TargetError; // set while the remote target fails; cleared when it answers again
  refused?: Refused; // the active document gets no answers, and why
  disabledFor?: string; // the active document's language, when specfill.enable is off for it
  percentage?: number; // model loading progress, 0..100
  message?: string; // progress message or error
  lastLatencyMs?: number; // round trip of the last answered inline completion request
  shown: number; // suggestions VS Code showed (see shown.ts for what counts)
  accepted: number; // suggestions accepted (Tab)
}

export function initialStatus(): StatusState {
  return { phase: 'starting', shown: 0, accepted: 0 };
}

/** The phase after an inline completion request ends: an answer says nothing about a server
 *  that is loading, starting, restarting, stopped or failed (a request that was in flight when
 *  the server died ends after the restart notice), so only ready and disabled follow `enabled`. */
export function phaseAfterAnswer(phase: Phase, enabled: boolean): Phase {
  if (phase !== 'ready' && phase !== 'disabled') {
    return phase;
  }
  return enabled ? 'ready' : 'disabled';
}

export const STATUS_NOTIFICATION = SERVER_METHODS.status;
export const DOCUMENT_STATUS_NOTIFICATION = SERVER_METHODS.documentStatus;

/** A specfill/documentStatus ({textDocument: {uri}, state: ok|refused, kind, reason}): the
 *  document's uri and why it gets no answers (undefined: it does). */
export function refusedFromStatus(params: unknown): { uri: string; refused?: Refused } | undefined {
  const p = (params ?? {}) as Record<string, any>;
  const uri = p.textDocument?.uri;
  if (typeof uri !== 'string') {
    return undefined;
  }
  if (p.state !== 'refused') {
    return { uri };
  }
  const str = (v: unknown) => (typeof v === 'string' ? v : '');
  return { uri, refused: { kind: str(p.kind), reason: str(p.reason) } };
}

const REFUSED_WORDS: Record<string, string> = { too_large: 'file too large' };

/** The `specfill/status` params ({backend, url, state: ok|error, kind, message}) as the state's
 *  `target`: an error to show, or undefined when the target is fine. */
export function targetFromStatus(params: unknown): TargetError | undefined {
  const p = (params ?? {}) as Record<string, unknown>;
  if (p.state !== 'error') {
    return undefined;
  }
  const str = (v: unknown) => (typeof v === 'string' ? v : '');
  return { kind: str(p.kind), message: str(p.message), url: str(p.url) };
}

/** Share of shown suggestions that were accepted, as a whole percentage (undefined before any). */
export function acceptanceRate(s: StatusState): number | undefined {
  return s.shown > 0 ? Math.round((100 * s.accepted) / s.shown) : undefined;
}

/** What clicking the item does: the log when the server is not running, else the stats. */
export const SHOW_STATS = 'specfill.showStats';
export const SHOW_LOG = 'specfill.showLog';

export function statusText(s: StatusState): { text: string; tooltip: string; command: string } {
  const toLog = s.phase === 'error' || s.phase === 'stopped' || s.phase === 'restarting' || (s.phase === 'ready' && s.target !== undefined);
  return { ...statusLabel(s), command: toLog ? SHOW_LOG : SHOW_STATS };
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
    case 'disabled': {
      const where = s.disabledFor ? ` for ${s.disabledFor}` : '';
      return {
        text: `$(circle-slash) specfill: off${where}`,
        tooltip: `specfill: no suggestions${where}: specfill.enable is off${s.disabledFor ? ` for ${s.disabledFor} ("[${s.disabledFor}]")` : ''}`,
      };
    }
    case 'restarting':
      return {
        text: '$(sync~spin) specfill: restarting',
        tooltip: `${s.message ?? 'specfill: the server exited; starting it again'}. Click to see the log`,
      };
    case 'error':
      return {
        text: `$(error) specfill error: ${s.message ?? 'unknown'}`,
        tooltip: `specfill error: ${s.message ?? 'unknown'}. Click to see the log; run "specfill: Restart Server" to try again`,
      };
    case 'stopped':
      return { text: '$(debug-stop) specfill', tooltip: 'specfill: server stopped. Click to see the log; run "specfill: Restart Server" to start it' };
    case 'ready': {
      if (s.refused) {
        return {
          text: `$(circle-slash) specfill: ${REFUSED_WORDS[s.refused.kind] ?? 'no suggestions here'}`,
          tooltip: `specfill: no suggestions for this file: ${s.refused.reason}`,
        };
      }
      if (s.target) {
        const what = s.target.kind ? s.target.kind.replace(/_/g, ' ') : 'failing';
        return {
          text: `$(warning) specfill remote error: ${what}`,
          tooltip: `specfill: the remote target ${s.target.url} fails: ${s.target.message}. No completions until it answers again (this clears itself). Click to see the log`,
        };
      }
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
