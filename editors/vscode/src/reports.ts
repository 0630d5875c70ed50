// User acceptance reports to the server: specfill/shown, specfill/accepted (partial, with the
// length) and specfill/dismissed, each naming the suggestion id the server put on the item.
//
// What VS Code lets an extension see, and so when each report goes:
// - shown: when shown.ts counts the answer (still current SETTLE_MS after it arrived). Only
//   the first item: with alternatives, which one VS Code draws while cycling is not told to
//   extensions (handleDidShowCompletionItem is a proposed API).
// - partial accepts: VS Code tells a provider through handleDidPartiallyAcceptCompletionItem,
//   a proposed API too (inlineCompletionsAdditions), which a packaged extension cannot use,
//   and vscode-languageclient owns the provider. So they are read from the document: one
//   change that inserts two or more characters at the suggestion's point that are exactly its
//   next characters is an accept (word / line); single characters that match are typing
//   through, which keeps the suggestion but is not reported as an accept.
// - full accept: the item's command (accept.ts), with the id of the suggestion as first shown
//   (typing through makes VS Code ask again; the server's answer is the same suggestion under
//   a new id, which is mapped back).
// - dismissed: no event says a suggestion went away (Escape, the cursor moving). It is reported
//   when the next thing that replaces it is known: another suggestion counted shown, an empty
//   answer for the document, a text change that leaves the suggestion, the document closed, or
//   the extension stopping.
// Plain data in and out; `send` does the talking (unit-tested without VS Code).

import { SERVER_METHODS } from './serverCommands';

export const SHOWN = SERVER_METHODS.shown;
export const ACCEPTED_PART = SERVER_METHODS.accepted;
export const DISMISSED = SERVER_METHODS.dismissed;

export type Send = (method: string, params: Record<string, unknown>) => void;

/** The suggestion id in an item's command: the server's command ({id, length} argument), or
 *  the extension's accept command carrying it (accept.ts). */
export function suggestionId(command: { command?: string; arguments?: unknown[] } | undefined): number | undefined {
  const arg = command?.arguments?.[0] as { id?: unknown; arguments?: unknown[] } | undefined;
  if (typeof arg?.id === 'number') {
    return arg.id;
  }
  if (arg && Array.isArray(arg.arguments)) {
    return suggestionId(arg as { arguments?: unknown[] });
  }
  return undefined;
}

/** The server's accept command with its suggestion id replaced by `id`. */
export function withId<C extends { arguments?: unknown[] }>(command: C, id: number): C {
  const [first, ...rest] = command.arguments ?? [];
  return { ...command, arguments: [{ ...(first as object), id }, ...rest] };
}

interface Tracked {
  id: number;
  identity: string;
  text: string; // the suggestion as shown, from the point it was shown at
  offset: number; // how much of it is in the document now (accepted or typed through)
  line: number;
  character: number; // where its next character goes
}

/** An edit of one document, as VS Code reports it (one contentChange, line/character). */
export interface Edit {
  startLine: number;
  startCharacter: number;
  rangeLength: number;
  text: string;
}

export class UserReports {
  private current = new Map<string, Tracked>(); // document -> the suggestion shown there
  private aliases = new Map<number, { first: number; document: string }>(); // later id of the same suggestion -> first shown id

  constructor(private readonly send: Send) {}

  /** shown.ts counted a suggestion as shown: report it, and a different one it replaced as
   *  dismissed. `text` is what it inserts at (line, character). */
  shown(document: string, id: number, identity: string, text: string, line: number, character: number): void {
    this.dismiss(document);
    this.forgetAliases(document);
    this.current.set(document, { id, identity, text, offset: 0, line, character });
    this.send(SHOWN, { id });
  }

  /** A current answer for the document that shown.ts did not count again: the same suggestion
   *  under a new id (typed through), or nothing (`id` undefined: an empty answer, the shown
   *  one is gone). */
  answered(document: string, id: number | undefined, identity: string | undefined): void {
    const tracked = this.current.get(document);
    if (!tracked) {
      return;
    }
    if (id === undefined) {
      this.dismiss(document);
    } else if (identity === tracked.identity && id !== tracked.id) {
      this.aliases.set(id, { first: tracked.id, document });
    }
  }

  /** The id to report a full accept of item `id` under (its first shown id); it is done. */
  accepted(id: number): number {
    const alias = this.aliases.get(id);
    const first = alias?.first ?? id;
    for (const [document, tracked] of [...this.current]) {
      if (tracked.id === first) {
        this.current.delete(document);
      }
    }
    if (alias) {
      this.forgetAliases(alias.document);
    }
    return first;
  }

  /** A change of the document: a partial accept (reported), typing through, or the end of
   *  the suggestion (reported as dismissed). One edit that puts in all the rest is the full
   *  accept, which the item's command reports (accepted()). */
  edited(document: string, edit: Edit): void {
    const tracked = this.current.get(document);
    if (!tracked) {
      return;
    }
    const rest = tracked.text.slice(tracked.offset);
    const atPoint = edit.startLine === tracked.line && edit.startCharacter === tracked.character;
    if (!atPoint || edit.text === '' || !rest.startsWith(edit.text)) {
      this.dismiss(document);
      return;
    }
    tracked.offset += edit.text.length;
    const lines = edit.text.split('\n');
    tracked.line += lines.length - 1;
    tracked.character = lines.length > 1 ? lines[lines.length - 1].length : tracked.character + edit.text.length;
    if (tracked.offset >= tracked.text.length) {
      // All of it is in: Tab (its command reports it; aliases kept for it) or typed through.
      this.current.delete(document);
    } else if (edit.text.length >= 2) {
      this.send(ACCEPTED_PART, { id: tracked.id, acceptedLength: tracked.offset, full: false });
    }
  }

  /** The shown suggestion of `document` went away: dismissed. */
  dismiss(document: string): void {
    const tracked = this.current.get(document);
    if (tracked) {
      this.current.delete(document);
      this.send(DISMISSED, { id: tracked.id });
    }
  }

  /** The document closed: its suggestion is gone. */
  closed(document: string): void {
    this.dismiss(document);
    this.forgetAliases(document);
  }

  /** Every shown suggestion goes away (the extension stops). */
  dismissAll(): void {
    for (const document of [...this.current.keys()]) {
      this.closed(document);
    }
  }

  private forgetAliases(document: string): void {
    for (const [alias, { document: doc }] of [...this.aliases]) {
      if (doc === document) {
        this.aliases.delete(alias);
      }
    }
  }
}
