// What Tab on a suggestion runs. The server puts its own command on each item (LSP 3.18: the
// client runs it on a full accept; the server counts user acceptance with it), and the status
// bar counts accepts too. An item carries one command, so the extension's command counts the
// accept and then runs the server's, which it carries as its argument.
import type { Command } from 'vscode';

export const ACCEPTED = 'specfill.internal.accepted';

/** The command for an offered item whose own (server) command is `serverCommand`. */
export function acceptCommand(serverCommand?: Command): Command {
  return { title: 'specfill: accepted', command: ACCEPTED, arguments: serverCommand ? [serverCommand] : [] };
}

/** Runs on accept: counts it, then runs the server's command (if the item had one). */
export async function onAccepted(
  count: () => void,
  execute: (command: string, ...args: unknown[]) => Thenable<unknown>,
  serverCommand?: Command,
): Promise<void> {
  count();
  if (serverCommand) {
    await execute(serverCommand.command, ...(serverCommand.arguments ?? []));
  }
}
