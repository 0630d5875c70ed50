// When to start the server again after it exits unexpectedly (killed, crashed): after 1 s, 2 s,
// then 4 s; a fourth exit in a row is the last (the user is told, and "specfill: Restart Server"
// starts it). A server that ran STABLE_MS without exiting starts the count again. Plain data in
// and out (unit-tested without VS Code); extension.ts does the starting.

export const RESTART_DELAYS_MS: readonly number[] = [1000, 2000, 4000];
export const STABLE_MS = 60000;

/** How the server process ended: its exit code, or the signal that ended it. */
export interface Exit {
  code: number | null;
  signal: string | null;
}

export type Decision = { restart: true; delayMs: number; attempt: number; of: number } | { restart: false; exits: number };

export class RestartPolicy {
  private exits = 0;
  private startedAt: number | undefined;

  constructor(
    private readonly delaysMs: readonly number[] = RESTART_DELAYS_MS,
    private readonly stableMs: number = STABLE_MS,
  ) {}

  /** A server is running (initialized) since `now` (ms). */
  started(now: number): void {
    this.startedAt = now;
  }

  /** Started by hand: the count starts again. */
  reset(): void {
    this.exits = 0;
    this.startedAt = undefined;
  }

  /** The running server exited unexpectedly at `now`: start it again after a delay, or not. */
  exited(now: number): Decision {
    if (this.startedAt !== undefined && now - this.startedAt >= this.stableMs) {
      this.exits = 0;
    }
    this.startedAt = undefined;
    this.exits += 1;
    const delayMs = this.delaysMs[this.exits - 1];
    if (delayMs === undefined) {
      return { restart: false, exits: this.exits };
    }
    return { restart: true, delayMs, attempt: this.exits, of: this.delaysMs.length };
  }
}

/** 'signal SIGKILL' / 'code 1'. */
export function describeExit(exit: Exit | undefined): string {
  if (!exit) {
    return 'its connection closed';
  }
  return exit.code !== null ? `code ${exit.code}` : `signal ${exit.signal}`;
}

/** The one notice for an unexpected exit and what happens next. */
export function exitNotice(exit: Exit | undefined, decision: Decision): string {
  const how = describeExit(exit);
  if (decision.restart) {
    return `specfill: the server exited (${how}); starting it again in ${Math.round(decision.delayMs / 1000)} s (${decision.attempt} of ${decision.of})`;
  }
  return `specfill: the server exited (${how}), ${decision.exits} times in a row: not starting it again ("specfill: Show Log" shows why, "specfill: Restart Server" starts it)`;
}
