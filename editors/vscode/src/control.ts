// Per-language and manual control: whether a request is made at all, whether it asks for
// alternatives, and what the toggle changes. Plain data in and out (unit-tested without VS Code).

export type Trigger = 'automatic' | 'manual';

/** What to do with one inline completion request. `none`: answer nothing without asking the
 *  server; `one`: the server's one suggestion (automatic triggers, so typing latency does not
 *  change); `alternatives`: the user asked (VS Code's Invoke trigger: Alt+\ or cycling with
 *  Alt+] / Alt+[), so ask specfill/alternatives for up to `candidates` suggestions. */
export type Ask = 'none' | 'one' | 'alternatives';

export function whatToAsk(enabled: boolean, trigger: Trigger | undefined, invoked: boolean, candidates: number): Ask {
  if (!enabled) {
    return 'none';
  }
  if (!invoked) {
    return trigger === 'manual' ? 'none' : 'one';
  }
  return candidates > 1 ? 'alternatives' : 'one';
}

/** The part of WorkspaceConfiguration.inspect()'s answer the toggle reads. */
export interface Inspected<T> {
  globalValue?: T;
  workspaceValue?: T;
  workspaceFolderValue?: T;
  globalLanguageValue?: T;
  workspaceLanguageValue?: T;
  workspaceFolderLanguageValue?: T;
}

export type Level = 'global' | 'workspace' | 'workspaceFolder';

export interface ToggleUpdate {
  value: boolean;
  level: Level;
  /** Write it as the language's override (`"[python]": {...}`). */
  language: boolean;
}

/** What the toggle writes: the opposite of the value in effect, at the most specific place
 *  that sets it now (a language override of this document's language first), so the flip
 *  takes effect; user settings when nothing sets it. */
export function toggleUpdate(inspected: Inspected<boolean> | undefined, effective: boolean): ToggleUpdate {
  const value = !effective;
  const order: [keyof Inspected<boolean>, Level, boolean][] = [
    ['workspaceFolderLanguageValue', 'workspaceFolder', true],
    ['workspaceLanguageValue', 'workspace', true],
    ['globalLanguageValue', 'global', true],
    ['workspaceFolderValue', 'workspaceFolder', false],
    ['workspaceValue', 'workspace', false],
    ['globalValue', 'global', false],
  ];
  for (const [key, level, language] of order) {
    if (inspected?.[key] !== undefined) {
      return { value, level, language };
    }
  }
  return { value, level: 'global', language: false };
}

/** The status bar toggle: an icon and what a click does. No product name in it: the main
 *  status item is the one named specfill. */
export function toggleText(enabled: boolean, languageId: string | undefined): { text: string; tooltip: string } {
  const where = languageId ? ` for ${languageId}` : '';
  return enabled
    ? { text: '$(eye)', tooltip: `Inline suggestions on${where}: click to turn them off` }
    : { text: '$(eye-closed)', tooltip: `Inline suggestions off${where}: click to turn them on` };
}
